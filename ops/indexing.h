#pragma once
// Indexing along one dim, with PyTorch's semantics: sort / argsort, gather, scatter_add,
// index_select. Every index tensor is i64 (DType::i64, as embedding and max's indices), on the
// device of the data; an index is in [0, size of the indexed dim) (negative indices are an error,
// as in torch.gather). A `dim` may be negative (counted from the end). Bad input (a wrong dtype,
// rank or shape, an index out of range, an undefined tensor) is one tg::Error naming the op and
// the shapes; the range check reads the indices' smallest and largest entry back to the host once
// (Kernels::screen_indices: the op's one synchronisation).
//
// Dtypes: gather and index_select move elements of any dtype (f32, f64, f16, bf16, i64, ...);
// sort and argsort order f32, f64, f16, bf16 and i64; scatter_add adds f32 and f64 (f16 / bf16
// are added in f32 and rounded once). Gradients flow to floating x and src only; index tensors and
// sort's indices never get one.
#include <cstdint>

#include "tapegrad/autograd/tensor.h"

namespace tg {

struct SortResult {
  Tensor values;   // x's dtype and shape, differentiable (backward: scatter back to the sources)
  Tensor indices;  // i64, x's shape: values = gather(x, dim, indices); no gradient
};

// x sorted along `dim`, ascending (or descending), as torch.sort(x, dim, descending, stable=True):
// stable, so equal values keep their order (in both directions); NaN sorts as the largest value
// (last ascending, first descending), NaNs among themselves in their order. Empty tensors and
// 0-d tensors (dim 0 or -1) are fine.
SortResult sort(const Tensor& x, int64_t dim = -1, bool descending = false);
// sort(x, dim, descending).indices, without the values (and no tape node).
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false);

// out[p] = x[p with p[dim] replaced by index[p]] for every position p of index's shape
// (torch.gather). index has x's rank; index.size(d) <= x.size(d) for every d != dim, as PyTorch
// allows (the index may cover only the first rows of the other dims); index.size(dim) is any
// (0 included). out has index's shape. Backward: scatter_add of the gradient into zeros like x.
// index may be a broadcast view (expand) of a smaller index: it is read as it is, never copied.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);

// x + (src added at the positions index picks): out = x.clone(), then for every position p of
// index's shape out[p with p[dim] replaced by index[p]] += src[p] (torch.scatter_add). index
// has x's and src's rank; index.size(d) <= src.size(d) for every d, and <= x.size(d) for d != dim
// (PyTorch's rule: only src's first index.shape entries are read). Repeated indices add up.
// out has x's shape. Backward: x gets the gradient as it is, src gets gather(grad, dim, index)
// (zero where src was not read). On the CPU the additions run in a fixed order (deterministic);
// on CUDA they are atomic adds, whose order (and so the last bits of a sum of repeated indices)
// can differ from run to run.
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);

// The entries index[0], index[1], ... of x along `dim` (torch.index_select): index is 1-D (or
// 0-d, taken as one entry) i64; out has x's shape with size index.numel() at dim. Repeats are
// fine. Backward: index_add, each gradient slice added into the slice it came from.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);

}  // namespace tg
