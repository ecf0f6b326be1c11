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
#include "tapegrad/cpu/features.h"
#include "tapegrad/tapegrad.h"
#include "tests/support/thread_counts.h"

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
  if (!cpu::fast_paths_enabled()) return;  // a fast path: without AVX2 the op composes
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
