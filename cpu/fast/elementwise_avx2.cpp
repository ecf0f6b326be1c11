// Elementwise f32 fast paths, eight lanes at a time (AVX2 + FMA), taken when fast_paths_enabled()
// (runtime/features.h): exp (CpuKernels::unary's UnaryOp::exp, and the exponentials of softmax_dim's
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
// gives. The backward's g gelu'(x) is one pass (CpuKernels::gelu_backward). The steps are written
// once, in gelu_steps.h, for this file and the AVX-512 one (elementwise_avx512.cpp): the same bits.
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>

#include "tapegrad/cpu/fast/gelu_steps.h"  // GELU's steps, shared with the AVX-512 file

// This file is compiled with -mavx2 -mfma (CMakeLists.txt): it includes none of the project's
// headers with inline functions that the baseline code could share, only gelu_steps.h, whose
// templates have internal linkage. It is called only where cpu::fast_paths_enabled().
namespace tg::cpu {
namespace {

// Eight float lanes, the operations GeluSteps is written in (cpu/fast/gelu_steps.h), each one
// AVX2 + FMA instruction or two.
struct Avx2Lanes {
  using Floats = __m256;
  using Mask = __m256;  // all ones in a lane where true
  static Floats splat(float v) { return _mm256_set1_ps(v); }
  static Floats add(Floats a, Floats b) { return _mm256_add_ps(a, b); }
  static Floats sub(Floats a, Floats b) { return _mm256_sub_ps(a, b); }
  static Floats mul(Floats a, Floats b) { return _mm256_mul_ps(a, b); }
  static Floats div(Floats a, Floats b) { return _mm256_div_ps(a, b); }
  static Floats fmadd(Floats a, Floats b, Floats c) { return _mm256_fmadd_ps(a, b, c); }
  static Floats fnmadd(Floats a, Floats b, Floats c) { return _mm256_fnmadd_ps(a, b, c); }
  static Floats fmsub(Floats a, Floats b, Floats c) { return _mm256_fmsub_ps(a, b, c); }
  static Floats abs(Floats a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
  static Floats max(Floats a, Floats b) { return _mm256_max_ps(a, b); }
  static Floats round_to_int(Floats a) {
    return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  // 2^n built in the exponent bits (n in -126..127), then one product: y 2^n rounded once.
  static Floats scale_by_power_of_2(Floats y, Floats n) {
    const __m256i biased = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_mul_ps(y, _mm256_castsi256_ps(_mm256_slli_epi32(biased, 23)));
  }
  static Mask less(Floats a, Floats b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
  static Floats select(Mask mask, Floats a, Floats b) { return _mm256_blendv_ps(b, a, mask); }
  static Floats zero_where(Mask mask, Floats a) { return _mm256_andnot_ps(mask, a); }
};
using Steps = GeluSteps<Avx2Lanes>;

// exp(x) of eight floats (Cephes expf; the edges above): Cephes' polynomial as GELU's exps
// (Steps::exp_reduced), with the whole float range.
inline __m256 exp_lanes(__m256 x) {
  const __m256 underflow = _mm256_cmp_ps(x, _mm256_set1_ps(kExpFloor), _CMP_LT_OQ);
  const __m256 overflow = _mm256_cmp_ps(x, _mm256_set1_ps(88.72284f), _CMP_GT_OQ);
  const __m256 not_a_number = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  const __m256 input = x;
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(kExpFloor)), _mm256_set1_ps(88.72284f));
  const __m256 n = Steps::exp_exponent(x);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), x);  // x - n ln2, in two parts
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), r);
  // 2^n as 2^min(n, 127), times 2 where n = 128 (x within ln 2 / 2 of the largest float)
  const __m256 top = _mm256_cmp_ps(n, _mm256_set1_ps(127.0f), _CMP_GT_OQ);
  __m256 y = Avx2Lanes::scale_by_power_of_2(Steps::exp_reduced(r),
                                            _mm256_min_ps(n, _mm256_set1_ps(127.0f)));
  y = _mm256_mul_ps(y, _mm256_blendv_ps(_mm256_set1_ps(1.0f), _mm256_set1_ps(2.0f), top));
  y = _mm256_blendv_ps(_mm256_andnot_ps(underflow, y),
                       _mm256_set1_ps(__builtin_inff()), overflow);
  return _mm256_blendv_ps(y, input, not_a_number);
}

// out[i] = gelu(x[i]), or gelu'(x[i]) when kDerivative (times g[i] when g is given), eight at a
// time; the tail through a padded block.
template <bool kDerivative>
void gelu_map(const float* x, float* out, int64_t n, const float* g = nullptr) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 y = Steps::gelu_or_grad<kDerivative>(_mm256_loadu_ps(x + i));
    if (g) y = _mm256_mul_ps(_mm256_loadu_ps(g + i), y);
    _mm256_storeu_ps(out + i, y);
  }
  if (i == n) return;
  float block[8] = {}, g_block[8] = {};
  std::memcpy(block, x + i, (n - i) * sizeof(float));
  if (g) std::memcpy(g_block, g + i, (n - i) * sizeof(float));
  __m256 y = Steps::gelu_or_grad<kDerivative>(_mm256_loadu_ps(block));
  if (g) y = _mm256_mul_ps(_mm256_loadu_ps(g_block), y);
  _mm256_storeu_ps(block, y);
  std::memcpy(out + i, block, (n - i) * sizeof(float));
}

// The sum of the eight lanes.
inline float exp_sum_of_lanes(__m256 x) {
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

float exp_shifted_f32_avx2(const float* x, float shift, float* out, int64_t n) {
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
