// The f32 tile kernels of attention (cpu/fast/attention_tiles.h) in AVX2 with FMA: the small
// products, and exp2 / max over a row of scores. This file alone is compiled with -mavx2 -mfma
// (CMakeLists.txt), and cpu/fast/attention.cpp calls it only where cpu::fast_paths_enabled().
//
// Products: C is cut into blocks of up to 6 rows x 16 columns (two 8-float vectors), each one held
// in up to 12 registers across the whole sum over p (with B's two vectors and the broadcast, 15 of
// the 16): per p, one or two vectors of B's row p are loaded, each of the block's A(i, p) is
// broadcast, and one FMA per (row, vector) adds the product. What is stored is a Store's: alpha A B
// + beta C, or the backward's 2^(S - lse) or P (dP - D), applied once, when the block is stored.
// The last vector of a row of blocks may stick out past column n: it is loaded and stored with a
// lane mask, so nothing outside A, B or C is touched. Their transposed B operands are copied in
// 8 x 8 blocks, transposed in registers. The row exp2 is cpu/fast/simd.h's on eight lanes.
//
// Nothing here may be shared with the baseline code: an inline function or template instantiated
// in this file (std::min, say) would be compiled with AVX2, and the linker could keep that copy
// for the whole program. So this file includes only <immintrin.h> (whose functions are always
// inlined) and declarations, and its helpers have internal linkage.
#if defined(__x86_64__)
#include <immintrin.h>

#include "tapegrad/cpu/fast/attention_tiles.h"  // declarations only
#include "tapegrad/cpu/fast/online_softmax_step.h"  // a template of internal linkage

namespace tg::cpu::tiles {
namespace {

// All bits set in the lanes below `count` (0..8), as maskload / maskstore want.
__m256i lanes_below(int64_t count) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)), lane);
}

// 2^x of eight floats: cpu/fast/simd.h's exp2_lanes (the same reduction, polynomial, rounding
// trick and clamping, so the same accuracy and edge cases: within 1.2e-7 relative over [-126, 127],
// exactly 0 below -126.5, NaN kept), with FMA and eight lanes: 12 instructions.
__m256 exp2_lanes(__m256 x) {
  // max / min return their second operand when either is NaN: x, so a NaN stays one
  const __m256 clamped = _mm256_min_ps(_mm256_set1_ps(127.0f), _mm256_max_ps(_mm256_set1_ps(-127.0f), x));
  const __m256 round = _mm256_set1_ps(12583039.0f);  // 1.5 * 2^23 + 127
  const __m256 n_biased = _mm256_add_ps(clamped, round);
  const __m256 n = _mm256_sub_ps(n_biased, round);  // round(x)
  const __m256 f = _mm256_sub_ps(clamped, n);       // exact
  __m256 poly = _mm256_set1_ps(1.5353362e-4f);
  poly = _mm256_fmadd_ps(poly, f, _mm256_set1_ps(1.3398875e-3f));
  poly = _mm256_fmadd_ps(poly, f, _mm256_set1_ps(9.6184369e-3f));
  poly = _mm256_fmadd_ps(poly, f, _mm256_set1_ps(5.5503324e-2f));
  poly = _mm256_fmadd_ps(poly, f, _mm256_set1_ps(2.4022648e-1f));
  poly = _mm256_fmadd_ps(poly, f, _mm256_set1_ps(6.9314718e-1f));
  poly = _mm256_fmadd_ps(poly, f, _mm256_set1_ps(1.0f));
  const __m256 two_to_n = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(n_biased), 23));
  return _mm256_mul_ps(poly, two_to_n);
}

// Eight floats at `at`, or only the lanes of `lanes` (the others 0) where `masked`.
__m256 load(const float* at, bool masked, __m256i lanes) {
  return masked ? _mm256_maskload_ps(at, lanes) : _mm256_loadu_ps(at);
}

