// int8 quantization (ops/quantize.h, cpu/quantize.cpp): values worked out by hand, the error
// bound of rounding, saturation, rows of zeros, the int8 product against a 64-bit loop, and the
// quantized Linear against f32 arithmetic on the dequantized operands.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/ops/ops.h"

using namespace tg;

TEST_CASE("quantize_rows by hand: scale max|x|/127, round half to even, zero rows", "[quantize]") {
  // row 0: max 2 -> scale 2/127; 1 x (1 / (2/127)) = 63.5 -> 64 (ties to even), -2 -> -127, 0.5 -> 31.75 -> 32
  // row 1: all zero -> scale 1, q 0
  const QuantizedRows q = quantize_rows(from_values({1, -2, 0.5, 0, 0, 0}, {2, 3}));
  REQUIRE(q.values.dtype() == DType::i8);
  REQUIRE(q.values.to_host_i64() == std::vector<int64_t>{64, -127, 32, 0, 0, 0});
  REQUIRE(q.scales.to_host_f64() == std::vector<double>{double(2.0f / 127.0f), 1.0});
  // a fixed scale saturates at +-127 and NaN becomes 0
  const QuantizedRows fixed = quantize_rows(
      from_values({1000, -1000, 0.25, std::nan("")}, {1, 4}), /*fixed_scale=*/0.5);
  REQUIRE(fixed.values.to_host_i64() == std::vector<int64_t>{127, -127, 0, 0});  // 0.5 -> 0 (even)
  REQUIRE(fixed.scales.to_host_f64() == std::vector<double>{0.5});
}

TEST_CASE("quantize_rows multiplies by the f32 reciprocal of the scale, as PyTorch's quantize_val",
          "[quantize]") {
  // max 1 -> scale RN(1/127), whose f32 reciprocal is 127 exactly. x = 0x1.62c58ap-5 is 5.5
  // scales to the last bit (x / scale = 5.49999976 rounds to 5.5 in f32, which ties to 6), but
  // x 127 = 5.49999974 rounds to 5.49999952 in f32, which rounds to 5.
  const QuantizedRows q = quantize_rows(from_values({1, 0x1.62c58ap-5}, {1, 2}), 0, 127);
  REQUIRE(q.values.to_host_i64() == std::vector<int64_t>{127, 5});
}

TEST_CASE("quantize_rows on 63 levels (7 bits) by hand, and levels outside 1..127 refused",
          "[quantize]") {
  // max 6.3 -> scale 6.3/63 (0.1 in f32); 3.2 -> 32, 1 -> 10, -0.04 -> -0.4 -> 0, -6.3 -> -63
  const QuantizedRows q = quantize_rows(from_values({3.2, 1, -0.04, -6.3}, {1, 4}), 0, 63);
  REQUIRE(q.values.to_host_i64() == std::vector<int64_t>{32, 10, 0, -63});
  REQUIRE(q.scales.to_host_f64() == std::vector<double>{double(6.3f / 63.0f)});
  // a fixed scale saturates at +-63, not +-127
  const QuantizedRows fixed = quantize_rows(from_values({1, -1, 0.3}, {1, 3}), 0.01, 63);
  REQUIRE(fixed.values.to_host_i64() == std::vector<int64_t>{63, -63, 30});
  for (int levels : {0, -1, 128}) {
    REQUIRE_THROWS_WITH(quantize_rows(zeros({1, 2}), 0, levels), Catch::Contains("levels"));
  }
}

