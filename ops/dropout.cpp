// dropout: the input times a saved, scaled Bernoulli mask; backward multiplies by the same mask.
#include "tapegrad/ops/dropout.h"

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/ops/elementwise.h"

namespace tg {
namespace {

void check_probability(double p) {
  TG_CHECK(p >= 0.0 && p <= 1.0, "op 'dropout': p must be in [0, 1], got ", p);
}

}  // namespace

Tensor dropout_mask(const Shape& shape, double p, DType dtype, uint64_t seed, uint64_t offset,
                    Device device) {
  check_probability(p);
  // Philox gives floats; f64 keeps the scale exact for f64 inputs, f32 serves the rest.
  const DType work = dtype == DType::f64 ? DType::f64 : DType::f32;
  Kernels& k = kernels(device);
  Tensor mask = empty(shape, work, device);
  k.uniform(mask, seed, offset);
  k.unary(UnaryOp::ge_scalar, mask, p, mask);                  // keep (1) where u >= p
  k.unary(UnaryOp::mul_scalar, mask, p < 1 ? 1.0 / (1.0 - p) : 0.0, mask);  // p == 1: all 0
  if (dtype == work) return mask;
  Tensor converted = empty(shape, dtype, device);
  k.copy(mask, converted);
  return converted;
}

Tensor dropout(const Tensor& x, double p, bool training) {
  TG_CHECK(x.defined() && is_floating(x.dtype()), "op 'dropout': needs a floating tensor, got ",
           x.defined() ? dtype_name(x.dtype()) : "undefined");
  check_probability(p);
  if (!training || p == 0.0) return x;
  const uint64_t offset = reserve_random(x.numel());
  const Tensor mask = dropout_mask(x.shape(), p, x.dtype(), rng_state().seed, offset, x.device());
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  kernels(x.device()).binary(BinaryOp::mul, x, mask, out);
  // d (x * mask)/dx = mask (already scaled by 1 / (1 - p))
  record("dropout", {x}, out, {mask}, [](const Tensor& g, const Node& n) {
    return Grads{mul(g, n.saved[0])};
  });
  return out;
}

// The names this file's ops record on the tape (autograd/op_registry.h).
const OpRegistration dropout_ops({"dropout"});

}  // namespace tg
