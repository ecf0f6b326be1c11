// The attention tiles' three products (cpu/fast/attention_tiles.h) on AVX-512: the AVX2 file's
// register blocking with 16-float vectors, for a CPU with two 512-bit FMA units, where it does
// twice the multiply-adds a cycle; and the forward's online softmax step on 16 lanes. This file alone is compiled with -mavx512f, and
// cpu/fast/attention.cpp calls it only where tiles::avx512_enabled() (a CPU with AVX-512 F, and
// TAPEGRAD_ATTENTION_TILES not set to avx2).
//
// What differs from the AVX2 blocks: a block is up to 8 rows x 32 columns (two vectors), 16
// accumulators of the 32 registers; the lanes past column n are masked with a 16-bit mask, which
// loads and stores take directly (a masked load reads nothing past the mask: no fault at the end
// of an array). The exp2 and the stores compute what the AVX2 ones do, lane for lane: the results
// agree with the AVX2 products to rounding (the sums over p run in the same order; FMA contracts
// the same way), which tests/cpu/fast/test_attention_tiles.cpp checks.
//
// As in the AVX2 file, nothing here may be shared with the baseline code: <immintrin.h> and
// declarations only, and internal linkage for every helper.
#if defined(__x86_64__)
#include "tapegrad/cpu/fast/immintrin_avx512.h"  // <immintrin.h>, GCC bug 105593 silenced

#include "tapegrad/cpu/fast/attention_tiles.h"  // declarations only
#include "tapegrad/cpu/fast/online_softmax_step.h"  // a template of internal linkage

namespace tg::cpu::tiles {
namespace {

__mmask16 lanes_below(int64_t count) {  // count in 0..16
  return static_cast<__mmask16>((1u << count) - 1u);
}

// 2^x of sixteen floats: exp2_lanes of the AVX2 file (the same constants and steps) on 16 lanes.
__m512 exp2_lanes(__m512 x) {
  const __m512 clamped = _mm512_min_ps(_mm512_set1_ps(127.0f), _mm512_max_ps(_mm512_set1_ps(-127.0f), x));
  const __m512 round = _mm512_set1_ps(12583039.0f);  // 1.5 * 2^23 + 127
  const __m512 n_biased = _mm512_add_ps(clamped, round);
  const __m512 n = _mm512_sub_ps(n_biased, round);  // round(x)
  const __m512 f = _mm512_sub_ps(clamped, n);       // exact
  __m512 poly = _mm512_set1_ps(1.5353362e-4f);
  poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(1.3398875e-3f));
  poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(9.6184369e-3f));
  poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(5.5503324e-2f));
  poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(2.4022648e-1f));
  poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(6.9314718e-1f));
  poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(1.0f));
  const __m512 two_to_n = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_castps_si512(n_biased), 23));
  return _mm512_mul_ps(poly, two_to_n);
}

__m512 load(const float* at, __mmask16 lanes) { return _mm512_maskz_loadu_ps(lanes, at); }

// What a block stores at C(i, j .. j + 15) for its sum acc, as the AVX2 file's stores.
struct LinearStore {  // C = alpha A B + beta C
  float alpha, beta;
  __m512 operator()(int64_t, int64_t, __m512 acc, const float* out, __mmask16 lanes) const {
    const __m512 result = _mm512_mul_ps(_mm512_set1_ps(alpha), acc);
    if (beta == 0) return result;  // C is not read: it may hold anything, NaN included
    return _mm512_fmadd_ps(_mm512_set1_ps(beta), load(out, lanes), result);
  }
};
struct Exp2Store {  // C = 2^(alpha A B - shift[i])
  float alpha;
  const float* shift;
  __m512 operator()(int64_t i, int64_t, __m512 acc, const float*, __mmask16) const {
    return exp2_lanes(_mm512_fmsub_ps(_mm512_set1_ps(alpha), acc, _mm512_set1_ps(shift[i])));
  }
};
struct SoftmaxGradStore {  // C = P * (A B - dot[i])
  const float* probs;
  int64_t ld_probs;
  const float* dot;
  __m512 operator()(int64_t i, int64_t j, __m512 acc, const float*, __mmask16 lanes) const {
    const __m512 p = load(probs + i * ld_probs + j, lanes);
    return _mm512_mul_ps(p, _mm512_sub_ps(acc, _mm512_set1_ps(dot[i])));
  }
};

