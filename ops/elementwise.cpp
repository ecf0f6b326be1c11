// Elementwise ops: forward through one kernel call, backward beside it in terms of other ops.
#include "tapegrad/ops/elementwise.h"

#include <cmath>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/ops/views.h"
#include "tapegrad/runtime/autocast.h"

namespace tg {
namespace {

void check_same_kind(const Tensor& a, const Tensor& b, const char* op) {
  TG_CHECK(a.defined() && b.defined(), "op '", op, "': undefined tensor");
  TG_CHECK(a.dtype() == b.dtype(), "op '", op, "': dtypes ", dtype_name(a.dtype()), " and ",
           dtype_name(b.dtype()), " differ (shapes ", shape_str(a.shape()), " and ",
           shape_str(b.shape()), "); convert one with .to()");
  check_same_device(op, {a, b});
}

// The unary and binary kernels compute in floating point only (f16 and bf16 through f32), so the
// ops refuse an integer or bool tensor themselves, naming the op, rather than inside a kernel.
constexpr const char* kFloatingDTypes = " is not supported (f32, f64, f16, bf16); ";

Tensor binary_forward(BinaryOp kind, const Tensor& a, const Tensor& b, const char* op) {
  check_same_kind(a, b, op);
  TG_CHECK(is_floating(a.dtype()), "op '", op, "': dtype ", dtype_name(a.dtype()), kFloatingDTypes,
           "shapes ", shape_str(a.shape()), " and ", shape_str(b.shape()));
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
  Tensor out = empty(shape, a.dtype(), a.device());
  kernels(a.device()).binary(kind, expand_untaped(a, shape), expand_untaped(b, shape), out);
  return out;
}

// Under autocast, a half and an f32 input both become f32 (type promotion); otherwise as given.
std::pair<Tensor, Tensor> promoted(Tensor a, Tensor b) {
  autocast_promote(a, b);
  return {a, b};
}

Tensor unary_forward(UnaryOp kind, const Tensor& x, const char* op, double scalar = 0) {
  TG_CHECK(x.defined(), "op '", op, "': undefined tensor");
  TG_CHECK(is_floating(x.dtype()), "op '", op, "': dtype ", dtype_name(x.dtype()), kFloatingDTypes,
           "shape ", shape_str(x.shape()));
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  kernels(x.device()).unary(kind, x, scalar, out);
  return out;
}

}  // namespace

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const size_t ndim = std::max(a.size(), b.size());
  Shape shape(ndim);
  for (size_t i = 0; i < ndim; ++i) {
    const int64_t da = i < ndim - a.size() ? 1 : a[i - (ndim - a.size())];
    const int64_t db = i < ndim - b.size() ? 1 : b[i - (ndim - b.size())];
    TG_CHECK(da == db || da == 1 || db == 1, "op '", op, "': shapes ", shape_str(a), " and ",
             shape_str(b), " do not broadcast (dim ", i, ": ", da, " vs ", db, ")");
    shape[i] = da == 1 ? db : da;
  }
  return shape;
}

Tensor add(const Tensor& a_in, const Tensor& b_in) {
  const auto [a, b] = promoted(a_in, b_in);
  Tensor out = binary_forward(BinaryOp::add, a, b, "add");
  // d(a + b)/da = 1, d(a + b)/db = 1
  record("add", {a, b}, out, {}, [](const Tensor& g, const Node&) { return Grads{g, g}; });
  return out;
}

Tensor sub(const Tensor& a_in, const Tensor& b_in) {
  const auto [a, b] = promoted(a_in, b_in);
  Tensor out = binary_forward(BinaryOp::sub, a, b, "sub");
  // d(a - b)/da = 1, d(a - b)/db = -1
  record("sub", {a, b}, out, {}, [](const Tensor& g, const Node&) { return Grads{g, neg(g)}; });
  return out;
}

Tensor mul(const Tensor& a_in, const Tensor& b_in) {
  const auto [a, b] = promoted(a_in, b_in);
  Tensor out = binary_forward(BinaryOp::mul, a, b, "mul");
  // d(a * b)/da = b, d(a * b)/db = a
  record("mul", {a, b}, out, {a, b}, [](const Tensor& g, const Node& n) {
    return Grads{n.needs_grad(0) ? mul(g, n.saved[1]) : Tensor(),
                 n.needs_grad(1) ? mul(g, n.saved[0]) : Tensor()};
  });
  return out;
}

