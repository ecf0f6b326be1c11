// The vectorised f32 elementwise kernels (cpu/fast/elementwise_avx2.cpp) against the plain loops of
// cpu/elementwise.cpp (std::erf and std::exp per element: the same kernel call under a FastPathsOff
// scope) and against the formulas in double: exp; GELU x Phi(x) and its derivative
// Phi(x) + x phi(x), Phi(x) = erfc(-x / sqrt 2) / 2. (softmax_dim's rows, which use the same exp,
// are compared with the reference softmax in tests/cpu/test_reference.cpp.)
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "tapegrad/autograd/kernels.h"
#include "tapegrad/cpu/kernels.h"
#include "tapegrad/ops/ops.h"
#include "tapegrad/runtime/features.h"
#include "tests/support/skip.h"

using namespace tg;

namespace {

double gelu_cdf_double(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }
double gelu_double(double x) { return x * gelu_cdf_double(x); }
double gelu_grad_double(double x) {
  return gelu_cdf_double(x) + x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
}

// The kernel's output for `values` (f32), on the fast path or, with `plain`, the plain loop.
std::vector<double> run_unary(UnaryOp op, const std::vector<double>& values, bool plain) {
  const Tensor x = from_values(values, {static_cast<int64_t>(values.size())}, DType::f32);
  const Tensor out = empty(x.shape(), DType::f32);
  if (plain) {
    const cpu::FastPathsOff off;
    kernels(kCPU).unary(op, x, 0.0, out);
  } else {
    kernels(kCPU).unary(op, x, 0.0, out);
  }
  return out.to_host_f64();
}

// Every float step of 1/64 over [-20, 20], every 1/8192 of the left tail [-13, -9] (where Phi is
// erfc's alone, 1e-19 .. 1e-39, and phi's exp needs both parts of x^2), and the values where the
// branches meet.
std::vector<double> gelu_inputs() {
  std::vector<double> values;
  for (int i = -20 * 64; i <= 20 * 64; ++i) values.push_back(i / 64.0);
  for (int i = -13 * 8192; i <= -9 * 8192; ++i) values.push_back(i / 8192.0);
  for (double x : {1e-30, -1e-30, 1e-7, -1e-7, 0.0, -0.0, -0.7517916, 9.3, -9.3, -13.0, -13.5}) {
    values.push_back(x);
  }
  return values;
}

// |a - b| <= absolute + relative |b| for every element, reporting the worst one.
void require_within(const std::vector<double>& inputs, const std::vector<double>& a,
                    const std::vector<double>& b, double relative, double absolute) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  size_t worst_at = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double error = std::abs(a[i] - b[i]) / (absolute + relative * std::abs(b[i]));
    if (!(error <= worst)) worst = error, worst_at = i;
  }
  INFO("worst error / tolerance " << worst << " at x = " << inputs[worst_at] << ": " << a[worst_at]
                                  << " vs " << b[worst_at]);
  REQUIRE(worst <= 1.0);
}

// gelu'(x) (`got`, for each of `inputs`) within 1e-6 of the sum of its terms' sizes,
// |Phi| + |x phi|, plus 1e-37 (about where the results turn subnormal): it crosses 0 at
// x = -0.7518 as a difference of terms near 0.2, each with Phi's relative error, and in the left
// tail the bound is relative (gelu'(-11.4) is about -3e-28: an absolute part there would hide an
// error in phi).
void require_grad_within(const std::vector<double>& inputs, const std::vector<double>& got) {
  REQUIRE(got.size() == inputs.size());
  double worst = 0;
  size_t worst_at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double x = static_cast<float>(inputs[i]);  // what the f32 kernel reads
    const double x_pdf = x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
    const double bound = 1e-6 * (gelu_cdf_double(x) + std::abs(x_pdf)) + 1e-37;
    const double error = std::abs(got[i] - gelu_grad_double(x)) / bound;
    if (!(error <= worst)) worst = error, worst_at = i;  // NaN too
  }
  INFO("worst error / bound " << worst << " at x = " << inputs[worst_at] << ": " << got[worst_at]
                              << " vs " << gelu_grad_double(static_cast<float>(inputs[worst_at])));
  REQUIRE(worst <= 1.0);
}

}  // namespace

