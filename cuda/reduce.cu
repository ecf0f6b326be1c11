// CUDA kernels over the middle axis of a contiguous [outer, n, inner] tensor: sum, max, gather,
// scatter-add and (log-)softmax; and row normalisation for layer_norm.
// The CPU twins are in cpu/reduce.cpp.
//
// The reductions give each row one block: row r = o * inner + i holds the n elements
// x[o, k, i] = x[(o * n + k) * inner + i], `inner` apart. The block's threads stride over the row,
// each keeping a partial result, and a tree in shared memory combines the partials. Rows come in a
// grid-stride loop over blocks, so the grid stays small however many rows there are; every thread
// of a block runs the same iterations, so the __syncthreads() inside are reached by all of them.
// (Rows with inner > 1 are read `inner` apart, uncoalesced: simple rather than fast.)
//
// The sums run in a different order from the CPU's left-to-right loops, so they may differ in the
// last bits; max (NaN propagating, as the CPU's), gather and scatter-add are exact.
#include <algorithm>
#include <cstdint>
#include <limits>

#include "tapegrad/cuda/device_math.h"
#include "tapegrad/cuda/device_types.h"
#include "tapegrad/cuda/kernels.h"

namespace tg::cuda {
namespace {

constexpr unsigned kThreads = 256;        // elementwise kernels
constexpr unsigned kMaxRowThreads = 256;  // threads of a block that reduces one row
constexpr unsigned kMaxRowBlocks = 65535;

// Threads for a block that reduces rows of n elements: a power of two (the tree reduction halves
// it) from one warp up to kMaxRowThreads, no more than the row needs.
unsigned row_threads(int64_t n) {
  unsigned threads = 32;
  while (threads < kMaxRowThreads && threads < n) threads *= 2;
  return threads;
}

// The launch for `rows` rows of n elements, with `shared_per_thread` bytes of scratch a thread.
LaunchShape row_launch(int64_t rows, int64_t n, size_t shared_per_thread) {
  const unsigned threads = row_threads(n);
  return LaunchShape{dim3(blocks_for(rows, 1, kMaxRowBlocks)), dim3(threads),
                     threads * shared_per_thread};
}

// Where row `row` of a [outer, n, inner] split starts (its element k is `inner` further each).
__device__ inline int64_t row_start(const DimSplit& split, int64_t row) {
  const int64_t o = row / split.inner, i = row % split.inner;
  return o * split.n * split.inner + i;
}

// combine() of every thread's `value` over the block, a tree in shared memory (blockDim.x a power
// of two, scratch one element a thread); all threads get it back. Plus{} sums; Larger{} takes the
// largest with max_of, so NaN values never win.
template <typename T, typename Op>
__device__ T block_reduce(T value, T* scratch, Op combine) {
  const unsigned t = threadIdx.x;
  scratch[t] = value;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (t < half) scratch[t] = combine(scratch[t], scratch[t + half]);
    __syncthreads();
  }
  const T result = scratch[0];
  __syncthreads();  // everyone has read scratch[0] before anyone writes scratch again
  return result;
}

// ---- Kernels ----------------------------------------------------------------------------------

// out[o, i] = sum over k of x[o, k, i]; the half types accumulate in f32 and round once.
template <typename T>
__global__ void sum_dim_kernel(const T* x, DimSplit split, T* out) {
  using C = compute_t<T>;
  C* scratch = dynamic_shared<C>();
  const int64_t rows = split.outer * split.inner;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* first = x + row_start(split, row);
    C partial = 0;
    for (int64_t k = threadIdx.x; k < split.n; k += blockDim.x) {
      partial += convert<C>(first[k * split.inner]);
    }
    const C total = block_reduce(partial, scratch, Plus{});
    if (threadIdx.x == 0) out[row] = convert<T>(total);
  }
}

