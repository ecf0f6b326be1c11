// The one-pass layer_norm backward (cpu/fast/layer_norm.cpp) against the op's plain path, the
// closed form composed from ops (ops/layer_norm.cpp under FastPathsOff), on the same inputs: rows
// that fill several blocks of 32 and a short last one, a row width with a tail of the 8 running
// sums, two normalised dims, with and without weight and bias; f32 and f64, at 1, 2 and 3 threads
// (the kernel's sums are fixed blocks added in order: the same bits at every count).
//
// Tolerance: both are sums of `terms` products in different orders (dx: the row's n; dweight and
// dbias: the rows), each within (terms + 4) u sum |products| of the exact value (Higham's gamma,
// as tests/cpu/fast/test_linear.cpp). With entries of G in [-1, 1], |xhat| <= sqrt(n) and rstd
// about 1.7 (uniform [-1, 1] rows), sum |products| <= 4 sqrt(n) terms: so the two are within
// 2 (terms + 4) u 4 sqrt(n) terms of each other, plus the same relative to the value.
#include <catch2/catch.hpp>

#include <cmath>
#include <optional>
#include <vector>

#include "tapegrad/autograd/kernels.h"
#include "tapegrad/runtime/features.h"
#include "tapegrad/tapegrad.h"
#include "tests/support/thread_counts.h"
#include "tests/support/skip.h"

using namespace tg;
using tg::testing::at_thread_counts;

namespace {

double layer_norm_roundoff(DType dtype) { return dtype == DType::f32 ? 0x1.0p-24 : 0x1.0p-53; }

struct LayerNormCase {
  Shape x_shape, normalized;
  bool weight, bias;
};

// The gradients of x, weight and bias (those that exist) of layer_norm(x) . g, on the kernel or,
// with `plain`, under FastPathsOff.
std::vector<std::vector<double>> layer_norm_grads(const LayerNormCase& c, const Tensor& x0,
                                                  const Tensor& w0, const Tensor& b0,
                                                  const Tensor& g, bool plain) {
  std::optional<cpu::FastPathsOff> off;
  if (plain) off.emplace();
  Tensor x = x0.detach();
  Tensor w = c.weight ? w0.detach() : Tensor(), b = c.bias ? b0.detach() : Tensor();
  x.requires_grad_();
  if (w.defined()) w.requires_grad_();
  if (b.defined()) b.requires_grad_();
  layer_norm(x, c.normalized, w, b).backward(g);
  std::vector<std::vector<double>> grads = {x.grad().to_host_f64()};
  if (w.defined()) grads.push_back(w.grad().to_host_f64());
  if (b.defined()) grads.push_back(b.grad().to_host_f64());
  return grads;
}

// fast within the tolerance above of plain, gradient by gradient.
void require_layer_norm_close(const std::vector<std::vector<double>>& fast,
                              const std::vector<std::vector<double>>& plain, int64_t rows,
                              int64_t n, DType dtype) {
  REQUIRE(fast.size() == plain.size());
  for (size_t t = 0; t < fast.size(); ++t) {
    const double terms = static_cast<double>(t == 0 ? n : rows);
    const double tolerance =
        2 * (terms + 4) * layer_norm_roundoff(dtype) * 4 * std::sqrt(double(n)) * terms;
    REQUIRE(fast[t].size() == plain[t].size());
    for (size_t i = 0; i < fast[t].size(); ++i) {
      INFO("gradient " << t << ", element " << i << ": " << fast[t][i] << " vs " << plain[t][i]);
      REQUIRE(std::abs(fast[t][i] - plain[t][i]) <= tolerance * (1 + std::abs(plain[t][i])));
    }
  }
}

}  // namespace