// The plain loops (cpu/elementwise.cpp, apply_unary), the path of a CPU without AVX2 + FMA, taken
// here by a FastPathsOff scope: against the formulas in double, on every CPU.
TEST_CASE("GELU and exp f32: the plain loops against the double formulas", "[gelu][simd]") {
  std::vector<double> inputs;
  for (int i = -20 * 64; i <= 20 * 64; ++i) inputs.push_back(i / 64.0);
  for (double x : {1e-30, -1e-30, 1e-7, -1e-7, 0.0, -0.7517916, 9.3, -9.3}) inputs.push_back(x);
  const std::vector<double> gelu = run_unary(UnaryOp::gelu, inputs, true);
  const std::vector<double> grad = run_unary(UnaryOp::gelu_grad, inputs, true);
  const std::vector<double> exp = run_unary(UnaryOp::exp, inputs, true);
  double worst_gelu = 0, worst_grad = 0, worst_exp = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const double x = static_cast<float>(inputs[i]);
    INFO("x = " << x << ": gelu " << gelu[i] << ", gelu' " << grad[i] << ", exp " << exp[i]);
    // Phi as 0.5 (1 + erf(x / sqrt 2)) in f32: erf within an ulp, and the sum with 1 rounded, an
    // absolute error of 1.8e-7 in 1 + erf (what the fast kernels' erfc avoids in the left tail);
    // so |x| 1.2e-7 absolute in gelu, beside 1e-6 of it relative.
    const double x_pdf = x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
    const double gelu_bound = 1e-6 * std::abs(gelu_double(x)) + 1.2e-7 * std::abs(x) + 1e-37;
    worst_gelu = std::max(worst_gelu, std::abs(gelu[i] - gelu_double(x)) / gelu_bound);
    // gelu' = Phi + x phi: Phi's 1.2e-7 absolute, and exp(-x^2 / 2) of a rounded x^2 / 2
    // (relative 6e-8 of it), so x^2 / 2 times that in phi.
    const double grad_bound =
        1.2e-7 + 1e-6 * (gelu_cdf_double(x) + std::abs(x_pdf) * (1 + 0.5 * x * x)) + 1e-37;
    worst_grad = std::max(worst_grad, std::abs(grad[i] - gelu_grad_double(x)) / grad_bound);
    // std::exp in f32: within an ulp (2^-23 relative); 0 and +inf past the float range.
    const double exact_exp = std::exp(x);
    if (exact_exp < 0x1.0p-126 || exact_exp > 0x1.fffffep127) continue;
    worst_exp = std::max(worst_exp, std::abs(exp[i] - exact_exp) / (0x1.0p-23 * exact_exp));
  }
  INFO("worst error / bound: gelu " << worst_gelu << ", gelu' " << worst_grad << ", exp "
                                    << worst_exp);
  REQUIRE(worst_gelu <= 1.0);
  REQUIRE(worst_grad <= 1.0);
  REQUIRE(worst_exp <= 1.0);
}

TEST_CASE("GELU f32: the AVX2 path is within 1e-6 relative of the double formula", "[gelu][simd]") {
  if (tg::testing::skip_unless(cpu::fast_paths_enabled(), "this CPU has no AVX2 + FMA")) return;
  const std::vector<double> inputs = gelu_inputs();
  std::vector<double> gelu_ref;
  for (double x : inputs) gelu_ref.push_back(gelu_double(static_cast<float>(x)));
  // gelu keeps its relative accuracy in the left tail (gelu(-9.3) is about -1e-19); gelu' is
  // bounded by the sizes of its terms.
  require_within(inputs, run_unary(UnaryOp::gelu, inputs, false), gelu_ref, 1e-6, 1e-37);
  require_grad_within(inputs, run_unary(UnaryOp::gelu_grad, inputs, false));
}