// Whether element `arg` (value `value`) is max's pick over element `best_arg` (`best`): NaN
// propagates, as in PyTorch and the CPU's scan (cpu/reduce.cpp takes_over): any NaN beats any
// number, and among NaNs or equal numbers the smaller index wins. A total order on (value, index),
// so the threads' partial picks combine in any order to the CPU's answer: the first NaN if the row
// holds one, else the first largest.
template <typename T>
__device__ inline bool picked_over(T value, int64_t arg, T best, int64_t best_arg) {
  const bool value_nan = value != value, best_nan = best != best;  // NaN: unequal to itself
  if (value_nan != best_nan) return value_nan;
  if (value_nan || value == best) return arg < best_arg;
  return value > best;
}

// (values, indices)[o, i] = the largest x[o, k, i] and its k, as the CPU's scan finds it: the
// first NaN when the row holds one, else the first largest. Every thread picks among its own
// elements (k = t, t + blockDim.x, ...; element 0 as the start of those that have none), then
// pairs combine by picked_over.
template <typename T>
__global__ void max_dim_kernel(const T* x, DimSplit split, T* values, int64_t* indices) {
  T* best_values = dynamic_shared<T>();  // blockDim.x values, then blockDim.x indices
  int64_t* best_indices = reinterpret_cast<int64_t*>(best_values + blockDim.x);
  const unsigned t = threadIdx.x;
  const int64_t rows = split.outer * split.inner;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* first = x + row_start(split, row);
    T best = first[0];  // this thread's pick so far
    int64_t arg = 0;
    for (int64_t k = t; k < split.n; k += blockDim.x) {
      const T value = first[k * split.inner];
      if (picked_over(value, k, best, arg)) {
        best = value;
        arg = k;
      }
    }
    best_values[t] = best;
    best_indices[t] = arg;
    __syncthreads();
    for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
      if (t < half) {
        const T other = best_values[t + half];
        const int64_t other_arg = best_indices[t + half];
        if (picked_over(other, other_arg, best_values[t], best_indices[t])) {
          best_values[t] = other;
          best_indices[t] = other_arg;
        }
      }
      __syncthreads();
    }
    if (t == 0) {
      values[row] = best_values[0];
      indices[row] = best_indices[0];
    }
    __syncthreads();  // thread 0 has read the scratch before the next row overwrites it
  }
}

// out[o, i] = x[o, index[o, i], i], one thread an output element.
template <typename T>
__global__ void gather_dim_kernel(const T* x, DimSplit split, const int64_t* index, T* out) {
  const int64_t count = split.outer * split.inner;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < count;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t o = e / split.inner, i = e % split.inner;
    out[e] = x[(o * split.n + index[e]) * split.inner + i];
  }
}

// out[o, index[o, i], i] += src[o, i], one thread a source element. Distinct (o, i) never share
// a destination, so no two additions race and the result is exact; atomicAdd keeps the kernel
// correct even so, should it ever be handed overlapping rows.
template <typename T>
__global__ void scatter_add_dim_kernel(const T* src, DimSplit split, const int64_t* index, T* out) {
  const int64_t count = split.outer * split.inner;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < count;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t o = e / split.inner, i = e % split.inner;
    atomicAdd(&out[(o * split.n + index[e]) * split.inner + i], src[e]);
  }
}

