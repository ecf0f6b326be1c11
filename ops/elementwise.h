#pragma once
// Elementwise arithmetic and activations, broadcasting as PyTorch does. Every op here takes
// floating tensors (f32, f64, f16, bf16) and refuses the others by name, before any kernel runs.
#include <optional>

#include "tapegrad/autograd/tensor.h"

namespace tg {

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor neg(const Tensor& x);
Tensor pow(const Tensor& x, double exponent);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor gelu(const Tensor& x);  // exact: x * Phi(x), as torch.nn.GELU()
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor abs(const Tensor& x);  // its gradient is sign(x): 0 at x = 0, as PyTorch's
// min(max(x, min), max) as torch.clamp: either bound may be left out (not both); min > max gives
// max everywhere; NaN stays NaN. The gradient passes where min <= x <= max, the bounds included.
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max);
Tensor clamp_min(const Tensor& x, double min);  // max(x, min)
Tensor clamp_max(const Tensor& x, double max);  // min(x, max)

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& x) { return neg(x); }
inline Tensor operator+(const Tensor& a, double b) { return add(a, b); }
inline Tensor operator+(double a, const Tensor& b) { return add(b, a); }
inline Tensor operator-(const Tensor& a, double b) { return add(a, -b); }
inline Tensor operator-(double a, const Tensor& b) { return add(neg(b), a); }
inline Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
inline Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
inline Tensor operator/(const Tensor& a, double b) { return mul(a, 1.0 / b); }
inline Tensor operator/(double a, const Tensor& b) { return mul(pow(b, -1.0), a); }

// Not differentiable: 1 where a == b, else 0, in the inputs' dtype.
Tensor equal(const Tensor& a, const Tensor& b);

}  // namespace tg
