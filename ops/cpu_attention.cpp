// CPU fused attention (FlashAttention's algorithm on BLAS tiles).
//
// Forward, per tile of queries: walk the key tiles, S = scale Q K^T on one GEMM, keep a running
// row max m and row sum l (online softmax), rescale the accumulator when m grows, add P V with a
// second GEMM. Causal tiles entirely above the diagonal are never visited. Only out and the
// per-row log-sum-exp (m + log l) are kept: O(S) statistics instead of the O(S^2) weights.
//
// Backward recomputes P = exp(S - lse) tile by tile and applies, with D_i = dO_i . O_i,
//   dV += P^T dO,  dP = dO V^T,  dS = P * (dP - D),  dQ += scale dS K,  dK += scale dS^T Q
// (with dropout, P and dP carry the keep mask Z / (1 - p)).
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <omp.h>
#include <vector>

#include "tapegrad/autograd/rng.h"
#include "tapegrad/autograd/threads.h"
#include "tapegrad/ops/cpu_kernels.h"

extern "C" void openblas_set_num_threads(int);

namespace tg::cpu {
namespace {

constexpr int64_t kQueryTile = 64;
constexpr int64_t kKeyTile = 128;

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
              k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
          int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
              k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// row[c] = exp(row[c] - shift) for a row of scores, returning the row's sum: the hot loop of
// both passes. f32 runs four lanes at a time (GCC/Clang vector extensions; SSE2 is the x86-64
// baseline) with Cephes' expf: Cody-Waite reduction x = n ln2 + r, a degree-5 polynomial for
// exp(r), times 2^n built in the exponent bits. It is within 1e-7 relative of std::exp, exactly 0
// below -87 (a masked -inf gives 0, as exp(-inf)) and keeps NaN. About twice as fast as calling
// std::exp per element here; f64 (gradcheck) keeps std::exp.
using Floats = float __attribute__((vector_size(16)));
using Ints = int32_t __attribute__((vector_size(16)));
constexpr int64_t kLanes = 4;

Floats splat(float value) { return Floats{} + value; }

Floats exp_lanes(Floats x) {
  const Floats low = x < -87.0f ? splat(-87.0f) : x;  // a NaN fails both tests and stays
  const Floats clamped = low > 88.0f ? splat(88.0f) : low;
  const Floats n = (clamped * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round(x/ln2)
  const Floats r = clamped - n * 0.693359375f - n * -2.12194440e-4f;               // x - n ln2
  Floats poly = splat(1.9875691500e-4f);
  poly = poly * r + 1.3981999507e-3f;
  poly = poly * r + 8.3334519073e-3f;
  poly = poly * r + 4.1665795894e-2f;
  poly = poly * r + 1.6666665459e-1f;
  poly = poly * r + 5.0000001201e-1f;
  const Floats exp_r = poly * r * r + r + 1.0f;
  const Floats two_to_n = (Floats)((__builtin_convertvector(n, Ints) + 127) << 23);
  return x < -87.0f ? splat(0.0f) : exp_r * two_to_n;
}

float exp_shifted_row(float* row, int64_t cols, float shift) {
  Floats sum{};
  int64_t c = 0;
  for (; c + kLanes <= cols; c += kLanes) {
    Floats x;
    std::memcpy(&x, row + c, sizeof x);
    x = exp_lanes(x - shift);
    std::memcpy(row + c, &x, sizeof x);
    sum += x;
  }
  if (c < cols) {  // the tail, padded with -inf (which gives 0)
    Floats x = splat(-std::numeric_limits<float>::infinity());
    std::memcpy(&x, row + c, (cols - c) * sizeof(float));
    x = exp_lanes(x - shift);
    std::memcpy(row + c, &x, (cols - c) * sizeof(float));
    sum += x;
  }
  return (sum[0] + sum[1]) + (sum[2] + sum[3]);
}

// The largest entry of a row (-inf for an empty or fully masked one), four lanes at a time: a
// scalar max is a chain of dependent instructions. NaNs are skipped, as by std::max(best, x).
float row_max_of(const float* row, int64_t cols) {
  Floats best = splat(-std::numeric_limits<float>::infinity());
  int64_t c = 0;
  for (; c + kLanes <= cols; c += kLanes) {
    Floats x;
    std::memcpy(&x, row + c, sizeof x);
    best = best < x ? x : best;
  }
  float result = std::max(std::max(best[0], best[1]), std::max(best[2], best[3]));
  for (; c < cols; ++c) result = std::max(result, row[c]);
  return result;
}

double row_max_of(const double* row, int64_t cols) {
  double result = -std::numeric_limits<double>::infinity();
  for (int64_t c = 0; c < cols; ++c) result = std::max(result, row[c]);
  return result;
}

double exp_shifted_row(double* row, int64_t cols, double shift) {
  double sum = 0;
  for (int64_t c = 0; c < cols; ++c) {
    row[c] = std::exp(row[c] - shift);
    sum += row[c];
  }
  return sum;
}

// What one batch item needs: sizes, masks and dropout, shared by forward and backward.
struct Item {
  const AttentionProblem& p;
  int64_t n, sq, sk;
  const bool* mask;

  // row[c] = -inf where query i may not attend key j0 + c (j0 + c > i when causal, or the mask).
  template <typename T>
  void mask_row(int64_t i, int64_t j0, int64_t cols, T* row) const {
    constexpr T kNegInf = -std::numeric_limits<T>::infinity();
    if (p.causal) {
      for (int64_t c = std::max<int64_t>(i + 1 - j0, 0); c < cols; ++c) row[c] = kNegInf;
    }
    if (mask) {
      const bool* allowed = mask + p.mask_offsets[n] + i * p.mask_row_stride + j0 * p.mask_col_stride;
      for (int64_t c = 0; c < cols; ++c) {
        if (!allowed[c * p.mask_col_stride]) row[c] = kNegInf;
      }
    }
  }
  // The dropout factors of probabilities (i, j0 .. j0+cols-1): 0 if dropped, else 1 / (1 - p).
  template <typename T>
  void keep_row(int64_t i, int64_t j0, int64_t cols, T* factors) const {
    float uniforms[kKeyTile];
    philox_uniform_fill(p.seed, p.offset, (n * sq + i) * sk + j0, cols, uniforms);
    const T kept = T(1.0 / (1.0 - p.dropout_p));
    for (int64_t c = 0; c < cols; ++c) factors[c] = uniforms[c] >= p.dropout_p ? kept : T(0);
  }
  // Keys that query rows [i0, i0 + rows) can see at all.
  int64_t key_end(int64_t i0, int64_t rows) const {
    return p.causal ? std::min(sk, i0 + rows) : sk;
  }
};

// Runs body(n) for every batch item, or body(n, tile) with OpenMP, keeping OpenBLAS on one
// thread inside the parallel region so that the two pools never run at full width together.
template <typename Body>
void parallel_for(int64_t count, Body&& body) {
  const bool parallel = count > 1 && num_threads() > 1;
  if (parallel) openblas_set_num_threads(1);
#pragma omp parallel for schedule(dynamic) if (parallel)
  for (int64_t index = 0; index < count; ++index) body(index);
  if (parallel) openblas_set_num_threads(num_threads());
}

template <typename T>
void forward(const AttentionProblem& p, const Tensor& out_tensor, const Tensor& lse_tensor) {
  const int64_t batch = p.q.size(0), sq = p.q.size(1), sk = p.k.size(1);
  const int64_t d = p.q.size(2), dv = p.v.size(2);
  const int64_t tiles = (sq + kQueryTile - 1) / kQueryTile;
  const bool* mask = p.mask.defined() ? p.mask.data_as<bool>() : nullptr;
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();

  parallel_for(batch * tiles, [&](int64_t work) {
    const int64_t n = work / tiles, i0 = (work % tiles) * kQueryTile;
    const int64_t rows = std::min(kQueryTile, sq - i0);
    const Item item{p, n, sq, sk, mask};
    const T* q = p.q.data_as<T>() + (n * sq + i0) * d;
    const T* k = p.k.data_as<T>() + n * sk * d;
    const T* v = p.v.data_as<T>() + n * sk * dv;
    std::vector<T> scores(rows * kKeyTile), row_max(rows, kNegInf), row_sum(rows, 0);
    std::vector<T> acc(rows * dv, 0), keep(kKeyTile);

    const int64_t key_end = item.key_end(i0, rows);
    for (int64_t j0 = 0; j0 < key_end; j0 += kKeyTile) {
      const int64_t cols = std::min(kKeyTile, key_end - j0);
      gemm(false, true, rows, cols, d, T(p.scale), q, d, k + j0 * d, d, T(0), scores.data(), cols);
      for (int64_t r = 0; r < rows; ++r) {
        T* s = scores.data() + r * cols;
        item.mask_row(i0 + r, j0, cols, s);
        const T new_max = std::max(row_max[r], row_max_of(s, cols));
        if (new_max == kNegInf) {  // nothing visible in this row yet
          std::fill(s, s + cols, T(0));
          continue;
        }
        const T correction = std::exp(row_max[r] - new_max);  // exp(-inf) = 0 on the first tile
        row_sum[r] *= correction;
        for (int64_t c = 0; c < dv; ++c) acc[r * dv + c] *= correction;
        row_sum[r] += exp_shifted_row(s, cols, new_max);
        if (p.dropout_p > 0) {  // the normaliser above counts every probability; out drops some
          item.keep_row(i0 + r, j0, cols, keep.data());
          for (int64_t c = 0; c < cols; ++c) s[c] *= keep[c];
        }
        row_max[r] = new_max;
      }
      gemm(false, false, rows, dv, cols, T(1), scores.data(), cols, v + j0 * dv, dv, T(1), acc.data(), dv);
    }
    T* out = out_tensor.data_as<T>() + (n * sq + i0) * dv;
    T* lse = lse_tensor.data_as<T>() + n * sq + i0;
    for (int64_t r = 0; r < rows; ++r) {
      const bool empty = row_sum[r] == T(0);  // a fully masked row: output 0, gradient 0
      for (int64_t c = 0; c < dv; ++c) out[r * dv + c] = empty ? T(0) : acc[r * dv + c] / row_sum[r];
      lse[r] = empty ? kNegInf : row_max[r] + std::log(row_sum[r]);
    }
  });
}

template <typename T>
void backward(const AttentionProblem& p, const Tensor& out_tensor, const Tensor& lse_tensor,
              const Tensor& grad_out, const Tensor& grad_q, const Tensor& grad_k,
              const Tensor& grad_v) {
  const int64_t batch = p.q.size(0), sq = p.q.size(1), sk = p.k.size(1);
  const int64_t d = p.q.size(2), dv = p.v.size(2);
  const bool* mask = p.mask.defined() ? p.mask.data_as<bool>() : nullptr;
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();

  parallel_for(batch, [&](int64_t n) {  // items are independent; tiles of one item share dK, dV
    const Item item{p, n, sq, sk, mask};
    const T* q = p.q.data_as<T>() + n * sq * d;
    const T* k = p.k.data_as<T>() + n * sk * d;
    const T* v = p.v.data_as<T>() + n * sk * dv;
    const T* out = out_tensor.data_as<T>() + n * sq * dv;
    const T* lse = lse_tensor.data_as<T>() + n * sq;
    const T* d_out = grad_out.data_as<T>() + n * sq * dv;
    T* dq = grad_q.data_as<T>() + n * sq * d;
    T* dk = grad_k.data_as<T>() + n * sk * d;
    T* d_v = grad_v.data_as<T>() + n * sk * dv;

    std::vector<T> probs(kQueryTile * kKeyTile), dropped(kQueryTile * kKeyTile);
    std::vector<T> d_probs(kQueryTile * kKeyTile), row_dot(kQueryTile), keep(kQueryTile * kKeyTile);
    for (int64_t i0 = 0; i0 < sq; i0 += kQueryTile) {
      const int64_t rows = std::min(kQueryTile, sq - i0);
      for (int64_t r = 0; r < rows; ++r) {  // D_i = dO_i . O_i
        T dot = 0;
        for (int64_t c = 0; c < dv; ++c) dot += d_out[(i0 + r) * dv + c] * out[(i0 + r) * dv + c];
        row_dot[r] = dot;
      }
      const int64_t key_end = item.key_end(i0, rows);
      for (int64_t j0 = 0; j0 < key_end; j0 += kKeyTile) {
        const int64_t cols = std::min(kKeyTile, key_end - j0);
        gemm(false, true, rows, cols, d, T(p.scale), q + i0 * d, d, k + j0 * d, d, T(0), probs.data(), cols);
        for (int64_t r = 0; r < rows; ++r) {
          T* prob = probs.data() + r * cols;
          if (lse[i0 + r] == kNegInf) {  // a fully masked row: no probabilities, no gradient
            std::fill(prob, prob + cols, T(0));
          } else {
            item.mask_row(i0 + r, j0, cols, prob);
            exp_shifted_row(prob, cols, lse[i0 + r]);
          }
          if (p.dropout_p > 0) {
            T* factors = keep.data() + r * cols;
            item.keep_row(i0 + r, j0, cols, factors);
            for (int64_t c = 0; c < cols; ++c) dropped[r * cols + c] = prob[c] * factors[c];
          }
        }
        // dV_j += P~^T dO_i ; dP~ = dO_i V_j^T  (P~ = P without dropout)
        const T* kept_probs = p.dropout_p > 0 ? dropped.data() : probs.data();
        gemm(true, false, cols, dv, rows, T(1), kept_probs, cols, d_out + i0 * dv, dv, T(1), d_v + j0 * dv, dv);
        gemm(false, true, rows, cols, dv, T(1), d_out + i0 * dv, dv, v + j0 * dv, dv, T(0), d_probs.data(), cols);
        for (int64_t r = 0; r < rows; ++r) {  // dS = P * (dP - D), dP = dP~ * Z / (1 - p)
          for (int64_t c = 0; c < cols; ++c) {
            T d_prob = d_probs[r * cols + c];
            if (p.dropout_p > 0) d_prob *= keep[r * cols + c];
            d_probs[r * cols + c] = probs[r * cols + c] * (d_prob - row_dot[r]);
          }
        }
        // dQ_i += scale dS K_j ; dK_j += scale dS^T Q_i
        gemm(false, false, rows, d, cols, T(p.scale), d_probs.data(), cols, k + j0 * d, d, T(1), dq + i0 * d, d);
        gemm(true, false, cols, d, rows, T(p.scale), d_probs.data(), cols, q + i0 * d, d, T(1), dk + j0 * d, d);
      }
    }
  });
}

}  // namespace

// f16 / bf16 (mixed precision): the half tensors are converted to f32 once, the f32 kernel runs
// (f32 scores, softmax statistics and accumulators) and each result is rounded once into its
// half output. The log-sum-exp is f32 for half inputs (the op allocates it so).
namespace {

Tensor f32_copy(Kernels& kernels, const Tensor& t) {
  Tensor converted = empty(t.shape(), DType::f32, t.device());
  kernels.copy(t, converted);
  return converted;
}

AttentionProblem f32_problem(Kernels& kernels, const AttentionProblem& problem) {
  AttentionProblem converted = problem;
  converted.q = f32_copy(kernels, problem.q);
  converted.k = f32_copy(kernels, problem.k);
  converted.v = f32_copy(kernels, problem.v);
  return converted;
}

}  // namespace

void CpuKernels::attention_forward(const AttentionProblem& problem, const Tensor& out,
                                   const Tensor& logsumexp) {
  if (is_half(problem.q.dtype())) {
    const Tensor out32 = empty(out.shape(), DType::f32, out.device());
    forward<float>(f32_problem(*this, problem), out32, logsumexp);
    copy(out32, out);
    return;
  }
  dispatch_floating(problem.q.dtype(), "attention_forward",
                    [&](auto tag) { forward<decltype(tag)>(problem, out, logsumexp); });
}

void CpuKernels::attention_backward(const AttentionProblem& problem, const Tensor& out,
                                    const Tensor& logsumexp, const Tensor& grad_out,
                                    const Tensor& grad_q, const Tensor& grad_k,
                                    const Tensor& grad_v) {
  if (is_half(problem.q.dtype())) {
    const Tensor dq = f32_copy(*this, grad_q), dk = f32_copy(*this, grad_k), dv = f32_copy(*this, grad_v);
    backward<float>(f32_problem(*this, problem), f32_copy(*this, out), logsumexp,
                    f32_copy(*this, grad_out), dq, dk, dv);
    copy(dq, grad_q);
    copy(dk, grad_k);
    copy(dv, grad_v);
    return;
  }
  dispatch_floating(problem.q.dtype(), "attention_backward", [&](auto tag) {
    backward<decltype(tag)>(problem, out, logsumexp, grad_out, grad_q, grad_k, grad_v);
  });
}

}  // namespace tg::cpu
