#pragma once
// Finite-difference gradient checks in f64, with PyTorch's semantics: every input element that
// requires grad is perturbed by +-eps and the central difference is compared with the
// analytical Jacobian from backward(), |analytical - numerical| <= atol + rtol * |numerical|.
// The fast mode compares one random projection v^T J u instead of the whole Jacobian.
#include <functional>
#include <string>
#include <vector>

#include "tapegrad/autograd/tensor.h"

namespace tg {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
  bool fast = false;     // random projection v^T J u instead of every element
  uint64_t seed = 1234;  // for the fast mode's u and v
};

struct GradcheckResult {
  bool passed = true;
  double max_abs_err = 0;
  double max_rel_err = 0;
  int64_t compared = 0;   // Jacobian entries (or projections) compared
  std::string message;    // where the worst mismatch is, when it fails
};

using GradcheckFn = std::function<Tensor(const std::vector<Tensor>&)>;

// inputs: f64 tensors; the ones with requires_grad are checked. fn must be deterministic.
GradcheckResult gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& options = {});

// A named case that tests and `tapegrad gradcheck` share.
struct GradcheckCase {
  std::string name;    // "matmul/broadcast-batched"
  std::string shapes;  // for the table: "[2,3,4] @ [4,5]"
  // Runs the case with every tensor it makes on `device` (a DefaultDeviceScope).
  std::function<GradcheckResult(Device device)> run;
};

}  // namespace tg

namespace tg {

// A case whose inputs come from make_inputs() after seeding the generator from the name, so
// every run of the case sees the same numbers.
GradcheckCase make_case(std::string name, std::string shapes,
                        std::function<std::vector<Tensor>()> make_inputs, GradcheckFn fn,
                        GradcheckOptions options = {});

// An f64 leaf with values uniform in [low, high) that requires grad.
Tensor random_leaf(const Shape& shape, double low = -1.0, double high = 1.0);

}  // namespace tg
