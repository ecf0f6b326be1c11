#pragma once
// Vectorised row helpers for the fused attention kernel (ops/cpu_attention.cpp): the row max and
// exp(row - shift) of a tile of scores, its hot loops. f32 runs four lanes at a time with GCC /
// Clang vector extensions (SSE2, the x86-64 baseline, so no -march flag is needed); the f64
// overloads (gradcheck precision) are plain loops on std::exp. Tested in tests/ops/test_cpu_simd.cpp.
//
// Accuracy of exp_lanes (after Cephes' expf): Cody-Waite reduction x = n ln2 + r with ln2 split
// in two (0.693359375 exact in 9 bits, plus -2.12194440e-4), a degree-6 polynomial for exp(r) on
// |r| <= ln2 / 2 written as 1 + r (1 + r P(r)), and 2^n built in the exponent bits. P's four
// coefficients are a minimax fit of exp's relative error (Lawson's iteration, 4001 Chebyshev
// points, the first two coefficients held at 1 so that exp(0) is exactly 1), rounded to f32: 1.7e-8
// on its own, one FMA fewer than Cephes' degree 7 (whose extra term is below f32's rounding).
// n is rounded by adding 1.5 * 2^23 + 127: the sum's low mantissa bits then hold n + 127, which
// shifted left by 23 is 2^n, with no conversion to integers. Over [-87.33, 88] it is within 1.2e-7
// relative of exp (one f32 ulp is 2^-23 = 1.19e-7 relative; measured on every float of the range:
// 8.9e-8 at worst with FMA, 1.13e-7 without, and tests/ops/test_cpu_simd.cpp asserts the bound).
// Outside that range:
//   x < -87.68 or -inf  gives exactly 0 (x is clamped to -88, and n = -127 makes 2^n's bits 0;
//                       the true value is below 8.5e-39, past the smallest normal float; so a
//                       masked -inf score gives 0, as exp(-inf)). From -87.68 to -87.33 the
//                       result is exp(x) rounded to a subnormal float (within 2^-149).
//   x > 88 or +inf      gives exp(88) (the callers pass x - max <= 0, so this never happens);
//   NaN                 stays NaN.
// About twice as fast as calling std::exp per element in the attention kernel.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace tg::cpu::simd {

using Floats = float __attribute__((vector_size(16)));
using Ints = int32_t __attribute__((vector_size(16)));
inline constexpr int64_t kLanes = 4;

inline Floats splat(float value) { return Floats{} + value; }

// exp of four floats (accuracy above).
inline Floats exp_lanes(Floats x) {
  const Floats low = x < -88.0f ? splat(-88.0f) : x;  // a NaN fails both tests and stays
  const Floats clamped = low > 88.0f ? splat(88.0f) : low;
  constexpr float kRound = 12583039.0f;  // 1.5 * 2^23 + 127: adding it rounds to an integer
  // n_biased's low mantissa bits hold round(x / ln2) + 127
  const Floats n_biased = clamped * 1.44269504088896341f + kRound;
  const Floats n = n_biased - kRound;
  const Floats r = clamped - n * 0.693359375f - n * -2.12194440e-4f;  // x - n ln2
  Floats poly = splat(1.3843654e-3f);  // exp(r) ~ 1 + r (1 + r (1/2 + r/6 + ...)), P of degree 4
  poly = poly * r + 8.3741555e-3f;
  poly = poly * r + 4.1668002e-2f;
  poly = poly * r + 1.6666432e-1f;
  poly = poly * r + 4.9999994e-1f;
  poly = poly * r + 1.0f;
  poly = poly * r + 1.0f;
  const Floats two_to_n = (Floats)((Ints)n_biased << 23);  // (round(x/ln2) + 127) << 23 is 2^n
  return poly * two_to_n;
}

// row[c] = exp(row[c] - shift) for c < cols; returns the sum of the new row.
inline float exp_shifted_row(float* row, int64_t cols, float shift) {
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

inline double exp_shifted_row(double* row, int64_t cols, double shift) {
  double sum = 0;
  for (int64_t c = 0; c < cols; ++c) {
    row[c] = std::exp(row[c] - shift);
    sum += row[c];
  }
  return sum;
}

// The largest entry of a row (-inf for an empty or fully masked one), four lanes at a time: a
// scalar max is a chain of dependent instructions. NaNs are skipped, as by std::max(best, x).
inline float row_max_of(const float* row, int64_t cols) {
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

inline double row_max_of(const double* row, int64_t cols) {
  double result = -std::numeric_limits<double>::infinity();
  for (int64_t c = 0; c < cols; ++c) result = std::max(result, row[c]);
  return result;
}

}  // namespace tg::cpu::simd
