#pragma once
// Vectorised row helpers for the fused attention kernel (cpu/fast/attention.cpp): the row max and
// 2^(row - shift) of a tile of scores, its hot loops. The kernel keeps its scores in base-2 units
// (log2(e) is folded into the scale of Q K^T), so its softmax needs exp2, which is cheaper than exp:
// see docs/attention.md. f32 runs four lanes at a time with GCC / Clang vector extensions (SSE2,
// the x86-64 baseline, so no -march flag is needed); the f64 overloads (gradcheck precision) are
// plain loops on std::exp2. Tested in tests/cpu/fast/test_simd.cpp.
//
// Accuracy of exp2_lanes: x = n + f with n = round(x), so f = x - n in [-1/2, 1/2] is exact (no
// Cody-Waite split of ln2 as exp needs), a degree-6 polynomial for 2^f written as 1 + f P(f), and
// 2^n built in the exponent bits. P's six coefficients are a minimax fit of 2^f's relative error
// (Lawson's iteration, 8001 Chebyshev points, the constant held at 1 so that 2^0 is exactly 1),
// rounded to f32: 1.6e-8 on its own. n is rounded by adding 1.5 * 2^23 + 127: the sum's low
// mantissa bits then hold n + 127, which shifted left by 23 is 2^n, with no conversion to integers.
// Over [-126, 127] it is within 1.2e-7 relative of exp2 (one f32 ulp is 2^-23 = 1.19e-7 relative;
// measured on every float of the range: 8.0e-8 at worst with FMA, 1.03e-7 without, and
// tests/cpu/fast/test_simd.cpp asserts the bound). Outside that range:
//   x < -126.5 or -inf  gives exactly 0 (x is clamped to -127, and n = -127 makes 2^n's bits 0;
//                       the true value is below 8.3e-39, past the smallest normal float; so a
//                       masked -inf score gives 0, as exp2(-inf)). From -126.5 to -126 the
//                       result is 2^x rounded to a subnormal float (within 2^-149).
//   x > 127 or +inf     gives 2^127 (the callers pass x - max <= 0, so this never happens);
//   NaN                 stays NaN.
// Seven multiplies and adds on the FMA units against exp's ten; about twice as fast as calling
// std::exp per element in the attention kernel.
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

// 2^x of four floats (accuracy above).
inline Floats exp2_lanes(Floats x) {
  const Floats low = x < -127.0f ? splat(-127.0f) : x;  // a NaN fails both tests and stays
  const Floats clamped = low > 127.0f ? splat(127.0f) : low;
  constexpr float kRound = 12583039.0f;  // 1.5 * 2^23 + 127: adding it rounds to an integer
  const Floats n_biased = clamped + kRound;  // its low mantissa bits hold round(x) + 127
  const Floats n = n_biased - kRound;
  const Floats f = clamped - n;  // exact
  Floats poly = splat(1.5353362e-4f);  // 2^f ~ 1 + f (ln2 + f (ln2^2 / 2 + ...)), P of degree 5
  poly = poly * f + 1.3398875e-3f;
  poly = poly * f + 9.6184369e-3f;
  poly = poly * f + 5.5503324e-2f;
  poly = poly * f + 2.4022648e-1f;
  poly = poly * f + 6.9314718e-1f;
  poly = poly * f + 1.0f;
  const Floats two_to_n = (Floats)((Ints)n_biased << 23);  // (round(x) + 127) << 23 is 2^n
  return poly * two_to_n;
}

// row[c] = 2^(row[c] - shift) for c < cols; returns the sum of the new row.
inline float exp2_shifted_row(float* row, int64_t cols, float shift) {
  Floats sum{};
  int64_t c = 0;
  for (; c + kLanes <= cols; c += kLanes) {
    Floats x;
    std::memcpy(&x, row + c, sizeof x);
    x = exp2_lanes(x - shift);
    std::memcpy(row + c, &x, sizeof x);
    sum += x;
  }
  if (c < cols) {  // the tail, padded with -inf (which gives 0)
    Floats x = splat(-std::numeric_limits<float>::infinity());
    std::memcpy(&x, row + c, (cols - c) * sizeof(float));
    x = exp2_lanes(x - shift);
    std::memcpy(row + c, &x, (cols - c) * sizeof(float));
    sum += x;
  }
  return (sum[0] + sum[1]) + (sum[2] + sum[3]);
}

inline double exp2_shifted_row(double* row, int64_t cols, double shift) {
  double sum = 0;
  for (int64_t c = 0; c < cols; ++c) {
    row[c] = std::exp2(row[c] - shift);
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