TEST_CASE("GELU f32: the AVX2 kernels called directly, within 1e-6 of the double formula",
          "[gelu][simd]") {
  // The other cases reach the GELU kernels through CpuKernels, which takes the AVX-512 ones
  // (cpu/fast/elementwise_avx512.cpp, tests/cpu/fast/test_elementwise_avx512.cpp) on a CPU with
  // AVX-512 F: this one keeps the AVX2 kernels' accuracy tested on such a CPU too.
  if (tg::testing::skip_unless(cpu::cpu_has_avx2_fma(), "this CPU has no AVX2 + FMA")) return;
  const std::vector<double> inputs = gelu_inputs();
  std::vector<float> x;
  std::vector<double> gelu_ref;
  for (double value : inputs) {
    x.push_back(static_cast<float>(value));
    gelu_ref.push_back(gelu_double(x.back()));
  }
  const auto run = [&](void (*kernel)(const float*, float*, int64_t)) {
    std::vector<float> out(x.size());
    kernel(x.data(), out.data(), static_cast<int64_t>(x.size()));
    return std::vector<double>(out.begin(), out.end());
  };
  require_within(inputs, run(cpu::gelu_f32_avx2), gelu_ref, 1e-6, 1e-37);
  require_grad_within(inputs, run(cpu::gelu_grad_f32_avx2));
  // The backward's kernel with g = 1 (the same lanes as gelu_grad, through its own loop).
  const std::vector<float> ones(x.size(), 1.0f);
  std::vector<float> backward(x.size());
  cpu::gelu_backward_f32_avx2(ones.data(), x.data(), backward.data(),
                              static_cast<int64_t>(x.size()));
  require_grad_within(inputs, std::vector<double>(backward.begin(), backward.end()));
}

TEST_CASE("GELU f32: the AVX2 path agrees with the plain loop, every tail length and threads",
          "[gelu][simd]") {
  if (tg::testing::skip_unless(cpu::fast_paths_enabled(), "this CPU has no AVX2 + FMA")) return;
  // Lengths 1..17 (the 8-lane loop and its tails), and one large enough to split across threads.
  for (int64_t n : {1, 2, 7, 8, 9, 15, 16, 17, 100003}) {
    INFO("n = " << n);
    std::vector<double> inputs(n);
    for (int64_t i = 0; i < n; ++i) inputs[i] = -6.0 + 12.0 * static_cast<double>(i % 997) / 997;
    for (UnaryOp op : {UnaryOp::gelu, UnaryOp::gelu_grad}) {
      // The plain loop's 1 + erf(x / sqrt 2) loses its relative accuracy left of about -3 (an
      // absolute error of 6e-8 in Phi): the absolute part of the tolerance is that, times |x| <= 6.
      require_within(inputs, run_unary(op, inputs, false), run_unary(op, inputs, true), 1e-6, 5e-7);
    }
  }
}

TEST_CASE("GELU f32: the AVX2 path's special values match the plain loop", "[gelu][simd]") {
  if (tg::testing::skip_unless(cpu::fast_paths_enabled(), "this CPU has no AVX2 + FMA")) return;
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> inputs = {inf, -inf, std::nan(""), 0.0, -30.0, 30.0, -200.0};
  for (UnaryOp op : {UnaryOp::gelu, UnaryOp::gelu_grad}) {
    const std::vector<double> fast = run_unary(op, inputs, false);
    const std::vector<double> plain = run_unary(op, inputs, true);
    for (size_t i = 0; i < inputs.size(); ++i) {
      INFO("x = " << inputs[i] << ": fast " << fast[i] << ", plain " << plain[i]);
      if (std::isnan(plain[i])) {
        REQUIRE(std::isnan(fast[i]));
      } else {
        REQUIRE(fast[i] == plain[i]);
      }
    }
  }
}