// (Log-)softmax of each row: with m the row's largest value (NaN when it holds a NaN, which then
// makes the whole row NaN, as on the CPU), softmax = exp(x - m) / sum exp(x - m) and
// log-softmax = x - (log(sum exp(x - m)) + m). A row whose every entry is -inf (fully masked)
// gives 0 (log: -inf), not NaN.
template <typename T>
__global__ void softmax_dim_kernel(const T* x, DimSplit split, bool log, T* out) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  T* scratch = dynamic_shared<T>();
  const int64_t rows = split.outer * split.inner;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t start = row_start(split, row);
    const T* in = x + start;
    T* result = out + start;
    T partial_max = kNegInf;
    for (int64_t k = threadIdx.x; k < split.n; k += blockDim.x) {
      partial_max = max_or_nan(partial_max, in[k * split.inner]);
    }
    const T largest = block_reduce(partial_max, scratch, LargerOrNaN{});
    if (largest == kNegInf) {  // the same for every thread
      for (int64_t k = threadIdx.x; k < split.n; k += blockDim.x) {
        result[k * split.inner] = log ? kNegInf : T(0);
      }
      continue;
    }
    T partial_sum = 0;
    for (int64_t k = threadIdx.x; k < split.n; k += blockDim.x) {
      partial_sum += exp_of(in[k * split.inner] - largest);
    }
    const T total = block_reduce(partial_sum, scratch, Plus{});
    if (log) {
      const T log_total = log_of(total) + largest;
      for (int64_t k = threadIdx.x; k < split.n; k += blockDim.x) {
        result[k * split.inner] = in[k * split.inner] - log_total;
      }
    } else {
      const T inverse = T(1) / total;
      for (int64_t k = threadIdx.x; k < split.n; k += blockDim.x) {
        result[k * split.inner] = exp_of(in[k * split.inner] - largest) * inverse;
      }
    }
  }
}

// Per row of x [rows, width]: mean = sum / width, rstd = 1 / sqrt(sum (x - mean)^2 / width + eps)
// (the CPU's two-pass variance), out = (x - mean) * rstd.
template <typename T>
__global__ void normalize_rows_kernel(const T* x, int64_t rows, int64_t width, T eps, T* out,
                                      T* mean, T* rstd) {
  T* scratch = dynamic_shared<T>();
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* in = x + r * width;
    T partial = 0;
    for (int64_t k = threadIdx.x; k < width; k += blockDim.x) partial += in[k];
    const T mu = block_reduce(partial, scratch, Plus{}) / T(width);
    T partial_squares = 0;
    for (int64_t k = threadIdx.x; k < width; k += blockDim.x) {
      const T centered = in[k] - mu;
      partial_squares += centered * centered;
    }
    const T squares = block_reduce(partial_squares, scratch, Plus{});
    const T inv_std = T(1) / sqrt_of(squares / T(width) + eps);
    for (int64_t k = threadIdx.x; k < width; k += blockDim.x) out[r * width + k] = (in[k] - mu) * inv_std;
    if (threadIdx.x == 0) {
      mean[r] = mu;
      rstd[r] = inv_std;
    }
  }
}

// ---- Host-side checks -------------------------------------------------------------------------

void require_contiguous(const Tensor& t, const char* kernel, const char* what) {
  TG_CHECK(t.is_contiguous(), "kernel '", kernel, "' on cuda: ", what, " must be contiguous");
}

void require_dtype(const Tensor& t, DType dtype, const char* kernel, const char* what) {
  TG_CHECK(t.dtype() == dtype, "kernel '", kernel, "' on cuda: ", what, " is ", dtype_name(t.dtype()),
           ", expected ", dtype_name(dtype));
}

LaunchShape elementwise_launch(int64_t count) {
  return LaunchShape{dim3(blocks_for(count, kThreads)), dim3(kThreads), 0};
}

}  // namespace

// ---- The Kernels methods ----------------------------------------------------------------------

void CudaKernels::sum_dim(const Tensor& x, DimSplit split, const Tensor& out) {
  DeviceGuard guard(device_index());
  require_contiguous(x, "sum_dim", "x");
  require_dtype(out, x.dtype(), "sum_dim", "out");
  const int64_t rows = split.outer * split.inner;
  if (rows == 0) return;
  dispatch_floating_or_half(x.dtype(), "sum_dim", [&](auto tag) {
    using T = decltype(tag);
    launch("sum_dim", sum_dim_kernel<T>, row_launch(rows, split.n, sizeof(compute_t<T>)),
           x.data_as<const T>(), split, out.data_as<T>());
  });
}

