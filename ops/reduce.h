#pragma once
// Reductions over dims (keepdim as in PyTorch).
#include <vector>

#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/tensor.h"

namespace tg {

Tensor sum(const Tensor& x);  // all elements -> scalar
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);

struct MaxResult {
  Tensor values;
  Tensor indices;  // i64, not differentiable
};
MaxResult max(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor max(const Tensor& x);  // largest element -> scalar

// [outer, n, inner] for a contiguous tensor of `shape` reduced over `dim`.
DimSplit split_at(const Shape& shape, int64_t dim);

}  // namespace tg