// One block of C: kRows rows x kVectors vectors of 16 columns at a, b and c (the block's first
// row and column, i0 and j0 of the product); the last vector covers the lanes of `last` (all 16
// but at the right edge of C). Unrolled, so that acc stays in registers.
template <int kRows, int kVectors, typename Store>
void block(int64_t k, const float* a, int64_t a_row, int64_t a_col, const float* b, int64_t ldb,
           float* c, int64_t ldc, __mmask16 last, int64_t i0, int64_t j0, const Store& store) {
  __m512 acc[kRows][kVectors];
#pragma GCC unroll 8
  for (int i = 0; i < kRows; ++i) {
#pragma GCC unroll 2
    for (int v = 0; v < kVectors; ++v) acc[i][v] = _mm512_setzero_ps();
  }
  for (int64_t p = 0; p < k; ++p) {
    const float* b_row = b + p * ldb;
    __m512 b_vec[kVectors];
#pragma GCC unroll 2
    for (int v = 0; v < kVectors; ++v) b_vec[v] = load(b_row + 16 * v, v == kVectors - 1 ? last : 0xFFFF);
#pragma GCC unroll 8
    for (int i = 0; i < kRows; ++i) {
      const __m512 a_ip = _mm512_set1_ps(a[i * a_row + p * a_col]);
#pragma GCC unroll 2
      for (int v = 0; v < kVectors; ++v) acc[i][v] = _mm512_fmadd_ps(a_ip, b_vec[v], acc[i][v]);
    }
  }
  const Store local = store;  // a copy the stores to C cannot alias: its fields stay in registers
#pragma GCC unroll 8
  for (int i = 0; i < kRows; ++i) {
#pragma GCC unroll 2
    for (int v = 0; v < kVectors; ++v) {
      const __mmask16 lanes = v == kVectors - 1 ? last : 0xFFFF;
      float* out = c + i * ldc + 16 * v;
      _mm512_mask_storeu_ps(out, lanes, local(i0 + i, j0 + 16 * v, acc[i][v], out, lanes));
    }
  }
}

// A row of blocks of kRows rows across the n columns: 32 at a time, then what is left (1..31).
template <int kRows, typename Store>
void block_row(int64_t n, int64_t k, const float* a, int64_t a_row, int64_t a_col, const float* b,
               int64_t ldb, float* c, int64_t ldc, int64_t i0, const Store& store) {
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) block<kRows, 2>(k, a, a_row, a_col, b + j, ldb, c + j, ldc, 0xFFFF, i0, j, store);
  const int64_t left = n - j;
  if (left > 16) {
    block<kRows, 2>(k, a, a_row, a_col, b + j, ldb, c + j, ldc, lanes_below(left - 16), i0, j, store);
  } else if (left > 0) {
    block<kRows, 1>(k, a, a_row, a_col, b + j, ldb, c + j, ldc, lanes_below(left), i0, j, store);
  }
}

// C (m x n) = store(A B): rows of 8-row blocks down C. As in the AVX2 file, a last block of one
// or two rows has too few accumulators for the FMA units' latency, so 8 + 1 and 8 + 2 rows run as
// 5 + 4 and 5 + 5.
template <typename Store>
void blocks(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_row, int64_t a_col,
            const float* b, int64_t ldb, float* c, int64_t ldc, const Store& store) {
  const int64_t left = m % 8 != 0 && m % 8 <= 2 && m > 8 ? m % 8 + 8 : m % 8;
  int64_t i = 0;
  for (; i < m - left; i += 8) block_row<8>(n, k, a + i * a_row, a_row, a_col, b, ldb, c + i * ldc, ldc, i, store);
  if (left > 8) {
    block_row<5>(n, k, a + i * a_row, a_row, a_col, b, ldb, c + i * ldc, ldc, i, store);
    i += 5;
  }
  const float* a_left = a + i * a_row;
  float* c_left = c + i * ldc;
  switch (m - i) {  // the last 1..7 rows
    case 7: block_row<7>(n, k, a_left, a_row, a_col, b, ldb, c_left, ldc, i, store); break;
    case 6: block_row<6>(n, k, a_left, a_row, a_col, b, ldb, c_left, ldc, i, store); break;
    case 5: block_row<5>(n, k, a_left, a_row, a_col, b, ldb, c_left, ldc, i, store); break;
    case 4: block_row<4>(n, k, a_left, a_row, a_col, b, ldb, c_left, ldc, i, store); break;
    case 3: block_row<3>(n, k, a_left, a_row, a_col, b, ldb, c_left, ldc, i, store); break;
    case 2: block_row<2>(n, k, a_left, a_row, a_col, b, ldb, c_left, ldc, i, store); break;
    case 1: block_row<1>(n, k, a_left, a_row, a_col, b, ldb, c_left, ldc, i, store); break;
    default: break;
  }
}