TEST_CASE("quantize_rows: a scale is never below 2^-126, so denormal rows never get 0",
          "[quantize]") {
  // row 0: largest 2^-145, a denormal whose / 127 is below half of 2^-149 (it was 0.0f): scale
  //        2^-126, and 2^-145 / 2^-126 = 2^-19 rounds to 0 (an error of 2^-145 <= 2^-127)
  // row 1: largest 2^-120 (normal), 2^-120 / 127 is denormal: scale 2^-126; 2^-120 -> 64 steps
  //        exactly, the denormal 2^-130 -> 1/16 of a step -> 0, -3 * 2^-127 -> -1.5 -> -2 (even)
  // row 2: largest 127 * 2^-126: its own scale, exactly 2^-126 (the bound is not a cliff)
  const QuantizedRows q = quantize_rows(from_values(
      {0x1p-145, -0x1p-146, 0, 0x1p-120, 0x1p-130, -3 * 0x1p-127, 127 * 0x1p-126, 0x1p-126, 0},
      {3, 3}));
  REQUIRE(q.scales.to_host_f64() == std::vector<double>{0x1p-126, 0x1p-126, 0x1p-126});
  REQUIRE(q.values.to_host_i64() == std::vector<int64_t>{0, 0, 0, 64, 0, -2, 127, 1, 0});
  REQUIRE(dequantize_rows(q).to_host_f64()[3] == 0x1p-120);
}

TEST_CASE("quantize -> dequantize is within half a step of every element", "[quantize]") {
  manual_seed(1);
  const Tensor x = uniform({37, 53}, -3, 3) * uniform({37, 1}, 0, 10);  // rows of varied range
  const QuantizedRows q = quantize_rows(x);
  const std::vector<double> original = x.to_host_f64(), back = dequantize_rows(q).to_host_f64();
  const std::vector<double> scales = q.scales.to_host_f64();
  for (int64_t r = 0; r < 37; ++r) {
    for (int64_t c = 0; c < 53; ++c) {
      INFO("row " << r << ", col " << c);
      REQUIRE(std::abs(back[r * 53 + c] - original[r * 53 + c]) <= 0.5 * scales[r] * (1 + 1e-6));
    }
  }
}

TEST_CASE("gemm_i8 equals an exact 64-bit loop, odd shapes and extreme values", "[quantize]") {
  std::vector<double> a_values, b_values;
  const int64_t m = 13, n = 7, k = 301;
  uint64_t state = 12345;
  auto next = [&] {  // -128 .. 127, with the extremes often
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const int64_t v = static_cast<int64_t>(state >> 56) - 128;
    return double(v % 5 == 0 ? (v > 0 ? 127 : -128) : v);
  };
  for (int64_t i = 0; i < m * k; ++i) a_values.push_back(next());
  for (int64_t i = 0; i < n * k; ++i) b_values.push_back(next());
  const Tensor a = from_values(a_values, {m, k}, DType::f64).to(DType::i8);
  const Tensor b = from_values(b_values, {n, k}, DType::f64).to(DType::i8);
  const Tensor acc = empty({m, n}, DType::i32);
  kernels(kCPU).gemm_i8(a, b, acc);
  const std::vector<int64_t> got = acc.to_host_i64();
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      int64_t expected = 0;
      for (int64_t p = 0; p < k; ++p) expected += int64_t(a_values[i * k + p]) * int64_t(b_values[j * k + p]);
      REQUIRE(got[i * n + j] == expected);
    }
  }
}

TEST_CASE("quantized_linear is the f32 product of the dequantized operands", "[quantize]") {
  manual_seed(2);
  const Tensor x = uniform({2, 5, 24}, -1, 1), w = uniform({9, 24}, -0.5, 0.5), bias = uniform({9}, -1, 1);
  const QuantizedRows weight = quantize_rows(w);
  for (double input_scale : {0.0, 0.01}) {
    INFO("input scale " << input_scale);
    const Tensor y = quantized_linear(x, weight, bias, input_scale);
    REQUIRE(y.shape() == Shape{2, 5, 9});
    // reference: both operands quantized and dequantized, then an f64 product; x on the levels
    // the device asks for (63 on the CPU's AVX2 path, a static scale stretched to match)
    const Tensor x_rows = x.reshape({10, 24});
    const int levels = kernels(kCPU).int8_activation_levels();
    const double x_scale = levels == 127 ? input_scale : input_scale * 127 / levels;
    const QuantizedRows x_q = quantize_rows(x_rows, x_scale, levels);
    const Tensor x_back = dequantize_rows(x_q).to(DType::f64);
    const Tensor expected = matmul(x_back, dequantize_rows(weight).to(DType::f64).transpose(0, 1)) +
                            bias.to(DType::f64);
    const std::vector<double> got = y.to_host_f64(), want = expected.to_host_f64();
    for (size_t e = 0; e < got.size(); ++e) REQUIRE(got[e] == Approx(want[e]).margin(1e-5));
    // and close to the f32 layer it stands for: within a few quantization steps
    const std::vector<double> exact = (matmul(x_rows, w.transpose(0, 1)) + bias).to_host_f64();
    for (size_t e = 0; e < got.size(); ++e) REQUIRE(got[e] == Approx(exact[e]).margin(0.05));
  }
}