void CudaKernels::max_dim(const Tensor& x, DimSplit split, const Tensor& values,
                          const Tensor& indices) {
  DeviceGuard guard(device_index());
  require_contiguous(x, "max_dim", "x");
  require_dtype(values, x.dtype(), "max_dim", "values");
  require_dtype(indices, DType::i64, "max_dim", "indices");
  TG_CHECK(split.n > 0, "kernel 'max_dim' on cuda: the reduced dim is empty");
  const int64_t rows = split.outer * split.inner;
  if (rows == 0) return;
  dispatch_floating(x.dtype(), "max_dim", [&](auto tag) {
    using T = decltype(tag);
    launch("max_dim", max_dim_kernel<T>, row_launch(rows, split.n, sizeof(T) + sizeof(int64_t)),
           x.data_as<const T>(), split, values.data_as<T>(), indices.data_as<int64_t>());
  });
}

void CudaKernels::gather_dim(const Tensor& x, DimSplit split, const Tensor& index,
                             const Tensor& out) {
  DeviceGuard guard(device_index());
  require_contiguous(x, "gather_dim", "x");
  require_contiguous(index, "gather_dim", "index");
  require_dtype(index, DType::i64, "gather_dim", "index");
  require_dtype(out, x.dtype(), "gather_dim", "out");
  const int64_t count = split.outer * split.inner;
  if (count == 0) return;
  dispatch_floating(x.dtype(), "gather_dim", [&](auto tag) {
    using T = decltype(tag);
    launch("gather_dim", gather_dim_kernel<T>, elementwise_launch(count), x.data_as<const T>(),
           split, index.data_as<const int64_t>(), out.data_as<T>());
  });
}

void CudaKernels::scatter_add_dim(const Tensor& src, DimSplit split, const Tensor& index,
                                  const Tensor& out) {
  DeviceGuard guard(device_index());
  require_contiguous(src, "scatter_add_dim", "src");
  require_contiguous(index, "scatter_add_dim", "index");
  require_dtype(index, DType::i64, "scatter_add_dim", "index");
  require_dtype(out, src.dtype(), "scatter_add_dim", "out");
  const int64_t count = split.outer * split.inner;
  if (count == 0) return;
  dispatch_floating(src.dtype(), "scatter_add_dim", [&](auto tag) {
    using T = decltype(tag);
    launch("scatter_add_dim", scatter_add_dim_kernel<T>, elementwise_launch(count),
           src.data_as<const T>(), split, index.data_as<const int64_t>(), out.data_as<T>());
  });
}

void CudaKernels::softmax_dim(const Tensor& x, DimSplit split, bool log, const Tensor& out) {
  DeviceGuard guard(device_index());
  require_contiguous(x, "softmax_dim", "x");
  require_dtype(out, x.dtype(), "softmax_dim", "out");
  const int64_t rows = split.outer * split.inner;
  if (rows == 0 || split.n == 0) return;
  dispatch_floating(x.dtype(), "softmax_dim", [&](auto tag) {
    using T = decltype(tag);
    launch("softmax_dim", softmax_dim_kernel<T>, row_launch(rows, split.n, sizeof(T)),
           x.data_as<const T>(), split, log, out.data_as<T>());
  });
}

void CudaKernels::normalize_rows(const Tensor& x, double eps, const Tensor& out, const Tensor& mean,
                                 const Tensor& rstd) {
  DeviceGuard guard(device_index());
  require_contiguous(x, "normalize_rows", "x");
  require_dtype(out, x.dtype(), "normalize_rows", "out");
  require_dtype(mean, x.dtype(), "normalize_rows", "mean");
  require_dtype(rstd, x.dtype(), "normalize_rows", "rstd");
  const int64_t width = x.dim() == 0 ? 1 : x.size(-1);
  const int64_t rows = x.numel() / std::max<int64_t>(width, 1);
  if (rows == 0) return;
  dispatch_floating(x.dtype(), "normalize_rows", [&](auto tag) {
    using T = decltype(tag);
    launch("normalize_rows", normalize_rows_kernel<T>, row_launch(rows, width, sizeof(T)),
           x.data_as<const T>(), rows, width, static_cast<T>(eps), out.data_as<T>(),
           mean.data_as<T>(), rstd.data_as<T>());
  });
}

}  // namespace tg::cuda