TEST_CASE("layer_norm backward in one pass: the gradients agree with the composed ops",
          "[layer_norm][cpu]") {
  // A fast path: without AVX2 the op composes.
  if (tg::testing::skip_unless(cpu::fast_paths_enabled(), "this CPU has no AVX2 + FMA")) return;
  const std::vector<LayerNormCase> cases = {
      {{5, 120, 40}, {40}, true, true},    // 600 rows: 19 blocks, the last of 24 rows
      {{3, 7, 13}, {13}, true, false},     // width 13: eight running sums and a tail of 5
      {{4, 5, 3, 7}, {3, 7}, false, true}, // two normalised dims
      {{33, 8}, {8}, false, false},        // no affine part
      {{1, 1}, {1}, true, true}};          // one element: xhat 0, dx 0
  for (const LayerNormCase& c : cases) {
    for (DType dtype : {DType::f32, DType::f64}) {
      INFO(shape_str(c.x_shape) << " over " << shape_str(c.normalized) << ", "
                                << dtype_name(dtype));
      const Tensor x = uniform(c.x_shape, -1, 1, dtype, kCPU);
      const Tensor w = uniform(c.normalized, -1, 1, dtype, kCPU);
      const Tensor b = uniform(c.normalized, -1, 1, dtype, kCPU);
      const Tensor g = uniform(c.x_shape, -1, 1, dtype, kCPU);
      const int64_t n = numel(c.normalized), rows = numel(c.x_shape) / n;
      const auto plain = layer_norm_grads(c, x, w, b, g, true);
      std::optional<std::vector<std::vector<double>>> first;
      at_thread_counts([&] {
        const auto fast = layer_norm_grads(c, x, w, b, g, false);
        require_layer_norm_close(fast, plain, rows, n, dtype);
        if (!first) first = fast;
        REQUIRE(fast == *first);  // the same bits at 1, 2 and 3 threads
      });
    }
  }
}

TEST_CASE("layer_norm backward in one pass: declines f16 and FastPathsOff", "[layer_norm][cpu]") {
  const Tensor g = ones({4, 3}, DType::f16, kCPU), xhat = ones({4, 3}, DType::f16, kCPU);
  const Tensor rstd = ones({4}, DType::f16, kCPU);
  Tensor dx;
  REQUIRE_FALSE(kernels(kCPU).layer_norm_backward(g, xhat, rstd, Tensor(), &dx, nullptr, nullptr));
  const cpu::FastPathsOff off;
  REQUIRE_FALSE(kernels(kCPU).layer_norm_backward(ones({4, 3}), ones({4, 3}), ones({4}), Tensor(),
                                                  &dx, nullptr, nullptr));
}

// The forward: y of the one-pass kernel against normalize_rows and the two ops (FastPathsOff), with
// grad recorded (xhat written too) and under NoGrad (y alone). The mean and the variance are sums
// of n terms in another order: each within (n + 4) u sum |terms| of the exact one, so for rows of
// uniform [-1, 1] entries (variance about 1/3) xhat moves by at most a few (n + 4) u sqrt(n),
// and y = xhat w + b (|w|, |b| <= 1) by as much.
TEST_CASE("layer_norm forward in one pass: y agrees with normalize_rows and the affine ops",
          "[layer_norm][cpu]") {
  if (tg::testing::skip_unless(cpu::fast_paths_enabled(), "this CPU has no AVX2 + FMA")) return;
  const std::vector<LayerNormCase> cases = {{{5, 120, 40}, {40}, true, true},
                                            {{3, 7, 13}, {13}, true, false},
                                            {{4, 5, 3, 7}, {3, 7}, false, true},
                                            {{33, 8}, {8}, false, false},
                                            {{2, 300}, {300}, true, true},
                                            {{1, 1}, {1}, true, true}};
  for (const LayerNormCase& c : cases) {
    for (DType dtype : {DType::f32, DType::f64}) {
      for (bool recorded : {true, false}) {
        INFO(shape_str(c.x_shape) << " over " << shape_str(c.normalized) << ", "
                                  << dtype_name(dtype) << (recorded ? ", recorded" : ", NoGrad"));
        Tensor x = uniform(c.x_shape, -1, 1, dtype, kCPU);
        const Tensor w = c.weight ? uniform(c.normalized, -1, 1, dtype, kCPU) : Tensor();
        const Tensor b = c.bias ? uniform(c.normalized, -1, 1, dtype, kCPU) : Tensor();
        if (recorded) x.requires_grad_();
        std::optional<NoGrad> no_grad;
        if (!recorded) no_grad.emplace();
        std::vector<double> plain;
        {
          const cpu::FastPathsOff off;
          plain = layer_norm(x, c.normalized, w, b).to_host_f64();
        }
        const Tensor y = layer_norm(x, c.normalized, w, b);
        REQUIRE(y.shape() == c.x_shape);
        REQUIRE(y.requires_grad() == recorded);
        const std::vector<double> fast = y.to_host_f64();
        const double n = static_cast<double>(numel(c.normalized));
        const double tolerance = 8 * (n + 4) * layer_norm_roundoff(dtype) * std::sqrt(n);
        for (size_t i = 0; i < fast.size(); ++i) {
          INFO("element " << i << ": " << fast[i] << " vs " << plain[i]);
          REQUIRE(std::abs(fast[i] - plain[i]) <= tolerance * (1 + std::abs(plain[i])));
        }
      }
    }
  }
}