// The row passes of the forward's online softmax, as the AVX2 file's exp2_shifted and row_max on
// 16 lanes (the tail masked): the same exp2, lane for lane; the sum and max fold 16 lanes.
float exp2_shifted(float* row, int64_t cols, float shift) {
  const __m512 shift_vec = _mm512_set1_ps(shift);
  __m512 sum = _mm512_setzero_ps();
  int64_t c = 0;
  for (; c + 16 <= cols; c += 16) {
    const __m512 e = exp2_lanes(_mm512_sub_ps(_mm512_loadu_ps(row + c), shift_vec));
    _mm512_storeu_ps(row + c, e);
    sum = _mm512_add_ps(sum, e);
  }
  if (c < cols) {  // the tail, the lanes past it -inf (which gives 0) and never stored
    const __mmask16 lanes = lanes_below(cols - c);
    const __m512 x = _mm512_mask_loadu_ps(_mm512_set1_ps(-__builtin_inff()), lanes, row + c);
    const __m512 e = exp2_lanes(_mm512_sub_ps(x, shift_vec));
    _mm512_mask_storeu_ps(row + c, lanes, e);
    sum = _mm512_add_ps(sum, e);
  }
  return _mm512_reduce_add_ps(sum);
}

float row_max(const float* row, int64_t cols) {  // -inf when empty or all -inf; NaNs skipped
  __m512 best = _mm512_set1_ps(-__builtin_inff());
  int64_t c = 0;
  for (; c + 16 <= cols; c += 16) best = _mm512_max_ps(_mm512_loadu_ps(row + c), best);  // NaN: best
  if (c < cols) {
    const __mmask16 lanes = lanes_below(cols - c);
    best = _mm512_mask_max_ps(best, lanes, _mm512_maskz_loadu_ps(lanes, row + c), best);
  }
  return _mm512_reduce_max_ps(best);
}

}  // namespace

void online_softmax_avx512(float* scores, int64_t rows, int64_t cols, float* row_max_of_rows,
                           float* row_sum, float* correction) {
  const auto exp2_one = [](float x) { return _mm512_cvtss_f32(exp2_lanes(_mm512_set1_ps(x))); };
  online_softmax_step(scores, rows, cols, row_max_of_rows, row_sum, correction, row_max,
                      exp2_shifted, exp2_one);
}

void gemm_avx512(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_row,
                 int64_t a_col, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  blocks(m, n, k, a, a_row, a_col, b, ldb, c, ldc, LinearStore{alpha, beta});
}

void exp2_gemm_avx512(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_row,
                      int64_t a_col, const float* b, int64_t ldb, const float* shift, float* c,
                      int64_t ldc) {
  blocks(m, n, k, a, a_row, a_col, b, ldb, c, ldc, Exp2Store{alpha, shift});
}

void softmax_grad_gemm_avx512(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_row,
                              int64_t a_col, const float* b, int64_t ldb, const float* probs,
                              int64_t ld_probs, const float* dot, float* c, int64_t ldc) {
  blocks(m, n, k, a, a_row, a_col, b, ldb, c, ldc, SoftmaxGradStore{probs, ld_probs, dot});
}

}  // namespace tg::cpu::tiles

#else  // not x86-64: never called (tiles::avx512_enabled() is false), defined for the linker
#include "tapegrad/autograd/error.h"
#include "tapegrad/cpu/fast/attention_tiles.h"

namespace tg::cpu::tiles {
void gemm_avx512(int64_t, int64_t, int64_t, float, const float*, int64_t, int64_t, const float*,
                 int64_t, float, float*, int64_t) { fail("gemm_avx512: not an x86-64 build"); }
void exp2_gemm_avx512(int64_t, int64_t, int64_t, float, const float*, int64_t, int64_t, const float*,
                      int64_t, const float*, float*, int64_t) { fail("exp2_gemm_avx512: not an x86-64 build"); }
void softmax_grad_gemm_avx512(int64_t, int64_t, int64_t, const float*, int64_t, int64_t, const float*,
                              int64_t, const float*, int64_t, const float*, float*, int64_t) {
  fail("softmax_grad_gemm_avx512: not an x86-64 build");
}
void online_softmax_avx512(float*, int64_t, int64_t, float*, float*, float*) {
  fail("online_softmax_avx512: not an x86-64 build");
}
}  // namespace tg::cpu::tiles
#endif
