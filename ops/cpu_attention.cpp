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
#include <limits>
#include <omp.h>
#include <vector>

#include "autograd/rng.h"
#include "autograd/threads.h"
#include "ops/cpu_kernels.h"

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

// What one batch item needs: sizes, masks and dropout, shared by forward and backward.
struct Item {
  const AttentionProblem& p;
  int64_t n, sq, sk;
  const bool* mask;

  bool allowed(int64_t i, int64_t j) const {
    if (p.causal && j > i) return false;
    if (mask && !mask[p.mask_offsets[n] + i * p.mask_row_stride + j * p.mask_col_stride]) return false;
    return true;
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
        T block_max = kNegInf;
        for (int64_t c = 0; c < cols; ++c) {
          if (!item.allowed(i0 + r, j0 + c)) s[c] = kNegInf;
          block_max = std::max(block_max, s[c]);
        }
        const T new_max = std::max(row_max[r], block_max);
        if (new_max == kNegInf) {  // nothing visible in this row yet
          std::fill(s, s + cols, T(0));
          continue;
        }
        const T correction = std::exp(row_max[r] - new_max);  // exp(-inf) = 0 on the first tile
        row_sum[r] *= correction;
        for (int64_t c = 0; c < dv; ++c) acc[r * dv + c] *= correction;
        for (int64_t c = 0; c < cols; ++c) {
          s[c] = std::exp(s[c] - new_max);
          row_sum[r] += s[c];
        }
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
          if (p.dropout_p > 0) item.keep_row(i0 + r, j0, cols, keep.data() + r * cols);
          for (int64_t c = 0; c < cols; ++c) {
            T& prob = probs[r * cols + c];
            const bool visible = lse[i0 + r] != kNegInf && item.allowed(i0 + r, j0 + c);
            prob = visible ? std::exp(prob - lse[i0 + r]) : T(0);
            dropped[r * cols + c] = p.dropout_p > 0 ? prob * keep[r * cols + c] : prob;
          }
        }
        // dV_j += P~^T dO_i ; dP~ = dO_i V_j^T
        gemm(true, false, cols, dv, rows, T(1), dropped.data(), cols, d_out + i0 * dv, dv, T(1), d_v + j0 * dv, dv);
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

void CpuKernels::attention_forward(const AttentionProblem& problem, const Tensor& out,
                                   const Tensor& logsumexp) {
  dispatch_floating(problem.q.dtype(), "attention_forward",
                    [&](auto tag) { forward<decltype(tag)>(problem, out, logsumexp); });
}

void CpuKernels::attention_backward(const AttentionProblem& problem, const Tensor& out,
                                    const Tensor& logsumexp, const Tensor& grad_out,
                                    const Tensor& grad_q, const Tensor& grad_k,
                                    const Tensor& grad_v) {
  dispatch_floating(problem.q.dtype(), "attention_backward", [&](auto tag) {
    backward<decltype(tag)>(problem, out, logsumexp, grad_out, grad_q, grad_k, grad_v);
  });
}

}  // namespace tg::cpu
