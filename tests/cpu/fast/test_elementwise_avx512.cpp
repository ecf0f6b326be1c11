// The AVX-512 GELU kernels (cpu/fast/elementwise_avx512.cpp), called directly, where the CPU has
// AVX-512 F: against the formulas in double, gelu = x Phi(x) and gelu' = Phi(x) + x phi(x), over a
// dense range and deep into the left tail; and against the AVX2 kernels (elementwise_avx2.cpp),
// which take the same steps with the same roundings: the same bits, on the dense range, on every
// tail length of the 16-lane loops (with the floats past n left untouched), and for NaN and +-inf.
// So which of the two CpuKernels takes (cpu/elementwise.cpp) changes the speed, not the results.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "tapegrad/autograd/kernels.h"
#include "tapegrad/cpu/kernels.h"
#include "tapegrad/ops/ops.h"
#include "tapegrad/runtime/features.h"
#include "tests/support/skip.h"

// A named namespace, not an anonymous one: the tests are compiled in unity batches, where
// test_elementwise_avx2.cpp's helpers may share this translation unit.
namespace gelu_avx512_test {

double cdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }
double pdf(double x) { return std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI); }

// True where the AVX-512 GELU kernels cannot run here (the case is then reported skipped).
bool no_avx512() {
  return tg::testing::skip_unless(tg::cpu::cpu_has_avx512f() && tg::cpu::cpu_has_avx2_fma(),
                                  "this CPU has no AVX-512 F: the AVX-512 GELU kernels");
}

// One of the three kernels, in each file, called as the backward is (g unused by the other two).
using Kernel = void (*)(const float* g, const float* x, float* out, int64_t n);
void gelu_avx512(const float*, const float* x, float* out, int64_t n) {
  tg::cpu::gelu_f32_avx512(x, out, n);
}
void gelu_avx2(const float*, const float* x, float* out, int64_t n) {
  tg::cpu::gelu_f32_avx2(x, out, n);
}
void gelu_grad_avx512(const float*, const float* x, float* out, int64_t n) {
  tg::cpu::gelu_grad_f32_avx512(x, out, n);
}
void gelu_grad_avx2(const float*, const float* x, float* out, int64_t n) {
  tg::cpu::gelu_grad_f32_avx2(x, out, n);
}
struct KernelPair {
  const char* name;
  Kernel avx512, avx2;
  bool derivative, times_g;
};
const KernelPair kKernels[] = {
    {"gelu", gelu_avx512, gelu_avx2, false, false},
    {"gelu_grad", gelu_grad_avx512, gelu_grad_avx2, true, false},
    {"gelu_backward", tg::cpu::gelu_backward_f32_avx512, tg::cpu::gelu_backward_f32_avx2, true,
     true},
};

std::vector<float> run(Kernel kernel, const std::vector<float>& x, const std::vector<float>& g) {
  std::vector<float> out(x.size());
  kernel(g.data(), x.data(), out.data(), static_cast<int64_t>(x.size()));
  return out;
}

// The bound of the kernels' error at x (for g = 1): 1e-6 relative for gelu; for gelu', which
// crosses 0 at x = -0.7518 as a difference of terms near 0.2 (each with Phi's relative error),
// 1e-6 of the sum of their sizes. Plus 1e-37, about where the results turn subnormal.
double error_bound(bool derivative, double x) {
  const double terms = derivative ? cdf(x) + std::abs(x * pdf(x)) : std::abs(x * cdf(x));
  return 1e-6 * terms + 1e-37;
}

// Every 1/256 over [-14, 14] (left of -13.2 exp(-x^2 / 2) is 0 in f32 and the results are below
// 1e-37), every 1/8192 of the left tail [-13, -9], where Phi is erfc's alone (1e-19 .. 1e-39),
// and the points where the branches meet.
std::vector<float> dense_inputs() {
  std::vector<float> x;
  for (int i = -14 * 256; i <= 14 * 256; ++i) x.push_back(static_cast<float>(i / 256.0));
  for (int i = -13 * 8192; i <= -9 * 8192; ++i) x.push_back(static_cast<float>(i / 8192.0));
  for (float v : {1e-30f, -1e-30f, 1e-7f, -1e-7f, 0.0f, -0.0f, -0.7517916f, 9.3f, -9.3f, -13.5f}) {
    x.push_back(v);
  }
  return x;
}

}  // namespace gelu_avx512_test

using namespace gelu_avx512_test;