// What a block stores at C(i, j .. j + 7), at `out`, for its sum acc = (A B)(i, j .. j + 7); i and
// j count from the product's first row and column, so that a store can read its row's entries of
// other arrays. Lanes past `lanes` (where `masked`) are never stored, and are not read.
struct LinearStore {  // C = alpha A B + beta C
  float alpha, beta;
  __m256 operator()(int64_t, int64_t, __m256 acc, const float* out, bool masked, __m256i lanes) const {
    const __m256 result = _mm256_mul_ps(_mm256_set1_ps(alpha), acc);
    if (beta == 0) return result;  // C is not read: it may hold anything, NaN included
    return _mm256_fmadd_ps(_mm256_set1_ps(beta), load(out, masked, lanes), result);
  }
};
struct Exp2Store {  // C = 2^(alpha A B - shift[i])
  float alpha;
  const float* shift;
  __m256 operator()(int64_t i, int64_t, __m256 acc, const float*, bool, __m256i) const {
    return exp2_lanes(_mm256_fmsub_ps(_mm256_set1_ps(alpha), acc, _mm256_set1_ps(shift[i])));
  }
};
struct SoftmaxGradStore {  // C = P * (A B - dot[i])
  const float* probs;
  int64_t ld_probs;
  const float* dot;
  __m256 operator()(int64_t i, int64_t j, __m256 acc, const float*, bool masked, __m256i lanes) const {
    const __m256 p = load(probs + i * ld_probs + j, masked, lanes);
    return _mm256_mul_ps(p, _mm256_sub_ps(acc, _mm256_set1_ps(dot[i])));
  }
};

// One block of C: kRows rows x kVectors vectors of 8 columns, at a, b and c (moved to the block's
// first row and column, i0 and j0 of the product, which the store is told); with kPartial, the
// last vector covers only the lanes of `last`. The loops over rows and vectors are unrolled (the
// pragmas), so that acc lives in registers: indexed at run time, it would be stored to the stack on
// every p.
template <int kRows, int kVectors, bool kPartial, typename Store>
void block(int64_t k, const float* a, int64_t a_row, int64_t a_col, const float* b, int64_t ldb,
           float* c, int64_t ldc, __m256i last, int64_t i0, int64_t j0, const Store& store) {
  __m256 acc[kRows][kVectors];
#pragma GCC unroll 6
  for (int i = 0; i < kRows; ++i) {
#pragma GCC unroll 2
    for (int v = 0; v < kVectors; ++v) acc[i][v] = _mm256_setzero_ps();
  }
  for (int64_t p = 0; p < k; ++p) {
    const float* b_row = b + p * ldb;
    __m256 b_vec[kVectors];
#pragma GCC unroll 2
    for (int v = 0; v < kVectors; ++v) b_vec[v] = load(b_row + 8 * v, kPartial && v == kVectors - 1, last);
#pragma GCC unroll 6
    for (int i = 0; i < kRows; ++i) {
      const __m256 a_ip = _mm256_broadcast_ss(a + i * a_row + p * a_col);
#pragma GCC unroll 2
      for (int v = 0; v < kVectors; ++v) acc[i][v] = _mm256_fmadd_ps(a_ip, b_vec[v], acc[i][v]);
    }
  }
  const Store local = store;  // a copy the stores to C cannot alias: its fields stay in registers
#pragma GCC unroll 6
  for (int i = 0; i < kRows; ++i) {
#pragma GCC unroll 2
    for (int v = 0; v < kVectors; ++v) {
      const bool masked = kPartial && v == kVectors - 1;
      float* out = c + i * ldc + 8 * v;
      const __m256 result = local(i0 + i, j0 + 8 * v, acc[i][v], out, masked, last);
      if (masked) _mm256_maskstore_ps(out, last, result);
      else _mm256_storeu_ps(out, result);
    }
  }
}

// A row of blocks of kRows rows (row i0 of the product on, at a and c) across the n columns: 16 at
// a time, then what is left (1..15).
template <int kRows, typename Store>
void block_row(int64_t n, int64_t k, const float* a, int64_t a_row, int64_t a_col, const float* b,
               int64_t ldb, float* c, int64_t ldc, int64_t i0, const Store& store) {
  int64_t j = 0;
  const __m256i all = _mm256_set1_epi32(-1);
  for (; j + 16 <= n; j += 16) {
    block<kRows, 2, false>(k, a, a_row, a_col, b + j, ldb, c + j, ldc, all, i0, j, store);
  }
  const int64_t left = n - j;
  if (left > 8) {
    block<kRows, 2, true>(k, a, a_row, a_col, b + j, ldb, c + j, ldc, lanes_below(left - 8), i0, j, store);
  } else if (left == 8) {
    block<kRows, 1, false>(k, a, a_row, a_col, b + j, ldb, c + j, ldc, all, i0, j, store);
  } else if (left > 0) {
    block<kRows, 1, true>(k, a, a_row, a_col, b + j, ldb, c + j, ldc, lanes_below(left), i0, j, store);
  }
}

