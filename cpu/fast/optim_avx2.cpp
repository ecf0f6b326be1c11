// Adam / AdamW on f32, eight lanes at a time (AVX2 + FMA): the fast path of
// CpuKernels::adam_step (cpu/optim.cpp), taken when fast_paths_enabled() (runtime/features.h).
//
// The plain loop computes each element in f64 and rounds once. This one stays in f32 with
// PyTorch's order of operations (torch.optim.Adam's single-tensor path), the bias corrections
// folded into two constants:
//   p *= decay;  g += l2 p;  m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2;
//   p -= step_size m / (sqrt(v) / sqrt(1 - beta2^t) + eps),  step_size = lr / (1 - beta1^t)
// so the two agree to a few f32 roundings (tests/cpu/fast/test_optim_avx2.cpp). Why it pays: the
// f64 square root and division of the plain loop cost about 20 cycles an element; here 8 elements
// share them and the loop runs at memory speed (`tapegrad bench --plain-kernels` compares).
#include <cmath>
#include <cstdint>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

namespace tg::cpu {

__attribute__((target("avx2,fma"))) void adam_step_f32_avx2(const AdamStep& s, float* p,
                                                             const float* g, float* m, float* v,
                                                             int64_t count) {
  const float beta1 = float(s.beta1), beta2 = float(s.beta2);
  const float one_minus_beta1 = float(1 - s.beta1), one_minus_beta2 = float(1 - s.beta2);
  const float decay = float(s.decay_factor), l2 = float(s.l2), eps = float(s.eps);
  const float inv_correction2 = float(1 / std::sqrt(s.bias_correction2));
  const float step_size = float(s.lr / s.bias_correction1);
  // One element with the vector loop's operations, for the tail.
  const auto element = [&](int64_t i) {
    const float param = p[i] * decay;
    const float gradient = g[i] + l2 * param;
    m[i] = beta1 * m[i] + one_minus_beta1 * gradient;
    v[i] = beta2 * v[i] + one_minus_beta2 * (gradient * gradient);
    p[i] = param - step_size * (m[i] / (__builtin_sqrtf(v[i]) * inv_correction2 + eps));
  };
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256 param = _mm256_mul_ps(_mm256_loadu_ps(p + i), _mm256_set1_ps(decay));
    const __m256 gradient = _mm256_fmadd_ps(_mm256_set1_ps(l2), param, _mm256_loadu_ps(g + i));
    const __m256 avg = _mm256_fmadd_ps(_mm256_set1_ps(beta1), _mm256_loadu_ps(m + i),
                                       _mm256_mul_ps(_mm256_set1_ps(one_minus_beta1), gradient));
    const __m256 avg_sq = _mm256_fmadd_ps(
        _mm256_set1_ps(beta2), _mm256_loadu_ps(v + i),
        _mm256_mul_ps(_mm256_set1_ps(one_minus_beta2), _mm256_mul_ps(gradient, gradient)));
    const __m256 denom = _mm256_fmadd_ps(_mm256_sqrt_ps(avg_sq), _mm256_set1_ps(inv_correction2),
                                         _mm256_set1_ps(eps));
    const __m256 update = _mm256_mul_ps(_mm256_set1_ps(step_size), _mm256_div_ps(avg, denom));
    _mm256_storeu_ps(m + i, avg);
    _mm256_storeu_ps(v + i, avg_sq);
    _mm256_storeu_ps(p + i, _mm256_sub_ps(param, update));
  }
  for (; i < count; ++i) element(i);
}

}  // namespace tg::cpu

#else  // not x86-64: never called (cpu::fast_paths_enabled() is false), defined for the linker
namespace tg::cpu {
void adam_step_f32_avx2(const AdamStep&, float*, const float*, float*, float*, int64_t) {
  fail("adam_step_f32_avx2: not an x86-64 build");
}
}  // namespace tg::cpu
#endif
