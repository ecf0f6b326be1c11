#include "tapegrad/autograd/gradcheck.h"

#include <cmath>
#include <sstream>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/autograd/tape.h"

namespace tg {
namespace {

// Element `index` (row-major) of a possibly strided tensor as a 0-d view of the same storage, so
// that it is read and written through its device's kernels (item() and fill()).
Tensor element(const Tensor& t, int64_t index) {
  int64_t offset = t.offset();
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    offset += (index % t.shape()[d]) * t.strides()[d];
    index /= t.shape()[d];
  }
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = t.storage();
  impl->offset = offset;
  impl->dtype = t.dtype();
  return Tensor(impl);
}

void set_element(const Tensor& t, int64_t index, double value) {
  kernels(t.device()).fill(element(t, index), value);
  t.bump_version();  // an in-place write (tape.h)
}

std::vector<double> evaluate(const GradcheckFn& fn, const std::vector<Tensor>& inputs) {
  NoGrad no_grad;
  return fn(inputs).to_host_f64();
}

// Runs fn with grad, back-propagates `seed`, returns each checked input's gradient values.
std::vector<std::vector<double>> analytical(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                                            const std::vector<double>& seed) {
  for (const Tensor& input : inputs) input.zero_grad();
  Tensor out = fn(inputs);
  std::vector<std::vector<double>> grads;
  if (out.requires_grad()) out.backward(from_values(seed, out.shape(), DType::f64, out.device()));
  for (const Tensor& input : inputs) {
    if (!input.requires_grad()) continue;
    grads.push_back(input.grad().defined() ? input.grad().to_host_f64()
                                           : std::vector<double>(input.numel(), 0.0));
    input.zero_grad();
  }
  return grads;
}

void compare(GradcheckResult& result, double analytic, double numeric,
             const GradcheckOptions& options, const std::string& where) {
  const double abs_err = std::abs(analytic - numeric);
  // Relative to |numerical|, floored at atol so that entries that are 0 do not blow it up.
  const double rel_err = abs_err / std::max(std::abs(numeric), options.atol);
  ++result.compared;
  result.max_abs_err = std::max(result.max_abs_err, abs_err);
  result.max_rel_err = std::max(result.max_rel_err, rel_err);
  const bool ok = std::isfinite(analytic) && abs_err <= options.atol + options.rtol * std::abs(numeric);
  if (!ok && result.passed) {
    std::ostringstream message;
    message << where << ": analytical " << analytic << " vs numerical " << numeric;
    result.message = message.str();
  }
  result.passed = result.passed && ok;
}

GradcheckResult full_check(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                           const GradcheckOptions& options) {
  GradcheckResult result;
  const int64_t outputs = static_cast<int64_t>(evaluate(fn, inputs).size());
  // Analytical Jacobian, one row per output element (a backward with a one-hot seed).
  std::vector<std::vector<std::vector<double>>> rows;
  for (int64_t j = 0; j < outputs; ++j) {
    std::vector<double> seed(outputs, 0.0);
    seed[j] = 1.0;
    rows.push_back(analytical(fn, inputs, seed));
  }
  // Numerical Jacobian, one column per input element (central differences).
  int64_t checked = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& input = inputs[i];
    if (!input.requires_grad()) continue;
    for (int64_t e = 0; e < input.numel(); ++e) {
      const double original = element(input, e).item();
      set_element(input, e, original + options.eps);
      const auto plus = evaluate(fn, inputs);
      set_element(input, e, original - options.eps);
      const auto minus = evaluate(fn, inputs);
      set_element(input, e, original);
      for (int64_t j = 0; j < outputs; ++j) {
        const double numeric = (plus[j] - minus[j]) / (2 * options.eps);
        std::ostringstream where;
        where << "input " << i << " element " << e << ", output element " << j;
        compare(result, rows[j][checked][e], numeric, options, where.str());
      }
    }
    ++checked;
  }
  return result;
}

GradcheckResult fast_check(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                           const GradcheckOptions& options) {
  GradcheckResult result;
  const RngState previous = rng_state();
  set_rng_state({options.seed, 0});  // this thread's draws only (manual_seed: every thread's)
  const int64_t outputs = static_cast<int64_t>(evaluate(fn, inputs).size());
  const std::vector<double> v = rand({outputs}, DType::f64, kCPU).to_host_f64();
  std::vector<std::vector<double>> u;
  for (const Tensor& input : inputs) {
    if (input.requires_grad()) u.push_back(rand({input.numel()}, DType::f64, kCPU).to_host_f64());
  }
  set_rng_state(previous);
  // v^T J u analytically: the gradient for seed v, dotted with u.
  const auto grads = analytical(fn, inputs, v);
  double analytic = 0;
  for (size_t i = 0; i < u.size(); ++i) {
    for (size_t e = 0; e < u[i].size(); ++e) analytic += grads[i][e] * u[i][e];
  }
  // ... and numerically: the directional derivative along u, dotted with v.
  auto shift = [&](double step) {  // input += step * u, in f64 on the input's device
    size_t k = 0;
    for (const Tensor& input : inputs) {
      if (!input.requires_grad()) continue;
      std::vector<double> delta(u[k].size());
      for (size_t e = 0; e < delta.size(); ++e) delta[e] = step * u[k][e];
      if (input.is_contiguous()) {
        const Tensor shift_by = from_values(delta, input.shape(), DType::f64, input.device());
        kernels(input.device()).binary(BinaryOp::add, input, shift_by, input);
      } else {
        for (int64_t e = 0; e < input.numel(); ++e) {
          set_element(input, e, element(input, e).item() + delta[e]);
        }
      }
      ++k;
    }
  };
  shift(options.eps);
  const auto plus = evaluate(fn, inputs);
  shift(-2 * options.eps);
  const auto minus = evaluate(fn, inputs);
  shift(options.eps);
  double numeric = 0;
  for (size_t j = 0; j < v.size(); ++j) numeric += v[j] * (plus[j] - minus[j]) / (2 * options.eps);
  compare(result, analytic, numeric, options, "projection v^T J u");
  return result;
}

}  // namespace

GradcheckResult gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& options) {
  for (const Tensor& input : inputs) {
    TG_CHECK(!input.requires_grad() || input.dtype() == DType::f64, "gradcheck: input of shape ",
             shape_str(input.shape()), " is ", dtype_name(input.dtype()),
             "; finite differences need f64 (in f32 they fail by design)");
  }
  return options.fast ? fast_check(fn, inputs, options) : full_check(fn, inputs, options);
}

}  // namespace tg

namespace tg {

GradcheckCase make_case(std::string name, std::string shapes,
                        std::function<std::vector<Tensor>()> make_inputs, GradcheckFn fn,
                        GradcheckOptions options) {
  uint64_t seed = 1469598103934665603ull;  // FNV-1a of the name
  for (unsigned char c : name) seed = (seed ^ c) * 1099511628211ull;
  return {std::move(name), std::move(shapes), [=](Device device) {
            const DefaultDeviceScope on_device(device);
            const RngState previous = rng_state();
            set_rng_state({seed, 0});  // this thread's draws only (manual_seed: every thread's)
            std::vector<Tensor> inputs = make_inputs();
            GradcheckResult result = gradcheck(fn, inputs, options);
            set_rng_state(previous);
            return result;
          }};
}

Tensor random_leaf(const Shape& shape, double low, double high) {
  return uniform(shape, low, high, DType::f64).requires_grad_();
}

}  // namespace tg
