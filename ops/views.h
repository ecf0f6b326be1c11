#pragma once
// Views share storage; the Tensor methods view/reshape/transpose/permute/narrow/expand/squeeze/
// unsqueeze/contiguous/to/clone are defined in views.cpp. Here: the free functions.
#include <vector>

#include "tapegrad/autograd/tensor.h"

namespace tg {

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim);

// A view with stride 0 on broadcast dims, not recorded (for kernels): t broadcast to shape.
Tensor broadcast_view(const Tensor& t, const Shape& shape);

}  // namespace tg
