#pragma once
// Selecting by a bool mask, as torch.where and Tensor.masked_fill.
#include "tapegrad/autograd/tensor.h"

namespace tg {

// condition ? a : b elementwise, condition bool, all three broadcast together; a and b of one dtype, any dtype (the gradient flows
// where they are floating).
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);
// x (any dtype) with `value` where mask is true; the bool mask broadcasts to x's shape (x keeps
// its shape).
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

}  // namespace tg