// C (m x n) = store(A B): rows of blocks down C. Six rows a block: 12 FMAs for 8 loads, against 8
// for 6 with four rows; 8-14% faster on the attention tiles' shapes (64 x 128 x 32, 128 x 32 x 64,
// 64 x 64 x 16: docs/design-notes.md). A block of one or two rows has too few accumulators to
// keep both FMA units busy (each FMA waits four cycles for its accumulator), so 6 + 1 and 6 + 2
// rows run as 4 + 3 and 4 + 4.
template <typename Store>
void blocks(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_row, int64_t a_col,
            const float* b, int64_t ldb, float* c, int64_t ldc, const Store& store) {
  const int64_t left = m % 6 != 0 && m % 6 <= 2 && m > 6 ? m % 6 + 6 : m % 6;
  int64_t i = 0;
  for (; i < m - left; i += 6) block_row<6>(n, k, a + i * a_row, a_row, a_col, b, ldb, c + i * ldc, ldc, i, store);
  if (left > 6) {
    block_row<4>(n, k, a + i * a_row, a_row, a_col, b, ldb, c + i * ldc, ldc, i, store);
    i += 4;
  }
  const float* a_left = a + i * a_row;
  float* c_left = c + i * ldc;
  switch (m - i) {  // the last 1..5 rows
    case 5: block_row<5>(n, k, a_left, a_row, a_col, b, ldb, c_left, ldc, i, store); break;
    case 4: block_row<4>(n, k, a_left, a_row, a_col, b, ldb, c_left, ldc, i, store); break;
    case 3: block_row<3>(n, k, a_left, a_row, a_col, b, ldb, c_left, ldc, i, store); break;
    case 2: block_row<2>(n, k, a_left, a_row, a_col, b, ldb, c_left, ldc, i, store); break;
    case 1: block_row<1>(n, k, a_left, a_row, a_col, b, ldb, c_left, ldc, i, store); break;
    default: break;
  }
}

// The last `count` (0..7) floats of a row, the lanes past it set to `fill`.
__m256 load_tail(const float* row, int64_t count, float fill) {
  const __m256i inside = lanes_below(count);
  return _mm256_blendv_ps(_mm256_set1_ps(fill), _mm256_maskload_ps(row, inside),
                          _mm256_castsi256_ps(inside));
}

float sum_of_lanes(__m256 x) {
  const __m128 half = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  const __m128 pairs = _mm_add_ps(half, _mm_movehl_ps(half, half));
  return _mm_cvtss_f32(_mm_add_ss(pairs, _mm_shuffle_ps(pairs, pairs, 1)));
}

float max_of_lanes(__m256 x) {
  const __m128 half = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  const __m128 pairs = _mm_max_ps(half, _mm_movehl_ps(half, half));
  return _mm_cvtss_f32(_mm_max_ss(pairs, _mm_shuffle_ps(pairs, pairs, 1)));
}

