#pragma once
// Views share storage; the Tensor methods view/reshape/transpose/permute/narrow/expand/squeeze/
// unsqueeze/contiguous/to/clone are defined in views.cpp. Here: the free functions.
#include <vector>

#include "autograd/tensor.h"

namespace tg {

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim);

// A view with stride 0 on broadcast dims, not recorded (for kernels): t broadcast to shape.
Tensor broadcast_view(const Tensor& t, const Shape& shape);

// For kernels that take a batch of matrices as offsets (GemmBatch, AttentionProblem's mask): the
// position (in elements, from t's first element) of each matrix over t's leading `batch` dims,
// in row-major order; a broadcast dim (stride 0) gives the same matrix again.
std::vector<int64_t> batch_offsets(const Tensor& t, const Shape& batch);

}  // namespace tg
