// The exact GELU, x Phi(x), its derivative Phi(x) + x phi(x), and the backward's g gelu'(x) on
// AVX-512 F: cpu/fast/elementwise_avx2.cpp's kernels with sixteen lanes, for a CPU with two 512-bit
// FMA units. This file alone is compiled with -mavx512f (CMakeLists.txt), and cpu/elementwise.cpp
// calls it in place of the AVX2 kernels where cpu::cpu_has_avx512f() (exp stays on AVX2).
//
// The math is the AVX2 file's, which derives it, step for step: Phi from erfc(z) = t exp(-z^2 +
// P(t)), z = |x| / sqrt 2, t = 1 / (1 + z / 2), P Numerical Recipes' erfcc polynomial; x^2 = hi +
// lo carried as two floats; one exp of the whole exponent for the forward (exp_of_sum: -hi/2 -
// n ln2_hi is exact), two for the derivative (exp(-x^2 / 2), phi's too, and exp(P)); exp as
// Cephes' expf with its edges for GELU's arguments (0 below -87.3). The same operations with the
// same roundings give the same bits as the AVX2 kernels (tests/cpu/fast/test_elementwise_avx512.cpp
// compares them, and both with double): GELU within 1e-6 relative of the double-precision formula
// (5.0e-7 at worst over every float of |x| <= 14), gelu' within 1e-6 of |Phi| + |x phi| (6.4e-7).
// What differs is the machinery: 2^n applied with vscalefps, and the tail of an array one masked
// load and store (a masked load reads nothing past the mask: no fault at the end of an array).
//
// As in the other AVX-512 files, nothing here may be shared with the baseline code: <immintrin.h>
// only, and internal linkage for every helper.
#include <cstdint>

#if defined(__x86_64__)
#include "tapegrad/cpu/fast/immintrin_avx512.h"  // <immintrin.h>, GCC bug 105593 silenced

namespace tg::cpu {
namespace {

inline __mmask16 lanes_below(int64_t count) {  // count in 0..16
  return static_cast<__mmask16>((1u << count) - 1u);
}

inline __m512 splat(float value) { return _mm512_set1_ps(value); }

// Cephes expf's split of ln 2 (ln2_hi has 9 significant bits: n ln2_hi is exact for |n| < 2^15),
// and the argument below which the result would be subnormal (0 instead, as in the AVX2 file).
constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f, kLog2e = 1.44269504f;
constexpr float kExpFloor = -87.3f;

// e^r for |r| <= ln 2 / 2 (and a little past): Cephes' degree-7 polynomial.
inline __m512 exp_reduced(__m512 r) {
  __m512 y = splat(1.9875691500e-4f);
  y = _mm512_fmadd_ps(y, r, splat(1.3981999507e-3f));
  y = _mm512_fmadd_ps(y, r, splat(8.3334519073e-3f));
  y = _mm512_fmadd_ps(y, r, splat(4.1665795894e-2f));
  y = _mm512_fmadd_ps(y, r, splat(1.6666665459e-1f));
  y = _mm512_fmadd_ps(y, r, splat(5.0000001201e-1f));
  return _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, splat(1.0f)));
}

