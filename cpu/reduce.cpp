// CPU kernels over the middle axis of a contiguous [outer, n, inner] tensor:
// sum, max, gather, scatter-add and (log-)softmax; and row normalisation for layer_norm.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tapegrad/cpu/kernels.h"
#include "tapegrad/runtime/features.h"
#include "tapegrad/runtime/threads.h"

namespace tg::cpu {
namespace {

// The work thresholds of this file's loops (the thread policy: runtime/threads.h): at most this
// many elements read run on the calling thread. A sum reads each element once; softmax and layer
// norm read a row two or three times, so they split from fewer.
constexpr int64_t kParallelSumElements = 1 << 16;
constexpr int64_t kParallelRowElements = 1 << 15;

// The sum of a contiguous row of n values: eight running sums (entries k = j mod 8), which the
// compiler keeps in one vector register, added pairwise at the end; then the tail in order. One
// add per element in flight instead of a chain of dependent adds through memory.
template <typename T>
T sum_of_row(const T* row, int64_t n) {
  T lanes[8] = {};
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    for (int j = 0; j < 8; ++j) lanes[j] += row[k + j];
  }
  const T even = (lanes[0] + lanes[4]) + (lanes[2] + lanes[6]);
  T total = even + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
  for (; k < n; ++k) total += row[k];
  return total;
}

}  // namespace

// With fewer outer slices than threads (a bias gradient: outer 1, n rows, inner features) the
// columns are split among the threads instead, so that each reads its own part of every row. Each
// sum still runs over k in order: the same bits at any thread count.
void CpuKernels::sum_dim(const Tensor& x, DimSplit s, const Tensor& out) {
  if (is_half(x.dtype())) return sum_dim_half(x, s, out);
  dispatch_floating(x.dtype(), "sum_dim", [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data_as<T>();
    T* result = out.data_as<T>();
    if (s.inner == 1) {  // sums along contiguous rows (a mean over the last dim)
      parallel_for(s.outer, grain_for(s.n, kParallelSumElements), [&](int64_t first, int64_t past) {
        for (int64_t o = first; o < past; ++o) result[o] = sum_of_row(in + o * s.n, s.n);
      });
      return;
    }
    const int64_t threads = num_threads();
    const int64_t column_blocks = s.outer < threads ? std::clamp<int64_t>(s.inner / 16, 1, threads) : 1;
    const int64_t block = (s.inner + column_blocks - 1) / column_blocks;
    const int64_t grain = grain_for(static_cast<double>(s.n) * block, kParallelSumElements);
    parallel_for(s.outer * column_blocks, grain, [&](int64_t first_piece, int64_t past_piece) {
      for (int64_t piece = first_piece; piece < past_piece; ++piece) {
        const int64_t o = piece / column_blocks, first = (piece % column_blocks) * block;
        const int64_t past = std::min(s.inner, first + block);
        T* sums = result + o * s.inner;
        for (int64_t i = first; i < past; ++i) sums[i] = T(0);
        for (int64_t k = 0; k < s.n; ++k) {
          const T* row = in + (o * s.n + k) * s.inner;
          for (int64_t i = first; i < past; ++i) sums[i] += row[i];
        }
      }
    });
  });
}

namespace {

// Whether a later element `candidate` takes over from the largest so far, `best`, in max's scan.
// NaN propagates, as in PyTorch: a slice holding a NaN has the max NaN, at its first NaN. A plain
// `candidate > best` would skip every NaN except one at k = 0 (comparisons with NaN are false), so
// where the NaN sits would decide the answer.
template <typename T>
bool takes_over(T candidate, T best) {
  if (std::isnan(best)) return false;  // the first NaN stays
  return std::isnan(candidate) || candidate > best;
}

}  // namespace

// The first largest element of each slice: the first index wins a tie, and the first NaN wins.
void CpuKernels::max_dim(const Tensor& x, DimSplit s, const Tensor& values, const Tensor& indices) {
  dispatch_floating(x.dtype(), "max_dim", [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data_as<T>();
    T* best = values.data_as<T>();
    int64_t* where = indices.data_as<int64_t>();
    for (int64_t o = 0; o < s.outer; ++o) {
      for (int64_t i = 0; i < s.inner; ++i) {
        int64_t arg = 0;
        const T* slice = in + o * s.n * s.inner + i;  // element k at slice[k * s.inner]
        for (int64_t k = 1; k < s.n; ++k) {
          if (takes_over(slice[k * s.inner], slice[arg * s.inner])) arg = k;
        }
        best[o * s.inner + i] = slice[arg * s.inner];
        where[o * s.inner + i] = arg;
      }
    }
  });
}

void CpuKernels::gather_dim(const Tensor& x, DimSplit s, const Tensor& index, const Tensor& out) {
  dispatch_floating(x.dtype(), "gather_dim", [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data_as<T>();
    const int64_t* picked = index.data_as<int64_t>();
    T* result = out.data_as<T>();
    for (int64_t o = 0; o < s.outer; ++o) {
      for (int64_t i = 0; i < s.inner; ++i) {
        result[o * s.inner + i] = in[(o * s.n + picked[o * s.inner + i]) * s.inner + i];
      }
    }
  });
}

void CpuKernels::scatter_add_dim(const Tensor& src, DimSplit s, const Tensor& index,
                                 const Tensor& out) {
  dispatch_floating(src.dtype(), "scatter_add_dim", [&](auto tag) {
    using T = decltype(tag);
    const T* in = src.data_as<T>();
    const int64_t* picked = index.data_as<int64_t>();
    T* result = out.data_as<T>();
    for (int64_t o = 0; o < s.outer; ++o) {
      for (int64_t i = 0; i < s.inner; ++i) {
        result[(o * s.n + picked[o * s.inner + i]) * s.inner + i] += in[o * s.inner + i];
      }
    }
  });
}

