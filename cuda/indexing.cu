// CUDA kernels for indexing along a dim (ops/indexing.h): gather, scatter-add and argsort.
// The CPU twins are in cpu/indexing.cpp.
//
// gather and scatter-add give each position of the index one thread (a grid-stride loop); one
// StridedShape<3> over index's shape finds the index entry, the line view's element and the
// out / src element of a position. scatter-add adds with atomicAdd: where several positions add
// into one destination, the order of their additions, and so the last bits of the sum, can change
// from run to run (the CPU adds in one fixed order). gather is exact.
//
// argsort is a bitonic sorting network per line, in global memory: every line of n is padded to
// P (the next power of two) with (key, position) pairs in a scratch buffer, log2(P) (log2(P) + 1)
// / 2 launches of compare-exchange passes run over all lines at once, and the positions are
// written back. Pairs compare by key, ties by position, so the order is total and the network's
// result is the stable sort. Any n, for 16 P bytes of scratch a line; simple rather than fast (a
// line of 16384 takes 105 launches).
#include <cstdint>

#include "tapegrad/cuda/device_types.h"
#include "tapegrad/cuda/kernels.h"

namespace tg::cuda {
namespace {

constexpr unsigned kIndexingThreads = 256;

// Where line `line` of a contiguous [outer, n, inner] tensor starts (its element k is `inner`
// further each).
__device__ inline int64_t indexing_line_start(const DimSplit& split, int64_t line) {
  return (line / split.inner) * split.n * split.inner + line % split.inner;
}

// Whether the pair (key_a, position a) sorts before (key_b, position b): padding (position >= n)
// last, then by key with NaN the largest (descending reverses the keys only), ties by position.
template <typename T>
__device__ inline bool pair_before(T key_a, int64_t a, T key_b, int64_t b, int64_t n,
                                   bool descending) {
  if (a >= n || b >= n) return a < b;
  const bool a_nan = key_a != key_a, b_nan = key_b != key_b;  // never true for i64
  const bool a_less = !a_nan && (b_nan || key_a < key_b);
  const bool b_less = !b_nan && (a_nan || key_b < key_a);
  if (a_less != b_less) return descending ? b_less : a_less;
  return a < b;
}

// out[p] = line[p + index[p] * step], one thread a position.
template <typename T>
__global__ void gather_along_kernel(const T* line, int64_t step, const int64_t* index, T* out,
                                    StridedShape<3> layout, int64_t count) {
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < count;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t at[3];  // index, line, out
    layout.offsets(e, at);
    out[at[2]] = line[at[1] + index[at[0]] * step];
  }
}

// line[p + index[p] * step] += src[p], one thread a position, atomically.
template <typename T>
__global__ void scatter_add_along_kernel(const T* src, const int64_t* index, T* line, int64_t step,
                                         StridedShape<3> layout, int64_t count) {
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < count;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t at[3];  // index, line, src
    layout.offsets(e, at);
    atomicAdd(&line[at[1] + index[at[0]] * step], src[at[2]]);
  }
}

// The scratch pairs of every line: (x's element k, k) for k < n, padding (0, k) up to `padded`.
template <typename T>
__global__ void argsort_load_kernel(const T* x, DimSplit split, int64_t padded, T* keys,
                                    int64_t* positions) {
  const int64_t count = split.outer * split.inner * padded;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < count;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t line = e / padded, k = e % padded;
    keys[e] = k < split.n ? x[indexing_line_start(split, line) + k * split.inner] : T(0);
    positions[e] = k;
  }
}

// One pass of the bitonic network: pair k of every line meets pair k ^ stride (k the smaller),
// and they swap unless they are in the order their block of `size` asks (ascending where
// k & size is 0, else descending).
template <typename T>
__global__ void bitonic_pass_kernel(T* keys, int64_t* positions, int64_t count, int64_t padded,
                                    int64_t size, int64_t stride, int64_t n, bool descending) {
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < count;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t k = e % padded, partner = k ^ stride;
    if (partner <= k) continue;
    const int64_t a = e, b = e + (partner - k);
    const bool ascending_block = (k & size) == 0;
    const bool b_first = pair_before(keys[b], positions[b], keys[a], positions[a], n, descending);
    if (b_first == ascending_block) {
      const T key = keys[a];
      keys[a] = keys[b];
      keys[b] = key;
      const int64_t position = positions[a];
      positions[a] = positions[b];
      positions[b] = position;
    }
  }
}

// indices' line element k = the position in place k of the sorted scratch line.
__global__ void argsort_store_kernel(const int64_t* positions, DimSplit split, int64_t padded,
                                     int64_t* indices) {
  const int64_t count = split.outer * split.inner * split.n;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < count;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t line = e / split.n, k = e % split.n;
    indices[indexing_line_start(split, line) + k * split.inner] = positions[line * padded + k];
  }
}