TEST_CASE("quantize_weight: on the levels the device's product asks for, by hand", "[quantize]") {
  // rows: max 2 and max 0.5. On 127 levels: scale 2/127, 0.75 -> 47.625 -> 48; on 63 (the CPU's
  // AVX2 path, 7-bit weights): scale 2/63, 0.75 -> 23.625 -> 24, -2 -> -63, 0.25 -> 7.875 -> 8
  const Tensor w = from_values({0.75, -2, 0.25, 0.5, -0.125, 0}, {2, 3});
  const int levels = kernels(kCPU).int8_weight_levels();
  REQUIRE((levels == 127 || levels == 63));
  const QuantizedRows q = quantize_weight(w);
  REQUIRE(q.scales.to_host_f64() ==
          std::vector<double>{double(2.0f / float(levels)), double(0.5f / float(levels))});
  if (levels == 63) {
    REQUIRE(q.values.to_host_i64() == std::vector<int64_t>{24, -63, 8, 63, -16, 0});
  } else {
    REQUIRE(q.values.to_host_i64() == std::vector<int64_t>{48, -127, 16, 127, -32, 0});
  }
  REQUIRE_THROWS_AS(quantize_weight(Tensor()), Error);
}

TEST_CASE("quantized_linear with no input features is the bias in every row", "[quantize]") {
  const Tensor bias = full({3}, 0.25);  // in = 0: every product is an empty sum
  for (double input_scale : {0.0, 0.01}) {
    const Tensor y = quantized_linear(zeros({2, 4, 0}), quantize_rows(zeros({3, 0})), bias, input_scale);
    REQUIRE(y.shape() == Shape{2, 4, 3});
    REQUIRE(y.to_host_f64() == std::vector<double>(24, 0.25));
  }
  REQUIRE(quantized_linear(zeros({0, 5}), quantize_rows(zeros({3, 5})), bias, 0).shape() == Shape{0, 3});
}

TEST_CASE("quantized ops refuse a gradient, bad shapes and bad scales", "[quantize]") {
  const Tensor leaf = zeros({2, 4}).requires_grad_();
  REQUIRE_THROWS_AS(quantize_rows(leaf), Error);
  {
    NoGrad no_grad;  // inference: fine
    REQUIRE_NOTHROW(quantize_rows(leaf));
  }
  const QuantizedRows weight = quantize_rows(zeros({3, 4}));
  REQUIRE(weight.scales.to_host_f64() == std::vector<double>{1, 1, 1});  // zero rows
  REQUIRE_THROWS_AS(quantized_linear(leaf, weight, Tensor()), Error);
  REQUIRE_THROWS_AS(quantized_linear(zeros({2, 5}), weight, Tensor()), Error);
  REQUIRE_THROWS_AS(quantized_linear(zeros({2, 4}), weight, zeros({4})), Error);
  REQUIRE_THROWS_AS(quantize_rows(zeros({2, 4}), -1.0), Error);
  REQUIRE_THROWS_AS(quantize_rows(zeros({2, 4}), std::numeric_limits<double>::infinity()), Error);
  REQUIRE_THROWS_AS(quantize_rows(zeros({8}), 0.0), Error);
  REQUIRE_THROWS_AS(quantize_rows(from_indices({1, 2}, {1, 2})), Error);  // not floating
}
