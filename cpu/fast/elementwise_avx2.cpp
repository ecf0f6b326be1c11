// Elementwise f32 fast paths, eight lanes at a time (AVX2 + FMA), taken when fast_paths_enabled()
// (cpu/features.h): exp (CpuKernels::unary's UnaryOp::exp, and the exponentials of softmax_dim's
// rows in cpu/reduce.cpp), and the exact GELU, x Phi(x), with its derivative Phi(x) + x phi(x)
// (UnaryOp::gelu and gelu_grad). The plain loops call std::exp or std::erf per element, 5 to 9 ns
// each; these run at a few cycles an element.
//
// exp is Cephes' expf: x = n ln 2 + r with ln 2 split in two (Cody-Waite), a degree-7 polynomial
// for e^r, and 2^n built in the exponent bits (as 2^(n-1) * 2 when n = 128, so that the whole
// float range is reached): within 2 ulp (3e-7 relative, tests/cpu/fast/test_elementwise_avx2.cpp).
// Edges: x above 88.7228 (log of the largest float) and +inf give +inf, NaN stays NaN, and
// x below -87.3 (results under 2^-126, where floats turn subnormal) gives 0, -inf included.
//
// The math. With z = |x| / sqrt(2), Phi(x) = erfc(z) / 2 for x < 0 and 1 - erfc(z) / 2 for x >= 0.
// erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z / 2), with P the degree-9 polynomial of Numerical
// Recipes' erfcc (Chebyshev fit): within 1.2e-7 relative of erfc for every z >= 0 (so Phi keeps
// its relative accuracy in the left tail, where 1 + erf(x / sqrt(2)) in f32 cancels to nothing).
// z^2 = x^2 / 2 is carried as two floats, hi + lo (x x and its FMA rounding error, halved), so
// that exp(-z^2), which is also phi's, is accurate in the tails. The forward takes one exp of the
// whole exponent -hi + (P - lo): its Cody-Waite reduction takes -hi alone first, exactly (see
// exp_of_sum), so nothing of hi's 24 bits is lost to the rounding of the sum. The derivative takes
// exp(-hi - lo) the same way, for phi and Phi both, and exp(P) apart. Overall within 1e-6 relative
// of the double-precision GELU (gelu' within 1e-6 of |Phi| + |x phi|). NaN stays NaN;
// gelu(+inf) = +inf, gelu(-inf) = NaN and gelu_grad(+-inf) = NaN (inf * 0), as the plain loop
// gives. The backward's g gelu'(x) is one pass (CpuKernels::gelu_backward).
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>

namespace tg::cpu {
namespace {

// e^r for |r| <= ln 2 / 2 (and a little past): Cephes expf's degree-7 polynomial.
__attribute__((target("avx2,fma"))) inline __m256 exp_reduced(__m256 r) {
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
  return _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
}

// 2^n for integral n in -126..127 (floats), built in the exponent bits.
__attribute__((target("avx2,fma"))) inline __m256 two_to_the(__m256 n) {
  const __m256i biased = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
  return _mm256_castsi256_ps(_mm256_slli_epi32(biased, 23));
}

// exp(x) of eight floats (Cephes expf; the edges above).
__attribute__((target("avx2,fma"))) inline __m256 exp_lanes(__m256 x) {
  const __m256 underflow = _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_LT_OQ);
  const __m256 overflow = _mm256_cmp_ps(x, _mm256_set1_ps(88.72284f), _CMP_GT_OQ);
  const __m256 not_a_number = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  const __m256 input = x;
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.72284f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);  // x - n ln2, in two parts
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 y = exp_reduced(r);
  // 2^n as 2^min(n, 127), times 2 where n = 128 (x within ln 2 / 2 of the largest float)
  const __m256 top = _mm256_cmp_ps(n, _mm256_set1_ps(127.0f), _CMP_GT_OQ);
  y = _mm256_mul_ps(_mm256_mul_ps(y, two_to_the(_mm256_min_ps(n, _mm256_set1_ps(127.0f)))),
                    _mm256_blendv_ps(_mm256_set1_ps(1.0f), _mm256_set1_ps(2.0f), top));
  y = _mm256_blendv_ps(_mm256_andnot_ps(underflow, y),
                       _mm256_set1_ps(__builtin_inff()), overflow);
  return _mm256_blendv_ps(y, input, not_a_number);
}

