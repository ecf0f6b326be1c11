// The exact GELU, x Phi(x), its derivative Phi(x) + x phi(x), and the backward's g gelu'(x) on
// AVX-512 F: cpu/fast/elementwise_avx2.cpp's kernels with sixteen lanes, for a CPU with two 512-bit
// FMA units. This file alone is compiled with -mavx512f (CMakeLists.txt), and cpu/elementwise.cpp
// calls it in place of the AVX2 kernels where cpu::cpu_has_avx512f() (exp stays on AVX2).
//
// The math is the AVX2 file's, which derives it, and its steps are written once for both, in
// cpu/fast/gelu_steps.h (GeluSteps): the same operations in the same order with the same roundings,
// so the same bits as the AVX2 kernels by construction (tests/cpu/fast/test_elementwise_avx512.cpp
// compares them, and both with double): GELU within 1e-6 relative of the double-precision formula,
// gelu' within 1e-6 of |Phi| + |x phi|. What differs is the machinery: the lanes (Avx512Lanes
// below: masks in k registers, 2^n applied with vscalefps), and the tail of an array one masked
// load and store (a masked load reads nothing past the mask: no fault at the end of an array).
//
// As in the other AVX-512 files, nothing here may be shared with the baseline code: <immintrin.h>
// and gelu_steps.h only, and internal linkage for every helper.
#include <cstdint>

#if defined(__x86_64__)
#include "tapegrad/cpu/fast/gelu_steps.h"  // GELU's steps, shared with the AVX2 file
#include "tapegrad/cpu/fast/immintrin_avx512.h"  // <immintrin.h>, GCC bug 105593 silenced

namespace tg::cpu {
namespace {

inline __mmask16 lanes_below(int64_t count) {  // count in 0..16
  return static_cast<__mmask16>((1u << count) - 1u);
}

// Sixteen float lanes, the operations GeluSteps is written in, each one AVX-512 F instruction.
struct Avx512Lanes {
  using Floats = __m512;
  using Mask = __mmask16;
  static Floats splat(float v) { return _mm512_set1_ps(v); }
  static Floats add(Floats a, Floats b) { return _mm512_add_ps(a, b); }
  static Floats sub(Floats a, Floats b) { return _mm512_sub_ps(a, b); }
  static Floats mul(Floats a, Floats b) { return _mm512_mul_ps(a, b); }
  static Floats div(Floats a, Floats b) { return _mm512_div_ps(a, b); }
  static Floats fmadd(Floats a, Floats b, Floats c) { return _mm512_fmadd_ps(a, b, c); }
  static Floats fnmadd(Floats a, Floats b, Floats c) { return _mm512_fnmadd_ps(a, b, c); }
  static Floats fmsub(Floats a, Floats b, Floats c) { return _mm512_fmsub_ps(a, b, c); }
  static Floats abs(Floats a) { return _mm512_abs_ps(a); }
  static Floats max(Floats a, Floats b) { return _mm512_max_ps(a, b); }
  static Floats round_to_int(Floats a) {
    return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  // y 2^n rounded once, as the AVX2 lanes' product by 2^n built in the exponent bits.
  static Floats scale_by_power_of_2(Floats y, Floats n) { return _mm512_scalef_ps(y, n); }
  static Mask less(Floats a, Floats b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  static Floats select(Mask mask, Floats a, Floats b) { return _mm512_mask_blend_ps(mask, b, a); }
  static Floats zero_where(Mask mask, Floats a) {
    return _mm512_maskz_mov_ps(static_cast<Mask>(~mask), a);
  }
};
using Steps = GeluSteps<Avx512Lanes>;

// out[i] = gelu(x[i]), or gelu'(x[i]) when kDerivative (times g[i] when g is given), sixteen at a
// time, two vectors an iteration while 32 are left (each vector is one long chain of dependent
// steps, two polynomials and an exp in series: two side by side overlap better, 8% faster here);
// the last 1..15 through masked loads and a masked store (the lanes past n compute gelu(0)).
template <bool kDerivative>
void gelu_map(const float* x, float* out, int64_t n, const float* g = nullptr) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m512 y0 = Steps::gelu_or_grad<kDerivative>(_mm512_loadu_ps(x + i));
    __m512 y1 = Steps::gelu_or_grad<kDerivative>(_mm512_loadu_ps(x + i + 16));
    if (g) y0 = _mm512_mul_ps(_mm512_loadu_ps(g + i), y0);
    if (g) y1 = _mm512_mul_ps(_mm512_loadu_ps(g + i + 16), y1);
    _mm512_storeu_ps(out + i, y0);
    _mm512_storeu_ps(out + i + 16, y1);
  }
  for (; i + 16 <= n; i += 16) {
    __m512 y = Steps::gelu_or_grad<kDerivative>(_mm512_loadu_ps(x + i));
    if (g) y = _mm512_mul_ps(_mm512_loadu_ps(g + i), y);
    _mm512_storeu_ps(out + i, y);
  }
  if (i == n) return;
  const __mmask16 lanes = lanes_below(n - i);
  __m512 y = Steps::gelu_or_grad<kDerivative>(_mm512_maskz_loadu_ps(lanes, x + i));
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
