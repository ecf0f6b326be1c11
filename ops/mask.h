#pragma once
// Selecting by a bool mask, as torch.where and Tensor.masked_fill.
#include "tapegrad/autograd/tensor.h"

namespace tg {

// condition ? a : b elementwise; condition is bool; all three broadcast together.
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);
// x with `value` where mask is true; the bool mask broadcasts to x's shape (x keeps its shape).
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

}  // namespace tg