// A grid-stride launch over `count` items.
LaunchShape indexing_launch(int64_t count) {
  return LaunchShape{dim3(blocks_for(count, kIndexingThreads)), dim3(kIndexingThreads), 0};
}

// Host side: body(T{}) for the key types argsort takes (f32, f64, i64).
template <typename Body>
void dispatch_sortable(DType dtype, Body&& body) {
  if (dtype == DType::f32) return body(float{});
  if (dtype == DType::f64) return body(double{});
  if (dtype == DType::i64) return body(int64_t{});
  fail("kernel 'argsort_dim' on cuda: dtype ", dtype_name(dtype),
       " is not supported (f32, f64, i64)");
}

// Runs the whole network over `lines` lines of `padded` pairs whose first n are real.
template <typename T>
void bitonic_sort(T* keys, int64_t* positions, int64_t lines, int64_t padded, int64_t n,
                  bool descending) {
  const int64_t count = lines * padded;
  for (int64_t size = 2; size <= padded; size *= 2) {
    for (int64_t stride = size / 2; stride > 0; stride /= 2) {
      launch("argsort_dim", bitonic_pass_kernel<T>, indexing_launch(count), keys, positions,
             count, padded, size, stride, n, descending);
    }
  }
}

}  // namespace

void CudaKernels::gather_along(const Tensor& line, int64_t step, const Tensor& index,
                               const Tensor& out) {
  DeviceGuard guard(device_index());
  TG_CHECK(index.dtype() == DType::i64 && out.dtype() == line.dtype(),
           "kernel 'gather_along' on cuda: index must be i64 and out of line's dtype");
  const int64_t count = index.numel();
  if (count == 0) return;
  const Tensor* const operands[3] = {&index, &line, &out};
  const StridedShape<3> layout = strided_shape(index.shape(), operands, "gather_along");
  dispatch_any(line.dtype(), [&](auto tag) {
    using T = decltype(tag);
    launch("gather_along", gather_along_kernel<T>, indexing_launch(count), line.data_as<const T>(),
           step, index.data_as<const int64_t>(), out.data_as<T>(), layout, count);
  });
}

void CudaKernels::scatter_add_along(const Tensor& src, const Tensor& index, const Tensor& line,
                                    int64_t step) {
  DeviceGuard guard(device_index());
  TG_CHECK(index.dtype() == DType::i64 && src.dtype() == line.dtype(),
           "kernel 'scatter_add_along' on cuda: index must be i64 and src of line's dtype");
  const int64_t count = index.numel();
  if (count == 0) return;
  const Tensor* const operands[3] = {&index, &line, &src};
  const StridedShape<3> layout = strided_shape(index.shape(), operands, "scatter_add_along");
  dispatch_floating(src.dtype(), "scatter_add_along", [&](auto tag) {
    using T = decltype(tag);
    launch("scatter_add_along", scatter_add_along_kernel<T>, indexing_launch(count),
           src.data_as<const T>(), index.data_as<const int64_t>(), line.data_as<T>(), step,
           layout, count);
  });
}

void CudaKernels::argsort_dim(const Tensor& x, DimSplit split, bool descending,
                              const Tensor& indices) {
  DeviceGuard guard(device_index());
  TG_CHECK(x.is_contiguous() && indices.is_contiguous() && indices.dtype() == DType::i64,
           "kernel 'argsort_dim' on cuda: x and indices must be contiguous, indices i64");
  const int64_t lines = split.outer * split.inner;
  if (lines == 0 || split.n == 0) return;
  TG_CHECK(split.n <= (int64_t{1} << 40), "kernel 'argsort_dim' on cuda: lines of ", split.n,
           " elements are longer than 2^40");
  int64_t padded = 1;
  while (padded < split.n) padded *= 2;
  dispatch_sortable(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const Tensor keys = empty({lines, padded}, x.dtype(), x.device());
    const Tensor positions = empty({lines, padded}, DType::i64, x.device());
    launch("argsort_dim", argsort_load_kernel<T>, indexing_launch(lines * padded),
           x.data_as<const T>(), split, padded, keys.data_as<T>(), positions.data_as<int64_t>());
    bitonic_sort(keys.data_as<T>(), positions.data_as<int64_t>(), lines, padded, split.n,
                 descending);
    launch("argsort_dim", argsort_store_kernel, indexing_launch(lines * split.n),
           positions.data_as<const int64_t>(), split, padded, indices.data_as<int64_t>());
  });
}

}  // namespace tg::cuda
