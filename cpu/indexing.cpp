// CPU kernels for indexing along a dim (ops/indexing.h): gather, scatter-add and argsort.
// The CUDA twins are in cuda/indexing.cu.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <type_traits>
#include <vector>

#include "tapegrad/cpu/kernels.h"
#include "tapegrad/runtime/threads.h"

namespace tg::cpu {
namespace {

// The work threshold of argsort (the thread policy: runtime/threads.h): sorting a line of n
// costs about n log n comparisons, so lines are split among the threads from this many elements.
// (gather and scatter-add split their slices from kParallelBytes written, as copies do.)
constexpr int64_t kParallelSortElements = 1 << 14;

// index's positions cut into slices: the dims before `lead` number the slices (row-major), the
// dims from `lead` on are walked inside a slice. Operand k's strides over both parts.
struct IndexingSlices {
  Shape lead_shape, tail_shape;
  std::array<Shape, 3> lead_strides, tail_strides;
};

// The slices of operands (all of the first one's shape) with `lead` dims numbering the slices.
IndexingSlices indexing_slices(const std::array<const Tensor*, 3>& operands, size_t lead) {
  const Shape& shape = operands[0]->shape();
  IndexingSlices s;
  s.lead_shape.assign(shape.begin(), shape.begin() + lead);
  s.tail_shape.assign(shape.begin() + lead, shape.end());
  for (size_t k = 0; k < operands.size(); ++k) {
    const Shape& strides = operands[k]->strides();
    s.lead_strides[k].assign(strides.begin(), strides.begin() + lead);
    s.tail_strides[k].assign(strides.begin() + lead, strides.end());
  }
  return s;
}

// Calls body(at) for every position of slice `slice`, at[k] in elements from operand k's start.
template <typename Body>
void walk_indexing_slice(const IndexingSlices& s, int64_t slice, Body&& body) {
  std::array<int64_t, 3> start;
  for (size_t k = 0; k < 3; ++k) start[k] = row_offset(slice, s.lead_shape, s.lead_strides[k]);
  for_each_element<3>(s.tail_shape, {&s.tail_strides[0], &s.tail_strides[1], &s.tail_strides[2]},
                      [&](const std::array<int64_t, 3>& at) {
                        body(std::array<int64_t, 3>{start[0] + at[0], start[1] + at[1],
                                                    start[2] + at[2]});
                      });
}

// The dims before the indexed one: the line view's first dim of stride 0 (and size > 1), else all
// dims. Positions that differ there write different destinations of a non-overlapping tensor.
size_t dims_before_indexed(const Tensor& line) {
  for (int64_t d = 0; d < line.dim(); ++d) {
    if (line.strides()[d] == 0 && line.shape()[d] > 1) return static_cast<size_t>(d);
  }
  return static_cast<size_t>(line.dim());
}

// Whether a sorts strictly before b in ascending order, with NaN the largest value (NaNs tie).
template <typename T>
bool sorts_before(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a)) return false;
    if (std::isnan(b)) return true;
  }
  return a < b;
}

// Writes one line's sorting order: the line's element k is row[k * stride], its k-th place in
// the result goes to order_out[k * stride]. `order` is scratch of the line's length.
template <typename T>
void argsort_line(const T* row, int64_t stride, bool descending, std::vector<int64_t>& order,
                  int64_t* order_out) {
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    const T value_a = row[a * stride], value_b = row[b * stride];
    return descending ? sorts_before(value_b, value_a) : sorts_before(value_a, value_b);
  });
  for (size_t k = 0; k < order.size(); ++k) order_out[static_cast<int64_t>(k) * stride] = order[k];
}

// Calls body(T{}) for the key types argsort takes: f32, f64, i64.
template <typename Body>
void dispatch_sortable(DType dtype, Body&& body) {
  if (dtype == DType::f32) return body(float{});
  if (dtype == DType::f64) return body(double{});
  if (dtype == DType::i64) return body(int64_t{});
  fail("kernel 'argsort_dim' on cpu: dtype ", dtype_name(dtype),
       " is not supported (f32, f64, i64)");
}

}  // namespace

// Rows of index (its last dim) are split among the threads; each output element is written once.
void CpuKernels::gather_along(const Tensor& line, int64_t step, const Tensor& index,
                              const Tensor& out) {
  TG_CHECK(index.dtype() == DType::i64 && out.dtype() == line.dtype(),
           "kernel 'gather_along' on cpu: index must be i64 and out of line's dtype");
  if (index.numel() == 0) return;
  dispatch_any(line.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* from = line.data_as<const T>();
    const int64_t* picked = index.data_as<const int64_t>();
    T* result = out.data_as<T>();
    const size_t lead = index.dim() == 0 ? 0 : static_cast<size_t>(index.dim() - 1);
    const IndexingSlices s = indexing_slices({&index, &line, &out}, lead);
    const int64_t bytes = index.numel() * static_cast<int64_t>(sizeof(T));
    in_pieces(numel(s.lead_shape), bytes, [&](int64_t first, int64_t past) {
      for (int64_t slice = first; slice < past; ++slice) {
        walk_indexing_slice(s, slice, [&](const std::array<int64_t, 3>& at) {
          result[at[2]] = from[at[1] + picked[at[0]] * step];
        });
      }
    });
  });
}

// Slices over the dims before the indexed one are split among the threads: they write disjoint
// destinations. Inside a slice the positions run in row-major order, so repeated destinations add
// up in one order: the same bits on every run and at every thread count.
void CpuKernels::scatter_add_along(const Tensor& src, const Tensor& index, const Tensor& line,
                                   int64_t step) {
  TG_CHECK(index.dtype() == DType::i64 && src.dtype() == line.dtype(),
           "kernel 'scatter_add_along' on cpu: index must be i64 and src of line's dtype");
  if (index.numel() == 0) return;
  dispatch_floating(src.dtype(), "scatter_add_along", [&](auto tag) {
    using T = decltype(tag);
    const T* from = src.data_as<const T>();
    const int64_t* picked = index.data_as<const int64_t>();
    T* result = line.data_as<T>();
    const IndexingSlices s = indexing_slices({&index, &line, &src}, dims_before_indexed(line));
    const int64_t bytes = index.numel() * static_cast<int64_t>(sizeof(T));
    in_pieces(numel(s.lead_shape), bytes, [&](int64_t first, int64_t past) {
      for (int64_t slice = first; slice < past; ++slice) {
        walk_indexing_slice(s, slice, [&](const std::array<int64_t, 3>& at) {
          result[at[1] + picked[at[0]] * step] += from[at[2]];
        });
      }
    });
  });
}

// std::stable_sort on each line's positions, the lines split among the threads.
void CpuKernels::argsort_dim(const Tensor& x, DimSplit s, bool descending, const Tensor& indices) {
  TG_CHECK(x.is_contiguous() && indices.is_contiguous() && indices.dtype() == DType::i64,
           "kernel 'argsort_dim' on cpu: x and indices must be contiguous, indices i64");
  if (s.n == 0) return;
  dispatch_sortable(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data_as<const T>();
    int64_t* result = indices.data_as<int64_t>();
    const int64_t grain = grain_for(static_cast<double>(s.n), kParallelSortElements);
    parallel_for(s.outer * s.inner, grain, [&](int64_t first, int64_t past) {
      std::vector<int64_t> order(static_cast<size_t>(s.n));
      for (int64_t line = first; line < past; ++line) {
        const int64_t start = (line / s.inner) * s.n * s.inner + line % s.inner;
        argsort_line(in + start, s.inner, descending, order, result + start);
      }
    });
  });
}

}  // namespace tg::cpu
