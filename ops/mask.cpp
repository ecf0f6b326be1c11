// where and masked_fill: one kernel call forward; backward routes the gradient by the mask.
#include "tapegrad/ops/mask.h"

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/ops/elementwise.h"
#include "tapegrad/ops/views.h"
#include "tapegrad/runtime/autocast.h"

namespace tg {
namespace {

void check_bool_mask(const Tensor& mask, const char* op, const char* name) {
  TG_CHECK(mask.defined(), "op '", op, "': ", name, " is undefined");
  TG_CHECK(mask.dtype() == DType::b8, "op '", op, "': ", name, " must be bool, got ",
           dtype_name(mask.dtype()), " of shape ", shape_str(mask.shape()),
           " (make one with a comparison, eq/ne/lt/le/gt/ge or x == 0, or with from_bools)");
}

// True when `from` broadcasts to exactly `to` (PyTorch's expand rule).
bool expands_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  const size_t extra = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i) {
    if (from[i] != to[extra + i] && from[i] != 1) return false;
  }
  return true;
}

// where: branches a and b of one dtype (any: a choice moves elements, it computes nothing), on
// the condition's device.
void check_where_branches(const Tensor& condition, const Tensor& a, const Tensor& b) {
  TG_CHECK(a.defined() && b.defined(), "op 'where': undefined tensor");
  TG_CHECK(a.dtype() == b.dtype(), "op 'where': a and b need the same dtype, got ",
           dtype_name(a.dtype()), " ", shape_str(a.shape()), " and ", dtype_name(b.dtype()), " ",
           shape_str(b.shape()));
  check_same_device("where", {condition, a, b});
}

// masked_fill: x of any dtype and a bool mask that broadcasts to it, on one device.
void check_masked_fill_inputs(const Tensor& x, const Tensor& mask) {
  check_bool_mask(mask, "masked_fill", "mask");
  TG_CHECK(x.defined(), "op 'masked_fill': undefined tensor");
  check_same_device("masked_fill", {x, mask});
  TG_CHECK(expands_to(mask.shape(), x.shape()), "op 'masked_fill': mask of shape ",
           shape_str(mask.shape()), " does not broadcast to the input's shape ", shape_str(x.shape()));
  TG_CHECK(mask.device() == x.device(), "op 'masked_fill': mask and input on different devices");
}

}  // namespace

Tensor where(const Tensor& condition, const Tensor& a_in, const Tensor& b_in) {
  check_bool_mask(condition, "where", "condition");
  Tensor a = a_in, b = b_in;
  autocast_promote(a, b);  // a half and an f32 branch: both f32 under autocast
  check_where_branches(condition, a, b);
  const Shape ab = broadcast_shapes(a.shape(), b.shape(), "where");
  const Shape shape = broadcast_shapes(condition.shape(), ab, "where");
  Tensor out = empty(shape, a.dtype(), a.device());
  kernels(a.device()).where(expand_untaped(condition, shape), expand_untaped(a, shape),
                            expand_untaped(b, shape), out);
  // d out/da = condition, d out/db = !condition (the engine sums over broadcast dims)
  record("where", {condition, a, b}, out, {condition}, [](const Tensor& g, const Node& n) {
    const Tensor& c = n.saved[0];
    const Tensor zero = scalar(0, g.dtype(), g.device());
    return Grads{Tensor(), n.needs_grad(1) ? where(c, g, zero) : Tensor(),
                 n.needs_grad(2) ? where(c, zero, g) : Tensor()};
  });
  return out;
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  check_masked_fill_inputs(x, mask);
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  const Tensor filler = scalar(value, x.dtype(), x.device());
  kernels(x.device()).where(expand_untaped(mask, x.shape()), expand_untaped(filler, x.shape()), x,
                            out);
  // d out/dx = 1 where mask is false, 0 where it is true (there out is the constant value)
  record("masked_fill", {x}, out, {mask}, [](const Tensor& g, const Node& n) {
    return Grads{where(n.saved[0], scalar(0, g.dtype(), g.device()), g)};
  });
  return out;
}

// The names this file's ops record on the tape (autograd/op_registry.h).
const OpRegistration mask_ops({"where", "masked_fill"});

}  // namespace tg