TEST_CASE("layer_norm forward in one pass: declines f16, FastPathsOff and a non-2-d x",
          "[layer_norm][cpu]") {
  Tensor y, xhat, mean, rstd;
  const Tensor half = ones({4, 3}, DType::f16, kCPU);
  REQUIRE_FALSE(kernels(kCPU).layer_norm_forward(half, 1e-5, Tensor(), Tensor(), &y, &xhat, &mean,
                                                 &rstd));
  REQUIRE_FALSE(kernels(kCPU).layer_norm_forward(ones({2, 2, 3}), 1e-5, Tensor(), Tensor(), &y,
                                                 nullptr, &mean, &rstd));
  {
    const cpu::FastPathsOff off;
    REQUIRE_FALSE(kernels(kCPU).layer_norm_forward(ones({4, 3}), 1e-5, Tensor(), Tensor(), &y,
                                                   nullptr, &mean, &rstd));
  }
  REQUIRE_FALSE(y.defined());  // nothing allocated when declining
}

TEST_CASE("layer_norm forward in one pass: a row by hand", "[layer_norm][cpu]") {
  if (tg::testing::skip_unless(cpu::fast_paths_enabled(), "this CPU has no AVX2 + FMA")) return;
  Tensor y, xhat, mean, rstd;
  // A hand-computed row: x = (1, 2, 3, 6): mean 3, variance (4 + 1 + 0 + 9) / 4 = 3.5; with
  // weight (1, 2, 1, 1) and bias (0, 0, 1, 0): y = ((1 - 3), 2 (2 - 3), (3 - 3) + 1, (6 - 3)) / sqrt(3.5)
  // (eps 0), the third entry 1.
  const Tensor x = from_values({1, 2, 3, 6}, {1, 4}, DType::f64);
  const Tensor w = from_values({1, 2, 1, 1}, {4}, DType::f64);
  const Tensor b = from_values({0, 0, 1, 0}, {4}, DType::f64);
  REQUIRE(kernels(kCPU).layer_norm_forward(x, 0.0, w, b, &y, &xhat, &mean, &rstd));
  const double s = std::sqrt(3.5);
  const std::vector<double> want_y = {-2 / s, -2 / s, 1, 3 / s}, want_xhat = {-2 / s, -1 / s, 0, 3 / s};
  for (size_t i = 0; i < 4; ++i) {
    REQUIRE(y.to_host_f64()[i] == Approx(want_y[i]).epsilon(1e-15));
    REQUIRE(xhat.to_host_f64()[i] == Approx(want_xhat[i]).margin(1e-15));
  }
  REQUIRE(mean.to_host_f64()[0] == 3.0);
  REQUIRE(rstd.to_host_f64()[0] == Approx(1 / s).epsilon(1e-15));
}
