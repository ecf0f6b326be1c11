#pragma once
// Layer normalisation, as torch.nn.functional.layer_norm.
#include "tapegrad/autograd/tensor.h"

namespace tg {

// Normalises x over its trailing dims `normalized_shape` (biased variance, eps inside the sqrt),
// then y = xhat * weight + bias; weight and bias (of normalized_shape) may be undefined.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);

}  // namespace tg