// e^x for |x| < 2 (GELU's P, in [-1.27, 0]; NaN where x is, which stays NaN), so that there is no
// edge to look for.
__attribute__((target("avx2,fma"))) inline __m256 exp_small(__m256 x) {
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);  // x - n ln2, in two parts
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  return _mm256_mul_ps(exp_reduced(r), two_to_the(n));
}

// exp(big + small) for a float `big` <= 0 of any size and |small| < 1.5 (GELU's P - lo and -lo;
// P is in [-1.27, 0]), without rounding their sum: n comes from the rounded sum, but the reduction
// takes big alone first. big - n ln2_hi is exact: both are multiples of ulp(big) (n ln2_hi is one
// of 2^-9, ln2_hi having 9 significant bits, and ulp(big) <= 2^-9 below 2^15), and the difference,
// about r - small, is under 2^24 of them (for |big| < 1, where it may not be, its rounding is below
// 2^-24 absolute). small is added after, where the two cancel down to r. The edge is exp_lanes'
// low one, 0 below -87.3, so that n >= -126 and 2^n is built in the exponent bits (n <= 0 here:
// the top of the range is not looked for); a NaN sum is not below, and clamps to -87.3 (max
// returns its second operand): r is NaN, and so the result.
__attribute__((target("avx2,fma"))) inline __m256 exp_of_sum(__m256 big, __m256 small) {
  const __m256 floor = _mm256_set1_ps(-87.3f);
  const __m256 sum = _mm256_add_ps(big, small);  // for n and the edge only
  const __m256 underflow = _mm256_cmp_ps(sum, floor, _CMP_LT_OQ);
  const __m256 log2e = _mm256_set1_ps(1.44269504f);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(_mm256_max_ps(sum, floor), log2e),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), big);  // big - n ln2_hi, exact
  r = _mm256_add_ps(r, small);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  return _mm256_andnot_ps(underflow, _mm256_mul_ps(exp_reduced(r), two_to_the(n)));
}

// erfc(|x| / sqrt 2) / 2 = half_t exp(minus_half_square - error / 2 + poly), where
// x^2 = square + error (square = x x rounded, -square / 2 exact) and poly = P(t).
struct HalfErfcParts {
  __m256 half_t, minus_half_square, error, poly;
};