TEST_CASE("exp f32: the AVX2 path is within 2 ulp of exp in double, and its edges", "[gelu][simd]") {
  if (tg::testing::skip_unless(cpu::fast_paths_enabled(), "this CPU has no AVX2 + FMA")) return;
  // Every 1/256 over the normal range of results, and the ends of it.
  std::vector<double> inputs;
  for (int i = -87 * 256; i <= 88 * 256; ++i) inputs.push_back(i / 256.0);
  for (double x : {-87.29, 88.72, 88.7228, 1e-8, -1e-8, 0.0}) inputs.push_back(x);
  std::vector<double> expected;
  for (double x : inputs) expected.push_back(std::exp(static_cast<double>(static_cast<float>(x))));
  require_within(inputs, run_unary(UnaryOp::exp, inputs, false), expected, 0x1.0p-22, 0.0);
  // Past the ends: +inf above log(FLT_MAX) and at +inf, 0 below -87.3 and at -inf, NaN kept;
  // each as the plain loop gives, except that it rounds -88 .. -103.9 to subnormal floats.
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> edges = {88.73, 100.0, inf, -87.4, -200.0, -inf, std::nan("")};
  const std::vector<double> fast = run_unary(UnaryOp::exp, edges, false);
  const std::vector<double> plain = run_unary(UnaryOp::exp, edges, true);
  for (size_t i = 0; i < edges.size(); ++i) {
    INFO("x = " << edges[i] << ": fast " << fast[i] << ", plain " << plain[i]);
    if (std::isnan(plain[i])) {
      REQUIRE(std::isnan(fast[i]));
    } else if (edges[i] < -87.3) {
      REQUIRE(fast[i] == 0.0);
      REQUIRE(plain[i] < 1.2e-38);
    } else {
      REQUIRE(fast[i] == plain[i]);
    }
  }
  // Every tail length of the 8-lane loop, and across threads, against the plain loop.
  for (int64_t n : {1, 7, 8, 9, 17, 100003}) {
    std::vector<double> values(n);
    for (int64_t i = 0; i < n; ++i) values[i] = -30.0 + 60.0 * static_cast<double>(i % 991) / 991;
    require_within(values, run_unary(UnaryOp::exp, values, false),
                   run_unary(UnaryOp::exp, values, true), 0x1.0p-22, 0.0);
  }
}

TEST_CASE("GELU backward in one pass: g gelu'(x) as the op's mul by gelu_grad", "[gelu][simd]") {
  // Without AVX2 + FMA the op multiplies.
  if (tg::testing::skip_unless(cpu::fast_paths_enabled(), "this CPU has no AVX2 + FMA")) return;
  // The op's gradient through the kernel against the same op under FastPathsOff (the plain
  // gelu_grad loop, then mul): within the fast derivative's 1e-6, and every tail length.
  for (int64_t n : {1, 7, 9, 17, 100003}) {
    INFO("n = " << n);
    std::vector<double> xs(n), gs(n);
    for (int64_t i = 0; i < n; ++i) {
      xs[i] = -6.0 + 12.0 * static_cast<double>(i % 997) / 997;
      gs[i] = std::sin(0.1 * static_cast<double>(i)) * 3.0;
    }
    const Tensor g = from_values(gs, {n}, DType::f32);
    std::vector<double> grads[2];
    for (int plain = 0; plain < 2; ++plain) {
      std::optional<cpu::FastPathsOff> off;
      if (plain) off.emplace();
      Tensor x = from_values(xs, {n}, DType::f32);
      x.requires_grad_();
      gelu(x).backward(g);
      grads[plain] = x.grad().to_host_f64();
    }
    require_within(xs, grads[0], grads[1], 2e-6, 1.5e-6);  // |g| <= 3: the plain 5e-7 times 3
  }
  // The kernel declines what it does not compute: f64, and shapes that differ (the op then
  // multiplies, broadcasting).
  const Tensor x64 = ones({4}, DType::f64);
  REQUIRE_FALSE(kernels(kCPU).gelu_backward(x64, x64).defined());
  REQUIRE_FALSE(kernels(kCPU).gelu_backward(ones({1}), ones({4})).defined());
}
