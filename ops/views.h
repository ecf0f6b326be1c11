#pragma once
// Views share storage; the Tensor methods view/reshape/transpose/permute/narrow/expand/squeeze/
// unsqueeze/contiguous/to/clone are defined in views.cpp. Here: the free functions.
#include <vector>

#include "tapegrad/autograd/tensor.h"

namespace tg {

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim);

// Tensor::expand without the tape: t broadcast to `shape` as a view with stride 0 on the
// broadcast dims, recorded on no tape (no gradient flows through it). For ops that hand broadcast
// operands to a kernel and record their own node. t.expand(shape) is this view plus a tape node
// (and takes -1 for "keep this size").
Tensor expand_untaped(const Tensor& t, const Shape& shape);

// A contiguous copy of t converted to `dtype` on its device, recorded on no tape (a conversion
// for ops that record no gradient, or record their own node).
Tensor copy_of(const Tensor& t, DType dtype);

// For kernels that take a batch of matrices as offsets (GemmBatch, AttentionProblem's mask): the
// position (in elements, from t's first element) of each matrix over t's leading `batch` dims,
// in row-major order; a broadcast dim (stride 0) gives the same matrix again.
std::vector<int64_t> batch_offsets(const Tensor& t, const Shape& batch);

// t [..., width] as rows [positions, width] (Tensor::reshape: a view where t's layout allows).
// The positions come from t's leading dims, not from a -1, which a width of 0 leaves unresolved
// (a Linear with no inputs, an embedding row of width 0).
Tensor as_rows(const Tensor& t);

}  // namespace tg