__attribute__((target("avx2,fma"))) inline HalfErfcParts half_erfc_parts(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f), half = _mm256_set1_ps(0.5f);
  const __m256 z = _mm256_mul_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), x),
                                 _mm256_set1_ps(0.70710678f));
  const __m256 t = _mm256_div_ps(one, _mm256_fmadd_ps(z, half, one));
  // Numerical Recipes' erfcc, c0 + c1 t + ... + c9 t^9, by Estrin's scheme: the pairs c_2i +
  // c_2i+1 t, then joined by t^2, t^4 and t^8: five steps deep where Horner's rule is ten, so that
  // more GELU vectors fit the core's window at once (the forward 6-9% faster on Zen 3).
  const __m256 t2 = _mm256_mul_ps(t, t), t4 = _mm256_mul_ps(t2, t2), t8 = _mm256_mul_ps(t4, t4);
  const __m256 c01 = _mm256_fmadd_ps(_mm256_set1_ps(1.00002368f), t, _mm256_set1_ps(-1.26551223f));
  const __m256 c23 = _mm256_fmadd_ps(_mm256_set1_ps(0.09678418f), t, _mm256_set1_ps(0.37409196f));
  const __m256 c45 = _mm256_fmadd_ps(_mm256_set1_ps(0.27886807f), t, _mm256_set1_ps(-0.18628806f));
  const __m256 c67 = _mm256_fmadd_ps(_mm256_set1_ps(1.48851587f), t, _mm256_set1_ps(-1.13520398f));
  const __m256 c89 = _mm256_fmadd_ps(_mm256_set1_ps(0.17087277f), t, _mm256_set1_ps(-0.82215223f));
  const __m256 c0_3 = _mm256_fmadd_ps(c23, t2, c01), c4_7 = _mm256_fmadd_ps(c67, t2, c45);
  const __m256 p = _mm256_fmadd_ps(c89, t8, _mm256_fmadd_ps(c4_7, t4, c0_3));
  const __m256 square = _mm256_mul_ps(x, x);  // x^2 = square + error exactly
  // (0 where x^2 is not finite: inf - inf would make the tail, and gelu(+inf), NaN)
  const __m256 finite = _mm256_cmp_ps(square, _mm256_set1_ps(__builtin_inff()), _CMP_LT_OQ);
  const __m256 error = _mm256_and_ps(finite, _mm256_fmsub_ps(x, x, square));
  return {_mm256_mul_ps(half, t), _mm256_mul_ps(square, _mm256_set1_ps(-0.5f)), error, p};
}

// Phi(x) from erfc(|x| / sqrt 2) / 2: itself for x < 0, 1 minus it otherwise.
__attribute__((target("avx2,fma"))) inline __m256 cdf_from_half_erfc(__m256 x, __m256 half_erfc) {
  const __m256 negative = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ);
  return _mm256_blendv_ps(_mm256_sub_ps(_mm256_set1_ps(1.0f), half_erfc), half_erfc, negative);
}

// x Phi(x) with one exp, of -hi + (P - lo).
__attribute__((target("avx2,fma"))) inline __m256 gelu_lanes(__m256 x) {
  const HalfErfcParts parts = half_erfc_parts(x);
  const __m256 tail_exponent = _mm256_fnmadd_ps(parts.error, _mm256_set1_ps(0.5f), parts.poly);
  const __m256 half_erfc =
      _mm256_mul_ps(parts.half_t, exp_of_sum(parts.minus_half_square, tail_exponent));
  return _mm256_mul_ps(x, cdf_from_half_erfc(x, half_erfc));
}

// Phi(x) + x phi(x): exp(-hi - lo) once for both, and exp(P). (exp(-square / 2) alone, without
// lo, would be off by up to 4e-6 relative left of x = -11.3, where x^2 >= 128 and |gelu'| < 1e-27.)
__attribute__((target("avx2,fma"))) inline __m256 gelu_grad_lanes(__m256 x) {
  const HalfErfcParts parts = half_erfc_parts(x);
  const __m256 minus_half_error = _mm256_mul_ps(parts.error, _mm256_set1_ps(-0.5f));
  const __m256 gauss = exp_of_sum(parts.minus_half_square, minus_half_error);
  const __m256 tail = exp_small(parts.poly);
  const __m256 half_erfc = _mm256_mul_ps(parts.half_t, _mm256_mul_ps(gauss, tail));
  const __m256 cdf = cdf_from_half_erfc(x, half_erfc);
  const __m256 pdf = _mm256_mul_ps(gauss, _mm256_set1_ps(0.39894228f));  // 1 / sqrt(2 pi)
  return _mm256_fmadd_ps(x, pdf, cdf);
}