TEST_CASE("GELU f32 on AVX-512: within 1e-6 relative of the double formula, left tail included",
          "[gelu][simd][avx512]") {
  if (no_avx512()) return;
  const std::vector<float> x = dense_inputs(), ones(x.size(), 1.0f);
  for (const KernelPair& kernel : kKernels) {
    INFO(kernel.name);
    const std::vector<float> got = run(kernel.avx512, x, ones);
    double worst = 0;
    size_t worst_at = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double expected =
          kernel.derivative ? cdf(x[i]) + x[i] * pdf(x[i]) : x[i] * cdf(x[i]);
      const double ratio = std::abs(got[i] - expected) / error_bound(kernel.derivative, x[i]);
      if (!(ratio <= worst)) worst = ratio, worst_at = i;  // NaN too
    }
    INFO("worst error / bound " << worst << " at x = " << x[worst_at] << ": " << got[worst_at]);
    REQUIRE(worst <= 1.0);
    const std::vector<float> narrow = run(kernel.avx2, x, ones);
    for (size_t i = 0; i < x.size(); ++i) {
      INFO("x = " << x[i] << ": AVX-512 " << got[i] << ", AVX2 " << narrow[i]);
      REQUIRE(got[i] == narrow[i]);  // the AVX2 kernels' bits
    }
  }
}

TEST_CASE("GELU f32 on AVX-512: every tail length gives the AVX2 kernels' bits, past n untouched",
          "[gelu][simd][avx512]") {
  if (no_avx512()) return;
  constexpr float kSentinel = 12345.0f;
  // 0..2 rounds of the 32-float loop, with and without the 16-float one, and every tail 0..15.
  for (int64_t n = 1; n <= 80; ++n) {
    INFO("n = " << n);
    std::vector<float> x(n + 16, std::numeric_limits<float>::quiet_NaN()), g(n + 16, 1.0f);
    for (int64_t i = 0; i < n; ++i) {
      x[i] = static_cast<float>(-8.0 + 14.0 * static_cast<double>((i * 37) % 83) / 83);
      g[i] = static_cast<float>(3.0 * std::sin(0.7 * static_cast<double>(i)));
    }
    for (const KernelPair& kernel : kKernels) {
      INFO(kernel.name);
      std::vector<float> wide(n + 16, kSentinel), narrow(n + 16, kSentinel);
      kernel.avx512(g.data(), x.data(), wide.data(), n);
      kernel.avx2(g.data(), x.data(), narrow.data(), n);
      for (int64_t i = 0; i < n + 16; ++i) {
        INFO("i = " << i << ", x = " << x[i] << ": AVX-512 " << wide[i] << ", AVX2 "
                     << narrow[i]);
        if (i >= n) {
          REQUIRE(wide[i] == kSentinel);  // the masked store wrote nothing past n
        } else {
          REQUIRE(wide[i] == narrow[i]);
        }
      }
    }
  }
}

TEST_CASE("GELU f32 on AVX-512: NaN and +-inf as the AVX2 kernels", "[gelu][simd][avx512]") {
  if (no_avx512()) return;
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float big = std::numeric_limits<float>::max();
  // 19 values: a full vector and a tail of 3, so that each load sees some.
  const std::vector<float> x = {inf,    -inf,  nan,   0.0f,   -0.0f, -30.0f, 30.0f,
                                -200.0f, 200.0f, big,  -big,   -50.0f, 50.0f, 14.0f,
                                -14.0f,  nan,    -inf, inf,    -1e4f};
  const std::vector<float> ones(x.size(), 1.0f);
  for (const KernelPair& kernel : kKernels) {
    const std::vector<float> wide = run(kernel.avx512, x, ones), narrow = run(kernel.avx2, x, ones);
    for (size_t i = 0; i < x.size(); ++i) {
      INFO(kernel.name << ", x = " << x[i] << ": AVX-512 " << wide[i] << ", AVX2 " << narrow[i]);
      REQUIRE(std::isnan(wide[i]) == std::isnan(narrow[i]));
      if (!std::isnan(narrow[i])) REQUIRE(wide[i] == narrow[i]);
    }
    // As documented: gelu(+inf) = +inf, gelu(-inf) = NaN, gelu'(+-inf) = NaN, NaN stays NaN.
    CHECK((kernel.derivative ? std::isnan(wide[0]) : wide[0] == inf));
    CHECK(std::isnan(wide[1]));
    CHECK(std::isnan(wide[2]));
  }
}