namespace {

// Softmax (or log-softmax) of contiguous f32 rows (inner 1) with the AVX2 exponentials
// (cpu/fast/elementwise_avx2.cpp): the plain loop's steps, each exp within 2 ulp of std::exp.
void softmax_rows_f32_fast(const float* in, float* result, DimSplit s, bool log) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t grain = grain_for(static_cast<double>(s.n), kParallelRowElements);
  parallel_for(s.outer, grain, [&](int64_t first, int64_t past) {
    for (int64_t o = first; o < past; ++o) {
      const float* row = in + o * s.n;
      float* row_out = result + o * s.n;
      float largest = kNegInf;
      for (int64_t k = 0; k < s.n; ++k) largest = max_or_nan(largest, row[k]);
      if (largest == kNegInf) {
        std::fill(row_out, row_out + s.n, log ? kNegInf : 0.0f);
        continue;
      }
      const float total = exp_shifted_f32_avx2(row, largest, row_out, s.n);
      if (log) {
        const float log_total = std::log(total) + largest;
        for (int64_t k = 0; k < s.n; ++k) row_out[k] = row[k] - log_total;
      } else {
        const float inverse = 1.0f / total;
        for (int64_t k = 0; k < s.n; ++k) row_out[k] *= inverse;
      }
    }
  });
}

}  // namespace

// A row whose every entry is -inf (a fully masked attention row) gives 0, not NaN; a row holding
// a NaN gives NaN throughout (max_or_nan), as PyTorch's softmax.
void CpuKernels::softmax_dim(const Tensor& x, DimSplit s, bool log, const Tensor& out) {
  if (x.dtype() == DType::f32 && s.inner == 1 && fast_paths_enabled()) {
    return softmax_rows_f32_fast(x.data_as<float>(), out.data_as<float>(), s, log);
  }
  dispatch_floating(x.dtype(), "softmax_dim", [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data_as<T>();
    T* result = out.data_as<T>();
    const int64_t grain = grain_for(static_cast<double>(s.n) * s.inner, kParallelRowElements);
    parallel_for(s.outer, grain, [&](int64_t first, int64_t past) {
      for (int64_t o = first; o < past; ++o) {
        for (int64_t i = 0; i < s.inner; ++i) {
          const T* row = in + o * s.n * s.inner + i;
          T* row_out = result + o * s.n * s.inner + i;
          T largest = -std::numeric_limits<T>::infinity();
          for (int64_t k = 0; k < s.n; ++k) largest = max_or_nan(largest, row[k * s.inner]);
          if (largest == -std::numeric_limits<T>::infinity()) {
            for (int64_t k = 0; k < s.n; ++k) row_out[k * s.inner] = log ? largest : T(0);
            continue;
          }
          T total = 0;
          for (int64_t k = 0; k < s.n; ++k) total += std::exp(row[k * s.inner] - largest);
          if (log) {
            const T log_total = std::log(total) + largest;
            for (int64_t k = 0; k < s.n; ++k) row_out[k * s.inner] = row[k * s.inner] - log_total;
          } else {
            const T inverse = T(1) / total;
            for (int64_t k = 0; k < s.n; ++k) {
              row_out[k * s.inner] = std::exp(row[k * s.inner] - largest) * inverse;
            }
          }
        }
      }
    });
  });
}

void CpuKernels::normalize_rows(const Tensor& x, double eps, const Tensor& out, const Tensor& mean,
                                const Tensor& rstd) {
  dispatch_floating(x.dtype(), "normalize_rows", [&](auto tag) {
    using T = decltype(tag);
    const int64_t width = x.size(-1);
    const int64_t rows = x.numel() / std::max<int64_t>(width, 1);
    const T* in = x.data_as<T>();
    T* result = out.data_as<T>();
    T* means = mean.data_as<T>();
    T* rstds = rstd.data_as<T>();
    parallel_for(rows, grain_for(width, kParallelRowElements), [&](int64_t first, int64_t past) {
      for (int64_t r = first; r < past; ++r) {
        const T* row = in + r * width;
        T total = 0;
        for (int64_t k = 0; k < width; ++k) total += row[k];
        const T mu = total / T(width);
        T squares = 0;
        for (int64_t k = 0; k < width; ++k) squares += (row[k] - mu) * (row[k] - mu);
        const T inv_std = T(1) / std::sqrt(squares / T(width) + T(eps));
        for (int64_t k = 0; k < width; ++k) result[r * width + k] = (row[k] - mu) * inv_std;
        means[r] = mu;
        rstds[r] = inv_std;
      }
    });
  });
}

// f16 / bf16: the sums run in f32 and are rounded once.
void sum_dim_half(const Tensor& x, DimSplit s, const Tensor& out) {
  dispatch_half(x.dtype(), "sum_dim", [&](auto tag) {
    using H = decltype(tag);
    const H* in = x.data_as<H>();
    H* result = out.data_as<H>();
    const int64_t grain = grain_for(static_cast<double>(s.n) * s.inner, kParallelSumElements);
    parallel_for(s.outer, grain, [&](int64_t first, int64_t past) {
      for (int64_t o = first; o < past; ++o) {
        std::vector<float> totals(s.inner, 0.0f);
        for (int64_t k = 0; k < s.n; ++k) {
          const H* row = in + (o * s.n + k) * s.inner;
          for (int64_t i = 0; i < s.inner; ++i) totals[i] += convert<float>(row[i]);
        }
        for (int64_t i = 0; i < s.inner; ++i) result[o * s.inner + i] = convert<H>(totals[i]);
      }
    });
  });
}

}  // namespace tg::cpu
