// softmax / log_softmax: one kernel call forward (max-subtracted), backward composed from ops.
#include "tapegrad/ops/softmax.h"

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/ops/elementwise.h"
#include "tapegrad/ops/reduce.h"
#include "tapegrad/runtime/autocast.h"

namespace tg {
namespace {

// The (log-)softmax of x over dim d, not recorded.
Tensor softmax_forward(const Tensor& x, int64_t d, bool log) {
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  kernels(x.device()).softmax_dim(x.detach().contiguous(), split_at(x.shape(), d), log, out);
  return out;
}

int64_t checked_dim(const Tensor& x, int64_t dim, const char* op) {
  TG_CHECK(x.defined() && is_floating(x.dtype()), "op '", op, "': needs a floating tensor, got ",
           x.defined() ? dtype_name(x.dtype()) : "undefined", " of shape ",
           x.defined() ? shape_str(x.shape()) : "[]");
  return normalize_dim(dim, x.dim(), op);
}

}  // namespace

Tensor softmax(const Tensor& x_in, int64_t dim) {
  const Tensor x = autocast_to_f32(x_in);  // f32 under autocast: a sum of exponentials
  if (x.defined() && x.dim() == 0) return softmax(x.reshape({1}), dim).reshape({});
  const int64_t d = checked_dim(x, dim, "softmax");
  Tensor y = softmax_forward(x, d, /*log=*/false);
  // dx = y * (g - sum(g * y)) over dim; 0 where a fully masked row has y = 0
  record("softmax", {x}, y, {y}, [d](const Tensor& g, const Node& n) {
    const Tensor& y = n.saved[0];
    Tensor gy = mul(g, y);
    return Grads{sub(gy, mul(y, sum(gy, {d}, /*keepdim=*/true)))};
  });
  return y;
}

Tensor log_softmax(const Tensor& x_in, int64_t dim) {
  const Tensor x = autocast_to_f32(x_in);  // f32 under autocast: a sum of exponentials
  if (x.defined() && x.dim() == 0) return log_softmax(x.reshape({1}), dim).reshape({});
  const int64_t d = checked_dim(x, dim, "log_softmax");
  Tensor y = softmax_forward(x, d, /*log=*/true);
  // dx = g - softmax(x) * sum(g) over dim, with softmax(x) = exp(y)
  record("log_softmax", {x}, y, {y}, [d](const Tensor& g, const Node& n) {
    return Grads{sub(g, mul(exp(n.saved[0]), sum(g, {d}, /*keepdim=*/true)))};
  });
  return y;
}

// The names this file's ops record on the tape (autograd/op_registry.h).
const OpRegistration softmax_ops({"softmax", "log_softmax"});

}  // namespace tg
