// The vectorised row helpers of the attention kernel (cpu/fast/simd.h) against std::exp2 / std::max.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "tapegrad/cpu/fast/simd.h"

using namespace tg::cpu::simd;

namespace {
constexpr float kFloatInf = std::numeric_limits<float>::infinity();
}

TEST_CASE("SIMD exp2f is within 1.2e-7 relative (one ulp) of exp2 over [-126, 127]", "[simd]") {
  // Every 2^-10 step across the range (260k points, four lanes at a time), plus the ends: the
  // relative error against exp2 in double, the worst one asserted (the bound in cpu_simd.h).
  double worst = 0, worst_at = 0;
  const auto check = [&](Floats x) {
    const Floats y = exp2_lanes(x);
    for (int lane = 0; lane < kLanes; ++lane) {
      const double exact = std::exp2(static_cast<double>(x[lane]));
      const double error = std::abs(y[lane] - exact) / exact;
      if (error > worst) worst = error, worst_at = x[lane];
    }
  };
  for (double x = -126.0; x + 3 * 0x1.0p-10 <= 127.0; x += 4 * 0x1.0p-10) {
    check(Floats{float(x), float(x + 0x1.0p-10), float(x + 2 * 0x1.0p-10), float(x + 3 * 0x1.0p-10)});
  }
  check(Floats{-126.0f, 127.0f, 0.0f, -0.0f});
  check(Floats{1e-8f, -1e-8f, 0.49999997f, -0.49999997f});  // tiny, and the reduction's edge
  check(Floats{0.50000006f, -0.50000006f, 3.5f, -3.5f});     // past it: n rounds to the next integer
  INFO("worst relative error " << worst << " at x = " << worst_at);
  REQUIRE(worst < 1.2e-7);  // 1.03e-7 at worst over every float of the range (without FMA)
}

TEST_CASE("SIMD exp2f: 0 below -126.5 and at -inf, subnormal above, NaN stays NaN, 2^127 above 127",
          "[simd]") {
  const Floats y = exp2_lanes(Floats{-126.51f, -1000.0f, -kFloatInf, std::nanf("")});
  REQUIRE(y[0] == 0.0f);
  REQUIRE(y[1] == 0.0f);
  REQUIRE(y[2] == 0.0f);
  REQUIRE(std::isnan(y[3]));
  // From -126.5 to -126, 2^x is below the smallest normal float: rounded to a subnormal
  for (double x = -126.49; x < -126.0; x += 0.01) {
    const Floats band = exp2_lanes(splat(static_cast<float>(x)));
    const double exact = std::exp2(static_cast<double>(static_cast<float>(x)));
    INFO("x = " << x);
    REQUIRE(band[0] > 0.0f);
    REQUIRE(std::abs(band[0] - exact) <= 0x1.0p-149);
  }
  const Floats big = exp2_lanes(Floats{127.0f, 128.0f, kFloatInf, 200.0f});
  for (int lane = 0; lane < kLanes; ++lane) REQUIRE(big[lane] == 0x1.0p127f);
}

TEST_CASE("exp2_shifted_row: every row length (tails of 1 to 3), sum and masked entries", "[simd]") {
  for (int64_t cols = 0; cols <= 13; ++cols) {
    INFO(cols << " columns");
    std::vector<float> row(cols), expected(cols);
    double expected_sum = 0;
    for (int64_t c = 0; c < cols; ++c) {
      row[c] = c % 5 == 3 ? -kFloatInf : 0.37f * static_cast<float>(c) - 2.0f;  // some masked
      expected[c] = static_cast<float>(std::exp2(static_cast<double>(row[c]) - 1.5));
      expected_sum += expected[c];
    }
    const float sum = exp2_shifted_row(row.data(), cols, 1.5f);
    // x - shift rounded in f32 (under 1e-7 relative after exp2), exp2 (1.2e-7), expected's
    // rounding (6e-8)
    for (int64_t c = 0; c < cols; ++c) REQUIRE(row[c] == Approx(expected[c]).epsilon(4e-7).margin(0));
    REQUIRE(sum == Approx(expected_sum).epsilon(1e-6));

    std::vector<double> row64(cols);  // the f64 overload: std::exp2
    for (int64_t c = 0; c < cols; ++c) row64[c] = 0.37 * static_cast<double>(c) - 2.0;
    const double sum64 = exp2_shifted_row(row64.data(), cols, 1.5);
    double total = 0;
    for (int64_t c = 0; c < cols; ++c) {
      REQUIRE(row64[c] == std::exp2(0.37 * static_cast<double>(c) - 2.0 - 1.5));
      total += row64[c];
    }
    REQUIRE(sum64 == Approx(total).epsilon(1e-15));
  }
}

TEST_CASE("row_max_of: every row length, the max in any lane or the tail, NaN skipped", "[simd]") {
  REQUIRE(row_max_of(static_cast<const float*>(nullptr), 0) == -kFloatInf);
  for (int64_t cols = 1; cols <= 11; ++cols) {
    for (int64_t at = 0; at < cols; ++at) {
      std::vector<float> row(cols, -3.0f);
      std::vector<double> row64(cols, -3.0);
      row[at] = 2.5f;
      row64[at] = 2.5;
      if (at != 0) row[0] = row64[0] = std::nanf("");  // skipped, as by std::max(best, x)
      REQUIRE(row_max_of(row.data(), cols) == 2.5f);
      REQUIRE(row_max_of(row64.data(), cols) == 2.5);
    }
  }
  const std::vector<float> masked(6, -kFloatInf);
  REQUIRE(row_max_of(masked.data(), 6) == -kFloatInf);
}