// out[i] = gelu(x[i]), or gelu'(x[i]) when kDerivative (times g[i] when g is given), eight at a
// time; the tail through a padded block.
template <bool kDerivative>
__attribute__((target("avx2,fma"))) inline __m256 gelu_or_grad_lanes(__m256 x) {
  return kDerivative ? gelu_grad_lanes(x) : gelu_lanes(x);
}
template <bool kDerivative>
__attribute__((target("avx2,fma"))) void gelu_map(const float* x, float* out, int64_t n,
                                                  const float* g = nullptr) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 y = gelu_or_grad_lanes<kDerivative>(_mm256_loadu_ps(x + i));
    if (g) y = _mm256_mul_ps(_mm256_loadu_ps(g + i), y);
    _mm256_storeu_ps(out + i, y);
  }
  if (i == n) return;
  float block[8] = {}, g_block[8] = {};
  std::memcpy(block, x + i, (n - i) * sizeof(float));
  if (g) std::memcpy(g_block, g + i, (n - i) * sizeof(float));
  __m256 y = gelu_or_grad_lanes<kDerivative>(_mm256_loadu_ps(block));
  if (g) y = _mm256_mul_ps(_mm256_loadu_ps(g_block), y);
  _mm256_storeu_ps(block, y);
  std::memcpy(out + i, block, (n - i) * sizeof(float));
}

// The sum of the eight lanes.
__attribute__((target("avx2,fma"))) inline float exp_sum_of_lanes(__m256 x) {
  const __m128 half = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  const __m128 pairs = _mm_add_ps(half, _mm_movehl_ps(half, half));
  return _mm_cvtss_f32(_mm_add_ss(pairs, _mm_shuffle_ps(pairs, pairs, 1)));
}

}  // namespace

void gelu_f32_avx2(const float* x, float* out, int64_t n) { gelu_map<false>(x, out, n); }
void gelu_grad_f32_avx2(const float* x, float* out, int64_t n) { gelu_map<true>(x, out, n); }
void gelu_backward_f32_avx2(const float* g, const float* x, float* out, int64_t n) {
  gelu_map<true>(x, out, n, g);
}

__attribute__((target("avx2,fma"))) float exp_shifted_f32_avx2(const float* x, float shift,
                                                                float* out, int64_t n) {
  const __m256 minus_shift = _mm256_set1_ps(-shift);
  __m256 sum = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp_lanes(_mm256_add_ps(_mm256_loadu_ps(x + i), minus_shift));
    _mm256_storeu_ps(out + i, e);
    sum = _mm256_add_ps(sum, e);
  }
  float total = exp_sum_of_lanes(sum);
  if (i == n) return total;
  float block[8];
  for (int j = 0; j < 8; ++j) block[j] = i + j < n ? x[i + j] : -__builtin_inff();  // exp: 0
  const __m256 e = exp_lanes(_mm256_add_ps(_mm256_loadu_ps(block), minus_shift));
  _mm256_storeu_ps(block, e);
  for (int64_t j = 0; i + j < n; ++j) out[i + j] = block[j];
  return total + exp_sum_of_lanes(e);
}

void exp_f32_avx2(const float* x, float* out, int64_t n) { exp_shifted_f32_avx2(x, 0.0f, out, n); }

}  // namespace tg::cpu

#else  // not x86-64: never called (fast_paths_enabled() is false), defined for the linker

#include "tapegrad/autograd/error.h"

namespace tg::cpu {
void gelu_f32_avx2(const float*, float*, int64_t) { fail("gelu_f32_avx2: not an x86-64 build"); }
void gelu_grad_f32_avx2(const float*, float*, int64_t) {
  fail("gelu_grad_f32_avx2: not an x86-64 build");
}
float exp_shifted_f32_avx2(const float*, float, float*, int64_t) {
  fail("exp_shifted_f32_avx2: not an x86-64 build");
}
void exp_f32_avx2(const float*, float*, int64_t) { fail("exp_f32_avx2: not an x86-64 build"); }
void gelu_backward_f32_avx2(const float*, const float*, float*, int64_t) {
  fail("gelu_backward_f32_avx2: not an x86-64 build");
}
}  // namespace tg::cpu

#endif