// n = round(x log2 e), the power of 2 of e^x.
inline __m512 exp_exponent(__m512 x) {
  return _mm512_roundscale_ps(_mm512_mul_ps(x, splat(kLog2e)),
                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

// e^x for |x| < 2 (P(t), in [-1.27, 0]; NaN where x is, which stays NaN), so that there is no
// edge to look for.
inline __m512 exp_small(__m512 x) {
  const __m512 n = exp_exponent(x);
  __m512 r = _mm512_fnmadd_ps(n, splat(kLn2Hi), x);  // x - n ln 2, in two parts
  r = _mm512_fnmadd_ps(n, splat(kLn2Lo), r);
  return _mm512_scalef_ps(exp_reduced(r), n);  // e^r 2^n
}

// exp(big + small) for a float `big` <= 0 of any size and |small| < 1.5 (P is in [-1.27, 0]),
// without rounding their sum: n comes from the rounded sum, but the reduction takes big alone
// first. big - n ln2_hi is exact: both are multiples of ulp(big) (n ln2_hi is one of 2^-9, and
// ulp(big) <= 2^-9 below 2^15), and the difference, about r - small, is under 2^24 of them (for
// |big| < 1, where it may not be, its rounding is below 2^-24 absolute). small is added after,
// where the two cancel down to r.
inline __m512 exp_of_sum(__m512 big, __m512 small) {
  const __m512 sum = _mm512_add_ps(big, small);  // for n and the edge only
  // The edge of the AVX2 file's exp: 0 below kExpFloor, where 2^n would be subnormal (n >= -126
  // above it). NaN is not below, and clamps to the floor (max returns its second operand): where
  // the sum is NaN, so is r, and so the result.
  const __mmask16 normal = _mm512_cmp_ps_mask(sum, splat(kExpFloor), _CMP_NLT_UQ);
  const __m512 n = exp_exponent(_mm512_max_ps(sum, splat(kExpFloor)));
  __m512 r = _mm512_fnmadd_ps(n, splat(kLn2Hi), big);
  r = _mm512_add_ps(r, small);
  r = _mm512_fnmadd_ps(n, splat(kLn2Lo), r);
  return _mm512_maskz_mov_ps(normal, _mm512_scalef_ps(exp_reduced(r), n));
}

// erfc(|x| / sqrt 2) / 2 = half_t exp(minus_half_square - error / 2 + poly), where
// x^2 = square + error (square = x x rounded, -square / 2 exact) and poly = P(t).
struct HalfErfcParts {
  __m512 half_t, minus_half_square, error, poly;
};

inline HalfErfcParts half_erfc_parts(__m512 x) {
  const __m512 one = splat(1.0f), half = splat(0.5f);
  const __m512 z = _mm512_mul_ps(_mm512_abs_ps(x), splat(0.70710678f));
  // A division, as in the AVX2 file: rcp14 and a Newton step ran no faster here (tried).
  const __m512 t = _mm512_div_ps(one, _mm512_fmadd_ps(z, half, one));
  __m512 p = splat(0.17087277f);  // Numerical Recipes' erfcc
  p = _mm512_fmadd_ps(p, t, splat(-0.82215223f));
  p = _mm512_fmadd_ps(p, t, splat(1.48851587f));
  p = _mm512_fmadd_ps(p, t, splat(-1.13520398f));
  p = _mm512_fmadd_ps(p, t, splat(0.27886807f));
  p = _mm512_fmadd_ps(p, t, splat(-0.18628806f));
  p = _mm512_fmadd_ps(p, t, splat(0.09678418f));
  p = _mm512_fmadd_ps(p, t, splat(0.37409196f));
  p = _mm512_fmadd_ps(p, t, splat(1.00002368f));
  p = _mm512_fmadd_ps(p, t, splat(-1.26551223f));
  const __m512 square = _mm512_mul_ps(x, x);  // x^2 = square + error exactly
  // (error 0 where x^2 is not finite: inf - inf would make the tail, and gelu(+inf), NaN)
  const __mmask16 finite = _mm512_cmp_ps_mask(square, splat(__builtin_inff()), _CMP_LT_OQ);
  const __m512 error = _mm512_maskz_fmsub_ps(finite, x, x, square);
  return {_mm512_mul_ps(half, t), _mm512_mul_ps(square, splat(-0.5f)), error, p};
}

// Phi(x) from erfc(|x| / sqrt 2) / 2: itself for x < 0, 1 minus it otherwise.
inline __m512 cdf_from_half_erfc(__m512 x, __m512 half_erfc) {
  const __mmask16 nonnegative = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ);
  return _mm512_mask_sub_ps(half_erfc, nonnegative, splat(1.0f), half_erfc);
}

inline __m512 gelu_lanes(__m512 x) {
  const HalfErfcParts parts = half_erfc_parts(x);
  const __m512 tail_exponent = _mm512_fnmadd_ps(parts.error, splat(0.5f), parts.poly);
  const __m512 half_erfc =
      _mm512_mul_ps(parts.half_t, exp_of_sum(parts.minus_half_square, tail_exponent));
  return _mm512_mul_ps(x, cdf_from_half_erfc(x, half_erfc));
}

// Phi(x) + x phi(x): exp(-x^2 / 2), with both parts of x^2 through exp_of_sum, once for both, and
// exp(P) apart.
inline __m512 gelu_grad_lanes(__m512 x) {
  const HalfErfcParts parts = half_erfc_parts(x);
  const __m512 minus_half_error = _mm512_mul_ps(parts.error, splat(-0.5f));
  const __m512 gauss = exp_of_sum(parts.minus_half_square, minus_half_error);
  const __m512 tail = exp_small(parts.poly);
  const __m512 half_erfc = _mm512_mul_ps(parts.half_t, _mm512_mul_ps(gauss, tail));
  const __m512 cdf = cdf_from_half_erfc(x, half_erfc);
  const __m512 pdf = _mm512_mul_ps(gauss, splat(0.39894228f));  // 1 / sqrt(2 pi)
  return _mm512_fmadd_ps(x, pdf, cdf);
}

// out[i] = gelu(x[i]), or gelu'(x[i]) when kDerivative (times g[i] when g is given), sixteen at a
// time, two vectors an iteration while 32 are left (each vector is one long chain of dependent
// steps, two polynomials and an exp in series: two side by side overlap better, 8% faster here);
// the last 1..15 through masked loads and a masked store (the lanes past n compute gelu(0)).
template <bool kDerivative>
inline __m512 gelu_or_grad_lanes(__m512 x) {
  return kDerivative ? gelu_grad_lanes(x) : gelu_lanes(x);
}
template <bool kDerivative>
void gelu_map(const float* x, float* out, int64_t n, const float* g = nullptr) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m512 y0 = gelu_or_grad_lanes<kDerivative>(_mm512_loadu_ps(x + i));
    __m512 y1 = gelu_or_grad_lanes<kDerivative>(_mm512_loadu_ps(x + i + 16));
    if (g) y0 = _mm512_mul_ps(_mm512_loadu_ps(g + i), y0);
    if (g) y1 = _mm512_mul_ps(_mm512_loadu_ps(g + i + 16), y1);
    _mm512_storeu_ps(out + i, y0);
    _mm512_storeu_ps(out + i + 16, y1);
  }
  for (; i + 16 <= n; i += 16) {
    __m512 y = gelu_or_grad_lanes<kDerivative>(_mm512_loadu_ps(x + i));
    if (g) y = _mm512_mul_ps(_mm512_loadu_ps(g + i), y);
    _mm512_storeu_ps(out + i, y);
  }
  if (i == n) return;
  const __mmask16 lanes = lanes_below(n - i);
  __m512 y = gelu_or_grad_lanes<kDerivative>(_mm512_maskz_loadu_ps(lanes, x + i));
  if (g) y = _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes, g + i), y);
  _mm512_mask_storeu_ps(out + i, lanes, y);
}

}  // namespace

void gelu_f32_avx512(const float* x, float* out, int64_t n) { gelu_map<false>(x, out, n); }
void gelu_grad_f32_avx512(const float* x, float* out, int64_t n) { gelu_map<true>(x, out, n); }
void gelu_backward_f32_avx512(const float* g, const float* x, float* out, int64_t n) {
  gelu_map<true>(x, out, n, g);
}

}  // namespace tg::cpu

#else  // not x86-64: never called (cpu_has_avx512f() is false), defined for the linker
#include "tapegrad/autograd/error.h"
#include "tapegrad/cpu/kernels.h"

namespace tg::cpu {
void gelu_f32_avx512(const float*, float*, int64_t) {
  fail("gelu_f32_avx512: not an x86-64 build");
}
void gelu_grad_f32_avx512(const float*, float*, int64_t) {
  fail("gelu_grad_f32_avx512: not an x86-64 build");
}
void gelu_backward_f32_avx512(const float*, const float*, float*, int64_t) {
  fail("gelu_backward_f32_avx512: not an x86-64 build");
}
}  // namespace tg::cpu
#endif
