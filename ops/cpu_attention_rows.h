#pragma once
// The softmax row passes of the fused attention kernel (ops/cpu_attention.cpp) over a tile of
// scores, rows `ld` apart: the forward's online-softmax step and the backward's P = 2^(S - lse)
// and dS = P * (dP - D). Scores and log-sum-exps are in base-2 units here (the kernel multiplies
// Q K^T by scale log2(e)), so that every exponential is an exp2. Each pass is a plain loop over
// ops/cpu_simd.h's row helpers (SSE2 lanes in f32, std::exp2 in f64), and f32 on a CPU with
// AVX2 takes the tile version of ops/cpu_attention_tiles.h instead, which
// tests/ops/test_cpu_attention_tiles.cpp checks against double.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "tapegrad/ops/cpu_attention_tiles.h"
#include "tapegrad/ops/cpu_features.h"
#include "tapegrad/ops/cpu_simd.h"

namespace tg::cpu::attention {

// One step of the online softmax, a row at a time: with m the row's running max and
// m' = max(m, the row's max), the row becomes 2^(s - m'), its sum l becomes
// l 2^(m - m') + the row's new sum, and correction[r] = 2^(m - m') is what the caller rescales
// the row's accumulator by. A row with nothing visible yet (m' = -inf) becomes 0 and keeps m and l.
// The correction is 1 there, and also on a row's first visible tile (m = -inf): until then its l
// and accumulator are sums of zero probabilities, 0 (or NaN from 0 * NaN in V), which
// 2^-inf = 0 would leave as they are. The AVX2 version takes all the rows' maxima first.
template <typename T>
void online_softmax(T* scores, int64_t rows, int64_t cols, T* row_max, T* row_sum, T* correction) {
  if constexpr (std::is_same_v<T, float>) {
    if (fast_paths_enabled()) {
      return tiles::online_softmax_avx2(scores, rows, cols, row_max, row_sum, correction);
    }
  }
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  for (int64_t r = 0; r < rows; ++r) {
    T* s = scores + r * cols;
    const T new_max = std::max(row_max[r], simd::row_max_of(s, cols));
    correction[r] = T(1);
    if (new_max == kNegInf) {  // nothing visible in this row yet
      std::fill(s, s + cols, T(0));
      continue;
    }
    // 1 when the max stays, or on the first visible tile (above)
    if (new_max != row_max[r] && row_max[r] != kNegInf) correction[r] = std::exp2(row_max[r] - new_max);
    row_sum[r] = row_sum[r] * correction[r] + simd::exp2_shifted_row(s, cols, new_max);
    row_max[r] = new_max;
  }
}

// P = 2^(S - lse) in every row whose lse is finite (the others, fully masked, are zero already).
template <typename T>
void probabilities(T* scores, int64_t rows, int64_t cols, int64_t ld, const T* lse) {
  if constexpr (std::is_same_v<T, float>) {
    if (fast_paths_enabled()) return tiles::exp2_rows_avx2(scores, rows, cols, ld, lse);
  }
  for (int64_t r = 0; r < rows; ++r) {
    if (lse[r] == -std::numeric_limits<T>::infinity()) continue;
    simd::exp2_shifted_row(scores + r * ld, cols, lse[r]);
  }
}

// dS = P * (dP - D) in place of dP, D a row's dO . O.
template <typename T>
void softmax_backward(T* d_probs, const T* probs, int64_t rows, int64_t cols, int64_t ld, const T* dot) {
  if constexpr (std::is_same_v<T, float>) {
    if (fast_paths_enabled()) {
      return tiles::softmax_backward_rows_avx2(d_probs, probs, rows, cols, ld, dot);
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    T* d = d_probs + r * ld;
    const T* p = probs + r * ld;
    for (int64_t c = 0; c < cols; ++c) d[c] = p[c] * (d[c] - dot[r]);
  }
}

}  // namespace tg::cpu::attention