Tensor div(const Tensor& a_in, const Tensor& b_in) {
  const auto [a, b] = promoted(a_in, b_in);
  Tensor out = binary_forward(BinaryOp::div, a, b, "div");
  // d(a / b)/da = 1 / b, d(a / b)/db = -a / b^2
  record("div", {a, b}, out, {a, b}, [](const Tensor& g, const Node& n) {
    const Tensor& a = n.saved[0];
    const Tensor& b = n.saved[1];
    return Grads{n.needs_grad(0) ? div(g, b) : Tensor(),
                 n.needs_grad(1) ? neg(div(mul(g, a), mul(b, b))) : Tensor()};
  });
  return out;
}

Tensor add(const Tensor& a, double b) {
  Tensor out = unary_forward(UnaryOp::add_scalar, a, "add_scalar", b);
  // d(a + c)/da = 1
  record("add_scalar", {a}, out, {}, [](const Tensor& g, const Node&) { return Grads{g}; });
  return out;
}

Tensor mul(const Tensor& a, double b) {
  Tensor out = unary_forward(UnaryOp::mul_scalar, a, "mul_scalar", b);
  // d(a * c)/da = c
  record("mul_scalar", {a}, out, {}, [b](const Tensor& g, const Node&) { return Grads{mul(g, b)}; });
  return out;
}

Tensor neg(const Tensor& x) {
  Tensor out = unary_forward(UnaryOp::neg, x, "neg");
  // d(-x)/dx = -1
  record("neg", {x}, out, {}, [](const Tensor& g, const Node&) { return Grads{neg(g)}; });
  return out;
}

Tensor pow(const Tensor& x_in, double exponent) {
  const Tensor x = autocast_to_f32(x_in);  // f32 under autocast
  Tensor out = unary_forward(UnaryOp::pow, x, "pow", exponent);
  // d(x^p)/dx = p * x^(p-1)
  record("pow", {x}, out, {x}, [exponent](const Tensor& g, const Node& n) {
    return Grads{mul(g, mul(pow(n.saved[0], exponent - 1), exponent))};
  });
  return out;
}

Tensor exp(const Tensor& x_in) {
  const Tensor x = autocast_to_f32(x_in);  // f32 under autocast
  Tensor out = unary_forward(UnaryOp::exp, x, "exp");
  // d exp(x)/dx = exp(x)
  record("exp", {x}, out, {out}, [](const Tensor& g, const Node& n) { return Grads{mul(g, n.saved[0])}; });
  return out;
}

Tensor log(const Tensor& x_in) {
  const Tensor x = autocast_to_f32(x_in);  // f32 under autocast
  Tensor out = unary_forward(UnaryOp::log, x, "log");
  // d log(x)/dx = 1 / x
  record("log", {x}, out, {x}, [](const Tensor& g, const Node& n) { return Grads{div(g, n.saved[0])}; });
  return out;
}

Tensor sqrt(const Tensor& x) {
  Tensor out = unary_forward(UnaryOp::sqrt, x, "sqrt");
  // d sqrt(x)/dx = 1 / (2 sqrt(x))
  record("sqrt", {x}, out, {out}, [](const Tensor& g, const Node& n) {
    return Grads{div(g, mul(n.saved[0], 2.0))};
  });
  return out;
}

Tensor tanh(const Tensor& x) {
  Tensor out = unary_forward(UnaryOp::tanh, x, "tanh");
  // d tanh(x)/dx = 1 - tanh(x)^2
  record("tanh", {x}, out, {out}, [](const Tensor& g, const Node& n) {
    const Tensor& y = n.saved[0];
    return Grads{mul(g, add(neg(mul(y, y)), 1.0))};
  });
  return out;
}

Tensor sigmoid(const Tensor& x) {
  Tensor out = unary_forward(UnaryOp::sigmoid, x, "sigmoid");
  // d sigmoid(x)/dx = sigmoid(x) (1 - sigmoid(x))
  record("sigmoid", {x}, out, {out}, [](const Tensor& g, const Node& n) {
    const Tensor& y = n.saved[0];
    return Grads{mul(g, mul(y, add(neg(y), 1.0)))};
  });
  return out;
}

Tensor relu(const Tensor& x) {
  Tensor out = unary_forward(UnaryOp::relu, x, "relu");
  // d relu(x)/dx = 1 where x > 0, else 0
  record("relu", {x}, out, {x}, [](const Tensor& g, const Node& n) {
    return Grads{mul(g, unary_forward(UnaryOp::relu_grad, n.saved[0], "relu"))};
  });
  return out;
}