// Transposes the 8 x 8 block at in (leading dimension ld_in) into out (ld_out): the classic
// unpack / shuffle / lane-permute network.
void transpose_8x8(const float* in, int64_t ld_in, float* out, int64_t ld_out) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(in + i * ld_in);
  for (int i = 0; i < 8; i += 2) {  // interleave row pairs: (r0 r1) -> a0 b0 a1 b1 | a4 b4 a5 b5, ...
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {  // then pairs of pairs: four rows' column c in one 128-bit half
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {  // and the halves of rows 0-3 with those of rows 4-7
    _mm256_storeu_ps(out + i * ld_out, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
    _mm256_storeu_ps(out + (i + 4) * ld_out, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
  }
}

// row[c] = 2^(row[c] - shift) for c < cols; returns the sum of the new row.
float exp2_shifted(float* row, int64_t cols, float shift) {
  const __m256 shift_vec = _mm256_set1_ps(shift);
  __m256 sum = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 8 <= cols; c += 8) {
    const __m256 e = exp2_lanes(_mm256_sub_ps(_mm256_loadu_ps(row + c), shift_vec));
    _mm256_storeu_ps(row + c, e);
    sum = _mm256_add_ps(sum, e);
  }
  if (c < cols) {  // the tail, padded with -inf (which gives 0)
    const __m256 x = load_tail(row + c, cols - c, -__builtin_inff());
    const __m256 e = exp2_lanes(_mm256_sub_ps(x, shift_vec));
    _mm256_maskstore_ps(row + c, lanes_below(cols - c), e);
    sum = _mm256_add_ps(sum, e);
  }
  return sum_of_lanes(sum);
}

// The largest entry of a row: -inf when empty or all -inf; NaNs skipped.
float row_max(const float* row, int64_t cols) {
  __m256 best = _mm256_set1_ps(-__builtin_inff());
  int64_t c = 0;
  for (; c + 8 <= cols; c += 8) best = _mm256_max_ps(_mm256_loadu_ps(row + c), best);  // NaN: best
  if (c < cols) best = _mm256_max_ps(load_tail(row + c, cols - c, -__builtin_inff()), best);
  return max_of_lanes(best);
}

// a . key over k entries, as eight lane sums (a's and key's chunks of eight multiplied and added
// lane by lane; a chunk past k masked).
__m256 dot_lanes(const float* a, const float* key, int64_t k, __m256i tail) {
  __m256 acc = _mm256_setzero_ps();
  int64_t p = 0;
  for (; p + 8 <= k; p += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + p), _mm256_loadu_ps(key + p), acc);
  if (p < k) acc = _mm256_fmadd_ps(_mm256_maskload_ps(a + p, tail), _mm256_maskload_ps(key + p, tail), acc);
  return acc;
}

// dot_lanes for eight keys at once, ld apart: eight independent chains of FMAs (one key's chain
// alone would wait on each FMA's latency), a's chunk loaded once for the eight.
void dot_lanes_of_eight(const float* a, const float* keys, int64_t ld, int64_t k, __m256i tail,
                        __m256 sums[8]) {
  for (int key = 0; key < 8; ++key) sums[key] = _mm256_setzero_ps();
  int64_t p = 0;
  for (; p + 8 <= k; p += 8) {
    const __m256 chunk = _mm256_loadu_ps(a + p);
    for (int key = 0; key < 8; ++key) {
      sums[key] = _mm256_fmadd_ps(chunk, _mm256_loadu_ps(keys + key * ld + p), sums[key]);
    }
  }
  if (p < k) {
    const __m256 chunk = _mm256_maskload_ps(a + p, tail);
    for (int key = 0; key < 8; ++key) {
      sums[key] = _mm256_fmadd_ps(chunk, _mm256_maskload_ps(keys + key * ld + p, tail), sums[key]);
    }
  }
}

// The lane sums of eight vectors, as one vector: lane j holds the sum of sums[j]'s lanes (a tree
// of horizontal adds, then the two 128-bit halves added).
__m256 sums_of_eight(const __m256 sums[8]) {
  const __m256 first = _mm256_hadd_ps(_mm256_hadd_ps(sums[0], sums[1]), _mm256_hadd_ps(sums[2], sums[3]));
  const __m256 second = _mm256_hadd_ps(_mm256_hadd_ps(sums[4], sums[5]), _mm256_hadd_ps(sums[6], sums[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(first, second, 0x20),
                       _mm256_permute2f128_ps(first, second, 0x31));
}

}  // namespace

void transpose_avx2(int64_t rows, int64_t cols, const float* in, int64_t ld_in, float* out,
                    int64_t ld_out) {
  const int64_t full_rows = rows / 8 * 8, full_cols = cols / 8 * 8;
  for (int64_t r = 0; r < full_rows; r += 8) {
    for (int64_t c = 0; c < full_cols; c += 8) {
      transpose_8x8(in + r * ld_in + c, ld_in, out + c * ld_out + r, ld_out);
    }
  }
  for (int64_t r = 0; r < rows; ++r) {  // what the 8 x 8 blocks left: the last columns, the last rows
    for (int64_t c = r < full_rows ? full_cols : 0; c < cols; ++c) out[c * ld_out + r] = in[r * ld_in + c];
  }
}

float exp2_shifted_row_avx2(float* row, int64_t cols, float shift) {
  return exp2_shifted(row, cols, shift);
}

float row_max_avx2(const float* row, int64_t cols) { return row_max(row, cols); }

void online_softmax_avx2(float* scores, int64_t rows, int64_t cols, float* row_max_of_rows,
                         float* row_sum, float* correction) {
  const auto exp2_one = [](float x) {
    return _mm_cvtss_f32(_mm256_castps256_ps128(exp2_lanes(_mm256_set1_ps(x))));
  };
  online_softmax_step(scores, rows, cols, row_max_of_rows, row_sum, correction, row_max,
                      exp2_shifted, exp2_one);
}

void exp2_rows_avx2(float* scores, int64_t rows, int64_t cols, int64_t ld, const float* lse) {
  for (int64_t r = 0; r < rows; ++r) {
    if (lse[r] != -__builtin_inff()) exp2_shifted(scores + r * ld, cols, lse[r]);
  }
}

void softmax_backward_rows_avx2(float* d_probs, const float* probs, int64_t rows, int64_t cols,
                                int64_t ld, const float* dot) {
  for (int64_t r = 0; r < rows; ++r) {
    float* d = d_probs + r * ld;
    const float* p = probs + r * ld;
    const __m256 dot_r = _mm256_set1_ps(dot[r]);
    int64_t c = 0;
    for (; c + 8 <= cols; c += 8) {
      const __m256 grad = _mm256_sub_ps(_mm256_loadu_ps(d + c), dot_r);
      _mm256_storeu_ps(d + c, _mm256_mul_ps(_mm256_loadu_ps(p + c), grad));
    }
    for (; c < cols; ++c) d[c] = p[c] * (d[c] - dot[r]);
  }
}

void key_dots_avx2(int64_t m, int64_t cols, int64_t k, float alpha, const float* a, int64_t lda,
                   const float* keys, int64_t ld_keys, float* c, int64_t ldc) {
  const __m256i tail = lanes_below(k % 8);
  const __m256 scale = _mm256_set1_ps(alpha);
  for (int64_t r = 0; r < m; ++r) {
    const float* query = a + r * lda;
    float* out = c + r * ldc;
    int64_t j = 0;
    for (; j + 8 <= cols; j += 8) {  // eight keys: their lane sums, added up in one vector
      __m256 sums[8];
      dot_lanes_of_eight(query, keys + j * ld_keys, ld_keys, k, tail, sums);
      _mm256_storeu_ps(out + j, _mm256_mul_ps(scale, sums_of_eight(sums)));
    }
    for (; j < cols; ++j) out[j] = alpha * sum_of_lanes(dot_lanes(query, keys + j * ld_keys, k, tail));
  }
}

void gemm_avx2(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_row,
               int64_t a_col, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  blocks(m, n, k, a, a_row, a_col, b, ldb, c, ldc, LinearStore{alpha, beta});
}

void exp2_gemm_avx2(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_row,
                    int64_t a_col, const float* b, int64_t ldb, const float* shift, float* c,
                    int64_t ldc) {
  blocks(m, n, k, a, a_row, a_col, b, ldb, c, ldc, Exp2Store{alpha, shift});
}

void softmax_grad_gemm_avx2(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_row,
                            int64_t a_col, const float* b, int64_t ldb, const float* probs,
                            int64_t ld_probs, const float* dot, float* c, int64_t ldc) {
  blocks(m, n, k, a, a_row, a_col, b, ldb, c, ldc, SoftmaxGradStore{probs, ld_probs, dot});
}

}  // namespace tg::cpu::tiles

#else  // not x86-64: never called (cpu::fast_paths_enabled() is false), defined for the linker
#include "tapegrad/autograd/error.h"
#include "tapegrad/cpu/fast/attention_tiles.h"

namespace tg::cpu::tiles {
void gemm_avx2(int64_t, int64_t, int64_t, float, const float*, int64_t, int64_t, const float*,
               int64_t, float, float*, int64_t) { fail("gemm_avx2: not an x86-64 build"); }
void exp2_gemm_avx2(int64_t, int64_t, int64_t, float, const float*, int64_t, int64_t, const float*,
                    int64_t, const float*, float*, int64_t) { fail("exp2_gemm_avx2: not an x86-64 build"); }
void softmax_grad_gemm_avx2(int64_t, int64_t, int64_t, const float*, int64_t, int64_t, const float*,
                            int64_t, const float*, int64_t, const float*, float*, int64_t) {
  fail("softmax_grad_gemm_avx2: not an x86-64 build");
}
void transpose_avx2(int64_t, int64_t, const float*, int64_t, float*, int64_t) {
  fail("transpose_avx2: not an x86-64 build");
}
void key_dots_avx2(int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t,
                   float*, int64_t) {
  fail("key_dots_avx2: not an x86-64 build");
}
float exp2_shifted_row_avx2(float*, int64_t, float) { fail("exp2_shifted_row_avx2: not an x86-64 build"); }
float row_max_avx2(const float*, int64_t) { fail("row_max_avx2: not an x86-64 build"); }
void online_softmax_avx2(float*, int64_t, int64_t, float*, float*, float*) {
  fail("online_softmax_avx2: not an x86-64 build");
}
void exp2_rows_avx2(float*, int64_t, int64_t, int64_t, const float*) {
  fail("exp2_rows_avx2: not an x86-64 build");
}
void softmax_backward_rows_avx2(float*, const float*, int64_t, int64_t, int64_t, const float*) {
  fail("softmax_backward_rows_avx2: not an x86-64 build");
}
}  // namespace tg::cpu::tiles
#endif