Tensor gelu(const Tensor& x) {
  Tensor out = unary_forward(UnaryOp::gelu, x, "gelu");
  // d gelu(x)/dx = Phi(x) + x phi(x): in one kernel pass where the device has one
  record("gelu", {x}, out, {x}, [](const Tensor& g, const Node& n) {
    const Tensor& saved = n.saved[0];
    if (const Tensor dx = kernels(saved.device()).gelu_backward(g, saved); dx.defined()) {
      return Grads{dx};
    }
    return Grads{mul(g, unary_forward(UnaryOp::gelu_grad, saved, "gelu"))};
  });
  return out;
}

Tensor sin(const Tensor& x) {
  Tensor out = unary_forward(UnaryOp::sin, x, "sin");
  // d sin(x)/dx = cos(x)
  record("sin", {x}, out, {x}, [](const Tensor& g, const Node& n) {
    return Grads{mul(g, cos(n.saved[0]))};
  });
  return out;
}

Tensor cos(const Tensor& x) {
  Tensor out = unary_forward(UnaryOp::cos, x, "cos");
  // d cos(x)/dx = -sin(x)
  record("cos", {x}, out, {x}, [](const Tensor& g, const Node& n) {
    return Grads{neg(mul(g, sin(n.saved[0])))};
  });
  return out;
}

Tensor abs(const Tensor& x) {
  Tensor out = unary_forward(UnaryOp::abs, x, "abs");
  // d |x|/dx = sign(x): -1, 1, and 0 at the kink x = 0 (PyTorch's choice, a subgradient)
  record("abs", {x}, out, {x}, [](const Tensor& g, const Node& n) {
    return Grads{mul(g, unary_forward(UnaryOp::sign, n.saved[0], "abs"))};
  });
  return out;
}

namespace {

// clamp, clamp_min and clamp_max: max(x, min) then min(., max), so min > max gives max
// everywhere, as torch.clamp. `op` names the function called, in errors and on the tape.
Tensor clamp_op(const Tensor& x, std::optional<double> min, std::optional<double> max,
                const char* op) {
  const auto shape = [&] { return x.defined() ? shape_str(x.shape()) : "undefined"; };
  TG_CHECK(min || max, "op '", op, "': give a min, a max or both (shape ", shape(), ")");
  // The kernels' comparisons would pass x through a NaN bound unchanged: refused instead.
  TG_CHECK(!(min && std::isnan(*min)) && !(max && std::isnan(*max)), "op '", op,
           "': a bound is NaN (shape ", shape(), ")");
  Tensor out = x;
  if (min) out = unary_forward(UnaryOp::clamp_min, out, op, *min);
  if (max) out = unary_forward(UnaryOp::clamp_max, out, op, *max);
  // d clamp(x)/dx = 1 where min <= x <= max (the bounds included, as PyTorch's), else 0
  record(op, {x}, out, {x}, [min, max, op](const Tensor& g, const Node& n) {
    const Tensor& x = n.saved[0];
    Tensor passes = g;  // the product of the masks [x >= min] and [x <= max] = [-x >= -max]
    if (min) passes = mul(passes, unary_forward(UnaryOp::ge_scalar, x, op, *min));
    if (max) passes = mul(passes, unary_forward(UnaryOp::ge_scalar, neg(x), op, -*max));
    return Grads{passes};
  });
  return out;
}

}  // namespace

Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max) {
  return clamp_op(x, min, max, "clamp");
}

Tensor clamp_min(const Tensor& x, double min) { return clamp_op(x, min, std::nullopt, "clamp_min"); }

Tensor clamp_max(const Tensor& x, double max) { return clamp_op(x, std::nullopt, max, "clamp_max"); }

Tensor equal(const Tensor& a_in, const Tensor& b_in) {
  const auto [a, b] = promoted(a_in, b_in);
  return binary_forward(BinaryOp::eq, a, b, "equal");
}

// The names this file's ops record on the tape (autograd/op_registry.h).
const OpRegistration elementwise_ops({"add", "sub", "mul", "div", "add_scalar", "mul_scalar", "neg",
                                      "pow", "exp", "log", "sqrt", "tanh", "sigmoid", "relu",
                                      "gelu", "sin", "cos", "abs", "clamp", "clamp_min",
                                      "clamp_max"});
// Not differentiable: they record nothing, and record() refuses their names.
const OpRegistration elementwise_ops_without_gradient({"equal"}, OpGradient::none);

}  // namespace tg
