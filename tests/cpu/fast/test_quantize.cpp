// The CPU int8 fast paths (cpu/fast/quantize.h) against the plain loops of cpu/quantize.cpp (run
// inside a FastPathsOff scope), bit for bit: the product in each instruction set this CPU has
// (AVX-512 VNNI, AVX2) on odd shapes (m, n, k from 1 to ~300: k not a multiple of the kernels'
// 4 or 2, n not a multiple of their 16- or 8-column panels, m not of their 6-row blocks) with the
// extremes -128 and 127 on both sides, up to the longest depth; the AVX2 path's vpmaddubsw kernel
// on 7-bit A with its saturation worst cases, and its fallback; on 7-bit A and B (two groups a
// vpmaddwd) with its i16 worst cases, and its fallback; quantize_rows (8 and 7 bits) with
// NaN, infinities, ties and zero rows; dequantize_product; quantized_linear end to end (on the AVX2
// path by hand); quantized_linear's rows quantized straight into the product's layout, against
// quantize_rows + quantized_product; TAPEGRAD_INT8_KERNEL's parsing. At 1, 2 and 3 threads.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/cpu/fast/quantize.h"
#include "tapegrad/ops/ops.h"
#include "tapegrad/runtime/features.h"
#include "tapegrad/runtime/threads.h"
#include "tests/support/thread_counts.h"
#include "tests/support/skip.h"

using namespace tg;
using tg::testing::at_thread_counts;

namespace {

// The instruction sets of the product this CPU can run.
std::vector<cpu::int8::Isa> supported_isas() {
  std::vector<cpu::int8::Isa> isas;
  for (auto isa : {cpu::int8::Isa::avx2, cpu::int8::Isa::avx512_vnni}) {
    if (cpu::int8::isa_supported(isa)) isas.push_back(isa);
  }
  return isas;
}

// i8 [rows, cols]: uniform over -128..127, with -128 and 127 a quarter of the time.
Tensor random_i8(int64_t rows, int64_t cols, std::mt19937_64& gen) {
  std::uniform_int_distribution<int> value(-128, 127), pick(0, 7);
  const Tensor t = empty({rows, cols}, DType::i8, kCPU);
  int8_t* data = t.data_as<int8_t>();
  for (int64_t i = 0; i < rows * cols; ++i) {
    const int choice = pick(gen);
    data[i] = static_cast<int8_t>(choice == 0 ? -128 : choice == 1 ? 127 : value(gen));
  }
  return t;
}

// i8 [rows, cols] of 7-bit values, uniform over -64..63 with -64 and 63 a quarter of the time:
// the AVX2 path's vpmaddubsw kernel takes these (cpu/fast/quantize_kernels.h).
Tensor random_i7(int64_t rows, int64_t cols, std::mt19937_64& gen) {
  std::uniform_int_distribution<int> value(-64, 63), pick(0, 7);
  const Tensor t = empty({rows, cols}, DType::i8, kCPU);
  int8_t* data = t.data_as<int8_t>();
  for (int64_t i = 0; i < rows * cols; ++i) {
    const int choice = pick(gen);
    data[i] = static_cast<int8_t>(choice == 0 ? -64 : choice == 1 ? 63 : value(gen));
  }
  return t;
}

Tensor filled_i8(int64_t rows, int64_t cols, int8_t v) {
  const Tensor t = empty({rows, cols}, DType::i8, kCPU);
  std::memset(t.data_as<int8_t>(), static_cast<unsigned char>(v), static_cast<size_t>(rows * cols));
  return t;
}

Tensor reference_gemm(const Tensor& a, const Tensor& b) {
  const cpu::FastPathsOff plain;
  const Tensor acc = empty({a.size(0), b.size(0)}, DType::i32, kCPU);
  kernels(kCPU).gemm_i8(a, b, acc);
  return acc;
}

bool same_bytes(const Tensor& x, const Tensor& y) {
  return x.shape() == y.shape() && x.dtype() == y.dtype() &&
         std::memcmp(x.data(), y.data(), static_cast<size_t>(x.numel() * dtype_size(x.dtype()))) == 0;
}

// Every supported kernel, and CpuKernels::gemm_i8's own choice, equal the plain loop.
void check_gemm(const Tensor& a, const Tensor& b) {
  const int64_t m = a.size(0), k = a.size(1), n = b.size(0);
  INFO("m " << m << ", n " << n << ", k " << k);
  const Tensor expected = reference_gemm(a, b);
  for (cpu::int8::Isa isa : supported_isas()) {
    INFO(cpu::int8::isa_name(isa));
    const Tensor got = empty({m, n}, DType::i32, kCPU);
    cpu::int8::gemm(a.data_as<int8_t>(), b.data_as<int8_t>(), got.data_as<int32_t>(), m, n, k, isa);
    REQUIRE(same_bytes(got, expected));
  }
  const Tensor chosen = empty({m, n}, DType::i32, kCPU);
  kernels(kCPU).gemm_i8(a, b, chosen);
  REQUIRE(same_bytes(chosen, expected));
}

// check_gemm on A [61, 299] filled with each of a_values against B [37, 299] filled with each of
// b_values (k = 299: an odd number of 4-byte groups), at every thread count, and the plain loop's
// sum against the one by hand.
void check_filled(std::initializer_list<int8_t> a_values, std::initializer_list<int8_t> b_values) {
  for (int8_t av : a_values) {
    for (int8_t bv : b_values) {
      INFO("a " << int(av) << ", b " << int(bv));
      const Tensor a = filled_i8(61, 299, av), b = filled_i8(37, 299, bv);
      at_thread_counts([&] { check_gemm(a, b); });
      REQUIRE(reference_gemm(a, b).to_host_i64()[0] == int64_t{av} * bv * 299);
    }
  }
}

// f32 [rows >= 8, cols]: random rows of scales up to 100, and rows 0..7 made awkward: zeros; a
// NaN; +inf last; -inf first; ties (x / scale at k + 1/2); all NaN; denormal; and a normal entry
// whose / 127 is denormal beside denormals.
Tensor awkward_rows(int64_t rows, int64_t cols) {
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  std::vector<double> values = (uniform({rows, cols}, -3, 3) * uniform({rows, 1}, 0, 100)).to_host_f64();
  for (int64_t c = 0; c < cols; ++c) values[c] = 0;                     // row 0: zeros
  values[cols] = nan;                                                   // row 1: a NaN
  values[2 * cols + cols - 1] = inf;                                    // row 2: +inf, last
  values[3 * cols] = -inf;                                              // row 3: -inf
  for (int64_t c = 0; c < cols; ++c) values[4 * cols + c] = 0.5 * (c % 5) - 1;  // ties
  for (int64_t c = 0; c < cols; ++c) values[5 * cols + c] = nan;        // row 5: all NaN
  for (int64_t c = 0; c < cols; ++c) values[6 * cols + c] *= 0x1p-140;  // row 6: denormal
  values[7 * cols] = 0x1p-120;  // row 7: a normal entry whose / 127 is denormal, the rest too
  for (int64_t c = 1; c < cols; ++c) values[7 * cols + c] *= 0x1p-135;
  return from_values(values, {rows, cols}, DType::f32, kCPU);
}

}  // namespace

TEST_CASE("int8 gemm fast paths equal the plain loop on odd shapes", "[quantize][int8_gemm]") {
  std::mt19937_64 gen(7);
  std::vector<std::array<int64_t, 3>> shapes = {  // m, n, k
      {1, 1, 1},   {1, 1, 3},    {2, 3, 5},     {6, 16, 4},   {7, 17, 9},    {5, 15, 63},
      {13, 33, 65}, {48, 64, 64}, {49, 65, 257}, {16, 4, 256}, {97, 256, 256}, {300, 100, 1},
      {1, 300, 299}, {50, 129, 130}};
  std::uniform_int_distribution<int64_t> size(1, 300);
  for (int i = 0; i < 12; ++i) shapes.push_back({size(gen), size(gen), size(gen)});
  for (const auto& [m, n, k] : shapes) {
    const Tensor a = random_i8(m, k, gen), b = random_i8(n, k, gen);
    at_thread_counts([&] { check_gemm(a, b); });
  }
}

// Each instruction set's kernels by name, on a CPU that has it (the cases above run every one
// this CPU has, so a CPU without VNNI reports the VNNI case skipped rather than passing without
// it): full-range A (AVX2: the widening kernel), 7-bit A (AVX2: vpmaddubsw), 7-bit A and B (AVX2:
// two groups a vpmaddwd), and the choice CpuKernels makes when the path is forced to this one.
void check_isa_explicitly(cpu::int8::Isa isa, cpu::int8::Path path) {
  std::mt19937_64 gen(31);
  const cpu::int8::PathScope forced(path);
  for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3>>{
           {1, 1, 1}, {7, 17, 9}, {13, 33, 65}, {61, 37, 299}, {97, 256, 256}}) {
    INFO("m " << m << ", n " << n << ", k " << k);
    for (const auto& [a, b] : {std::pair{random_i8(m, k, gen), random_i8(n, k, gen)},
                               std::pair{random_i7(m, k, gen), random_i8(n, k, gen)},
                               std::pair{random_i7(m, k, gen), random_i7(n, k, gen)}}) {
      const Tensor expected = reference_gemm(a, b);
      const Tensor got = empty({m, n}, DType::i32, kCPU), chosen = empty({m, n}, DType::i32, kCPU);
      cpu::int8::gemm(a.data_as<int8_t>(), b.data_as<int8_t>(), got.data_as<int32_t>(), m, n, k, isa);
      REQUIRE(same_bytes(got, expected));
      kernels(kCPU).gemm_i8(a, b, chosen);
      REQUIRE(same_bytes(chosen, expected));
    }
  }
}

TEST_CASE("int8 gemm on AVX2, by name and forced: the plain loop's bits", "[quantize][int8_gemm]") {
  if (tg::testing::skip_unless(cpu::int8::isa_supported(cpu::int8::Isa::avx2),
                               "this CPU has no AVX2 + FMA")) {
    return;
  }
  check_isa_explicitly(cpu::int8::Isa::avx2, cpu::int8::Path::avx2);
}

TEST_CASE("int8 gemm on AVX-512 VNNI, by name and forced: the plain loop's bits",
          "[quantize][int8_gemm]") {
  if (tg::testing::skip_unless(cpu::int8::isa_supported(cpu::int8::Isa::avx512_vnni),
                               "this CPU has no AVX-512 VNNI")) {
    return;
  }
  check_isa_explicitly(cpu::int8::Isa::avx512_vnni, cpu::int8::Path::avx512_vnni);
}

TEST_CASE("int8 gemm fast paths on 7-bit activations (AVX2 vpmaddubsw) equal the plain loop",
          "[quantize][int8_gemm]") {
  std::mt19937_64 gen(8);
  std::vector<std::array<int64_t, 3>> shapes = {  // m, n, k: blocks of 5 rows, 16 columns, 4 p
      {1, 1, 1},  {1, 1, 3},   {2, 3, 5},    {5, 16, 4},    {6, 17, 9},   {11, 15, 63},
      {60, 64, 64}, {61, 65, 257}, {16, 4, 256}, {97, 256, 256}, {300, 100, 1}, {1, 300, 299}};
  std::uniform_int_distribution<int64_t> size(1, 300);
  for (int i = 0; i < 12; ++i) shapes.push_back({size(gen), size(gen), size(gen)});
  for (const auto& [m, n, k] : shapes) {
    const Tensor a = random_i7(m, k, gen), b = random_i8(n, k, gen);
    at_thread_counts([&] { check_gemm(a, b); });
  }
}

TEST_CASE("int8 gemm, 7-bit kernel: vpmaddubsw's worst cases do not saturate",
          "[quantize][int8_gemm]") {
  // a + 64 = 127 against b = -128 on both bytes of a pair: 127 (-128) 2 = -32512, the i16
  // sums' extreme (|.| <= 32767); a = -64 (a + 64 = 0) against both extremes of b. And one value
  // just outside 7 bits (64, -65) in a long A: the product must fall back, still exact.
  check_filled({63, -64}, {-128, 127});
  std::mt19937_64 gen(9);
  for (int8_t outside : {int8_t{64}, int8_t{-65}}) {
    INFO("one A value " << int(outside));
    const Tensor a = random_i7(23, 131, gen), b = random_i8(19, 131, gen);
    a.data_as<int8_t>()[22 * 131 + 130] = outside;  // the very last
    check_gemm(a, b);
  }
}

TEST_CASE("int8 gemm on 7-bit activations and 7-bit weights (two groups a vpmaddwd) equals the "
          "plain loop", "[quantize][int8_gemm]") {
  std::mt19937_64 gen(10);
  std::vector<std::array<int64_t, 3>> shapes = {  // m, n, k: blocks of 4 rows, 16 columns, 8 p
      {1, 1, 1},   {1, 1, 4},    {2, 3, 5},     {4, 16, 8},   {5, 17, 12},  {3, 9, 13},
      {7, 15, 63}, {60, 64, 64}, {61, 65, 257}, {16, 4, 256}, {97, 256, 128}, {1, 300, 299}};
  std::uniform_int_distribution<int64_t> size(1, 300);
  for (int i = 0; i < 12; ++i) shapes.push_back({size(gen), size(gen), size(gen)});
  for (const auto& [m, n, k] : shapes) {
    const Tensor a = random_i7(m, k, gen), b = random_i7(n, k, gen);
    at_thread_counts([&] { check_gemm(a, b); });
  }
}

TEST_CASE("int8 gemm, 7-bit weights: the i16 sum of two groups does not overflow, and an 8-bit "
          "weight falls back", "[quantize][int8_gemm]") {
  // a + 64 = 127 against b = -64 on all eight bytes of two groups: 127 (-64) 8 = -65024 in i32,
  // -32512 in each i16 sum of two pairs (|.| <= 32767); and 63, 0 on the other side. k = 299:
  // an odd number of groups, the last one alone. Then one weight outside 7 bits (64 or -65): that
  // B takes the one-group kernel, still exact.
  check_filled({63, -64}, {-64, 63});
  std::mt19937_64 gen(11);
  for (int8_t outside : {int8_t{64}, int8_t{-65}}) {
    INFO("one B value " << int(outside));
    const Tensor a = random_i7(23, 131, gen), b = random_i7(19, 131, gen);
    b.data_as<int8_t>()[18 * 131 + 130] = outside;  // the very last
    check_gemm(a, b);
  }
}

TEST_CASE("int8 gemm fast paths: the extremes on both sides", "[quantize][int8_gemm]") {
  for (int8_t av : {int8_t{-128}, int8_t{127}}) {
    for (int8_t bv : {int8_t{-128}, int8_t{127}}) {
      INFO("a " << int(av) << ", b " << int(bv));
      at_thread_counts([&] { check_gemm(filled_i8(61, 299, av), filled_i8(37, 299, bv)); });
    }
  }
}

TEST_CASE("int8 gemm fast paths are exact at the longest depth", "[quantize][int8_gemm]") {
  // k 127^2 is just under 2^31; the VNNI kernel's sums of (a + 128) b wrap around i32 on the way,
  // and the correction must bring them back exactly.
  const int64_t k = kMaxInt8Depth;
  for (int8_t av : {int8_t{127}, int8_t{-127}}) {
    INFO("a " << int(av));
    const Tensor a = filled_i8(2, k, av), b = filled_i8(3, k, 127);
    check_gemm(a, b);
    REQUIRE(reference_gemm(a, b).to_host_i64()[0] == int64_t{av} * 127 * k);
  }
  // 7-bit A (the vpmaddubsw kernel): its sums of (a + 64) b wrap too (127 128 k > 2^31); with
  // 7-bit B as well, two groups a vpmaddwd
  for (const auto& [av, bv] : {std::pair<int8_t, int8_t>{63, -128}, {-64, 127}, {63, 127},
                               {63, -64}, {-64, 63}, {63, 63}}) {
    INFO("a " << int(av) << ", b " << int(bv));
    const Tensor a = filled_i8(2, k, av), b = filled_i8(3, k, bv);
    check_gemm(a, b);
    REQUIRE(reference_gemm(a, b).to_host_i64()[0] == int64_t{av} * bv * k);
  }
}

TEST_CASE("int8 gemm: FastPathsOff runs the plain loop", "[quantize][int8_gemm]") {
  // Off is the reference by construction; on, the same bits (checked above). Here: an empty
  // product and a scope's effect on the choice.
  const Tensor a = empty({0, 5}, DType::i8, kCPU), b = filled_i8(3, 5, 1);
  const Tensor acc = empty({0, 3}, DType::i32, kCPU);
  kernels(kCPU).gemm_i8(a, b, acc);  // nothing to do, nothing touched
  {
    const cpu::FastPathsOff plain;
    REQUIRE_FALSE(cpu::fast_paths_enabled());
  }
  const Tensor ones = filled_i8(4, 0, 0), zero_depth = empty({4, 3}, DType::i32, kCPU);
  kernels(kCPU).gemm_i8(ones, empty({3, 0}, DType::i8, kCPU), zero_depth);  // k = 0: all zeros
  REQUIRE(zero_depth.to_host_i64() == std::vector<int64_t>(12, 0));
}

TEST_CASE("quantize_rows fast path equals the plain loop bit for bit", "[quantize][int8_gemm]") {
  manual_seed(11);
  for (int64_t cols : {1, 7, 8, 31, 32, 33, 64, 100, 257}) {
    INFO("cols " << cols);
    const Tensor x = awkward_rows(9, cols);
    for (double fixed : {0.0, 0.5, 0.01, 1e-50, 1e30}) {
      INFO("fixed scale " << fixed);
      QuantizedRows expected;
      {
        const cpu::FastPathsOff plain;
        expected = quantize_rows(x, fixed);
      }
      at_thread_counts([&] {
        const QuantizedRows got = quantize_rows(x, fixed);
        REQUIRE(same_bytes(got.values, expected.values));
        REQUIRE(same_bytes(got.scales, expected.scales));
      });
    }
  }
}

TEST_CASE("dequantize_product and quantized_linear fast paths equal the plain loops",
          "[quantize][int8_gemm]") {
  manual_seed(12);
  for (int64_t n : {1, 4, 7, 8, 9, 33, 256}) {
    for (bool with_bias : {false, true}) {
      INFO("n " << n << (with_bias ? ", bias" : ""));
      const Tensor x = uniform({3, 37, 45}, -2, 2);
      const QuantizedRows weight = quantize_rows(uniform({n, 45}, -0.5, 0.5));
      const Tensor bias = with_bias ? uniform({n}, -1, 1) : Tensor();
      for (double input_scale : {0.0, 0.02}) {
        Tensor expected;
        {
          const cpu::FastPathsOff plain;
          expected = quantized_linear(x, weight, bias, input_scale);
        }
        at_thread_counts([&] { REQUIRE(same_bytes(quantized_linear(x, weight, bias, input_scale), expected)); });
      }
      // the rescale alone, on large sums and scales
      std::mt19937_64 gen(n);
      std::uniform_int_distribution<int32_t> sum(-2'000'000'000, 2'000'000'000);
      const Tensor acc = empty({11, n}, DType::i32, kCPU);
      for (int64_t i = 0; i < 11 * n; ++i) acc.data_as<int32_t>()[i] = sum(gen);
      const Tensor rows = uniform({11}, 0, 1e-3), cols = uniform({n}, 0, 1e-2);
      Tensor expected = empty({11, n}, DType::f32, kCPU);
      {
        const cpu::FastPathsOff plain;
        kernels(kCPU).dequantize_product(acc, rows, cols, bias, expected);
      }
      at_thread_counts([&] {
        const Tensor got = empty({11, n}, DType::f32, kCPU);
        kernels(kCPU).dequantize_product(acc, rows, cols, bias, got);
        REQUIRE(same_bytes(got, expected));
      });
    }
  }
}

TEST_CASE("quantize_rows on 63 levels: the fast path equals the plain loop",
          "[quantize][int8_gemm]") {
  manual_seed(13);
  for (int64_t cols : {1, 8, 31, 32, 33, 257}) {
    INFO("cols " << cols);
    std::vector<double> values =
        (uniform({5, cols}, -3, 3) * uniform({5, 1}, 0, 100)).to_host_f64();
    values[cols] = std::nan("");
    values[2 * cols] = std::numeric_limits<double>::infinity();
    for (int64_t c = 0; c < cols; ++c) values[3 * cols + c] = 0.5 * (c % 5) - 1;  // ties
    const Tensor x = from_values(values, {5, cols}, DType::f32, kCPU);
    for (double fixed : {0.0, 0.01}) {
      QuantizedRows expected;
      {
        const cpu::FastPathsOff plain;
        expected = quantize_rows(x, fixed, 63);
      }
      const std::vector<int64_t> q = expected.values.to_host_i64();
      REQUIRE(*std::max_element(q.begin(), q.end()) <= 63);
      REQUIRE(*std::min_element(q.begin(), q.end()) >= -63);
      at_thread_counts([&] {
        const QuantizedRows got = quantize_rows(x, fixed, 63);
        REQUIRE(same_bytes(got.values, expected.values));
        REQUIRE(same_bytes(got.scales, expected.scales));
      });
    }
  }
}

TEST_CASE("int8 path: TAPEGRAD_INT8_KERNEL's values, and bad ones named", "[quantize][int8_gemm]") {
  using cpu::int8::Path;
  REQUIRE(cpu::int8::parse_path("plain") == Path::plain);
  const Path best = cpu::int8::parse_path(nullptr);
  REQUIRE(cpu::int8::parse_path("") == best);
  if (cpu::cpu_has_avx2_fma()) {
    REQUIRE(cpu::int8::parse_path("avx2") == Path::avx2);
    REQUIRE(best == (cpu::cpu_has_avx512_vnni() ? Path::avx512_vnni : Path::avx2));
  }
  if (cpu::cpu_has_avx512_vnni()) REQUIRE(cpu::int8::parse_path("vnni") == Path::avx512_vnni);
  for (const char* bad : {"AVX2", "avx512", "fast", " avx2"}) {
    INFO(bad);
    REQUIRE_THROWS_WITH(cpu::int8::parse_path(bad),
                        Catch::Contains("TAPEGRAD_INT8_KERNEL") &&
                            Catch::Contains("avx2, vnni or plain"));
  }
  {
    const cpu::int8::PathScope plain(Path::plain);
    REQUIRE(cpu::int8::selected_path() == Path::plain);
    REQUIRE(kernels(kCPU).int8_activation_levels() == 127);
    REQUIRE(kernels(kCPU).int8_weight_levels() == 127);
  }
  if (cpu::cpu_has_avx2_fma()) {
    const cpu::int8::PathScope avx2(Path::avx2);
    REQUIRE(kernels(kCPU).int8_activation_levels() == 63);
    REQUIRE(kernels(kCPU).int8_weight_levels() == 63);
  }
  if (cpu::cpu_has_avx512_vnni()) {
    const cpu::int8::PathScope vnni(Path::avx512_vnni);
    REQUIRE(kernels(kCPU).int8_activation_levels() == 127);
    REQUIRE(kernels(kCPU).int8_weight_levels() == 127);
  }
}

TEST_CASE("quantized_linear on the AVX2 path: 7-bit activations, by hand and as the plain loops",
          "[quantize][int8_gemm]") {
  if (tg::testing::skip_unless(cpu::cpu_has_avx2_fma(), "this CPU has no AVX2 + FMA")) return;
  const cpu::int8::PathScope avx2(cpu::int8::Path::avx2);
  manual_seed(14);
  const Tensor x = uniform({3, 7, 45}, -2, 2), bias = uniform({33}, -1, 1);
  const QuantizedRows weight = quantize_rows(uniform({33, 45}, -0.5, 0.5));
  for (double input_scale : {0.0, 0.02}) {
    INFO("input scale " << input_scale);
    // by hand: x on 63 levels (a static scale doubled to 0.02 127 / 63), the i32 sums in a
    // 64-bit loop, then (acc s_r) s_c + b in f32
    const QuantizedRows q = quantize_rows(x.reshape({21, 45}), input_scale * 127 / 63, 63);
    const std::vector<int64_t> qx = q.values.to_host_i64(), qw = weight.values.to_host_i64();
    const std::vector<double> sx = q.scales.to_host_f64(), sw = weight.scales.to_host_f64();
    const std::vector<double> b = bias.to_host_f64();
    std::vector<double> want(21 * 33);
    for (int64_t i = 0; i < 21; ++i) {
      for (int64_t j = 0; j < 33; ++j) {
        int64_t sum = 0;
        for (int64_t p = 0; p < 45; ++p) sum += qx[i * 45 + p] * qw[j * 45 + p];
        const float scaled =
            (static_cast<float>(sum) * static_cast<float>(sx[i])) * static_cast<float>(sw[j]);
        want[i * 33 + j] = scaled + static_cast<float>(b[j]);
      }
    }
    at_thread_counts([&] {
      REQUIRE(quantized_linear(x, weight, bias, input_scale).to_host_f64() == want);
    });
    const cpu::FastPathsOff plain;  // the plain loops stand in with the same numbers
    REQUIRE(quantized_linear(x, weight, bias, input_scale).to_host_f64() == want);
  }
}

TEST_CASE("quantized_product (the product and rescale fused) equals gemm_i8 + dequantize_product",
          "[quantize][int8_gemm]") {
  std::mt19937_64 gen(15);
  manual_seed(15);
  for (const auto& shape : std::vector<std::array<int64_t, 3>>{
           {1, 1, 1}, {7, 9, 5}, {61, 33, 65}, {130, 17, 257}, {241, 256, 128}}) {
    const int64_t m = shape[0], n = shape[1], k = shape[2];  // (a lambda below captures them)
    for (bool seven_bits : {true, false}) {
      INFO("m " << m << ", n " << n << ", k " << k
                << (seven_bits ? ", 7-bit a" : ", full-range a"));
      const Tensor a = seven_bits ? random_i7(m, k, gen) : random_i8(m, k, gen);
      const Tensor b = random_i8(n, k, gen);
      const Tensor rows = uniform({m}, 0, 1e-2), cols = uniform({n}, 0, 1e-2);
      const Tensor bias = uniform({n}, -1, 1);
      for (const Tensor& shift : {bias, Tensor()}) {
        Tensor expected = empty({m, n}, DType::f32, kCPU);
        {
          const cpu::FastPathsOff plain;
          const Tensor acc = empty({m, n}, DType::i32, kCPU);
          kernels(kCPU).gemm_i8(a, b, acc);
          kernels(kCPU).dequantize_product(acc, rows, cols, shift, expected);
        }
        for (cpu::int8::Isa isa : supported_isas()) {
          INFO(cpu::int8::isa_name(isa));
          at_thread_counts([&] {
            const Tensor got = empty({m, n}, DType::f32, kCPU);
            cpu::int8::quantized_product(a.data_as<int8_t>(), b.data_as<int8_t>(), m, n, k, isa,
                                         rows.data_as<float>(), cols.data_as<float>(),
                                         shift.defined() ? shift.data_as<float>() : nullptr,
                                         got.data_as<float>());
            REQUIRE(same_bytes(got, expected));
          });
        }
        const Tensor chosen = empty({m, n}, DType::f32, kCPU);
        kernels(kCPU).quantized_product(a, b, rows, cols, shift, chosen);
        REQUIRE(same_bytes(chosen, expected));
      }
    }
  }
}

TEST_CASE("quantized_linear (rows quantized into the product's layout) equals quantize_rows + "
          "quantized_product", "[quantize][int8_gemm]") {
  std::mt19937_64 gen(17);
  manual_seed(17);
  for (const auto& shape : std::vector<std::array<int64_t, 3>>{
           {8, 1, 1}, {9, 9, 5}, {61, 33, 65}, {130, 17, 257}, {241, 256, 128}, {64, 40, 512}}) {
    const int64_t m = shape[0], n = shape[1], k = shape[2];  // (a lambda below captures them)
    const Tensor x = awkward_rows(m, k), w = random_i8(n, k, gen);
    const Tensor cols = uniform({n}, 0, 1e-2), bias = uniform({n}, -1, 1);
    for (const auto& scale_and_levels : std::vector<std::pair<double, int>>{
             {0.0, 127}, {0.0, 63}, {0.02, 127}, {0.02, 63}, {0.0, 1}}) {
      const double fixed = scale_and_levels.first;
      const int levels = scale_and_levels.second;
      for (const Tensor& shift : {bias, Tensor()}) {
        INFO("m " << m << ", n " << n << ", k " << k << ", fixed scale " << fixed << ", levels "
                  << levels << (shift.defined() ? ", bias" : ""));
        const Tensor expected = empty({m, n}, DType::f32, kCPU);
        const Tensor expected_scales = empty({m}, DType::f32, kCPU);
        {  // the plain loops, through the i8 rows
          const cpu::FastPathsOff plain;
          const Tensor q = empty({m, k}, DType::i8, kCPU);
          kernels(kCPU).quantize_rows(x, fixed, levels, q, expected_scales);
          kernels(kCPU).quantized_product(q, w, expected_scales, cols, shift, expected);
        }
        for (cpu::int8::Isa isa : supported_isas()) {
          if (!cpu::int8::quantized_linear_takes(isa, levels)) continue;
          INFO(cpu::int8::isa_name(isa));
          at_thread_counts([&] {
            const Tensor got = empty({m, n}, DType::f32, kCPU);
            const Tensor scales = empty({m}, DType::f32, kCPU);
            cpu::int8::quantized_linear(x.data_as<float>(), w.data_as<int8_t>(), m, n, k, isa, fixed,
                                        levels, cols.data_as<float>(),
                                        shift.defined() ? shift.data_as<float>() : nullptr,
                                        scales.data_as<float>(), got.data_as<float>());
            REQUIRE(same_bytes(got, expected));
            REQUIRE(same_bytes(scales, expected_scales));
          });
        }
        const Tensor chosen = empty({m, n}, DType::f32, kCPU);  // CpuKernels' choice, or its fallback
        kernels(kCPU).quantized_linear(x, fixed, levels, w, cols, shift, chosen);
        REQUIRE(same_bytes(chosen, expected));
      }
    }
  }
  // The AVX2 kernel cannot take 8-bit activations: asked anyway, it refuses by name.
  if (cpu::int8::isa_supported(cpu::int8::Isa::avx2)) {
    const Tensor x = uniform({2, 4}, -1, 1), w = random_i8(3, 4, gen), cols = uniform({3}, 0, 1);
    const Tensor out = empty({2, 3}, DType::f32, kCPU), scales = empty({2}, DType::f32, kCPU);
    REQUIRE_THROWS_WITH(
        cpu::int8::quantized_linear(x.data_as<float>(), w.data_as<int8_t>(), 2, 3, 4, cpu::int8::Isa::avx2,
                                    0, 127, cols.data_as<float>(), nullptr, scales.data_as<float>(),
                                    out.data_as<float>()),
        Catch::Contains("quantized_linear") && Catch::Contains("127"));
  }
}

TEST_CASE("int8 products with a large f32 output (streamed past the cache) equal the plain loops",
          "[quantize][int8_gemm]") {
  // Outputs of 4 MiB and more, in whole 64-byte lines, are written with non-temporal stores
  // (cpu/fast/quantize.cpp, streams_output): 1031 x 1024 f32 is 4.03 MiB; 1031 x 1032 is as
  // large but its rows are not whole lines, and takes the usual stores. 7-bit and 8-bit weights
  // (the two AVX2 blocks), with and without a bias, at 1, 2 and 3 threads.
  std::mt19937_64 gen(19);
  manual_seed(19);
  const int64_t m = 1031, k = 9;
  const Tensor x = awkward_rows(m, k), a = random_i7(m, k, gen);
  for (int64_t n : {int64_t{1024}, int64_t{1032}}) {
    const Tensor cols = uniform({n}, 0, 1e-2), bias = uniform({n}, -1, 1);
    const Tensor row_scales = uniform({m}, 0, 1e-2);
    for (const Tensor& w : {random_i7(n, k, gen), random_i8(n, k, gen)}) {
      for (const Tensor& shift : {bias, Tensor()}) {
        INFO("n " << n << (shift.defined() ? ", bias" : ""));
        const Tensor expected_linear = empty({m, n}, DType::f32, kCPU);
        const Tensor expected_product = empty({m, n}, DType::f32, kCPU);
        {
          const cpu::FastPathsOff plain;
          const int levels = cpu::int8::kAvx2ActivationLevels;
          kernels(kCPU).quantized_linear(x, 0, levels, w, cols, shift, expected_linear);
          kernels(kCPU).quantized_product(a, w, row_scales, cols, shift, expected_product);
        }
        const float* shift_data = shift.defined() ? shift.data_as<float>() : nullptr;
        for (cpu::int8::Isa isa : supported_isas()) {
          INFO(cpu::int8::isa_name(isa));
          at_thread_counts([&] {
            const Tensor linear = empty({m, n}, DType::f32, kCPU);
            const Tensor product = empty({m, n}, DType::f32, kCPU);
            const Tensor scales = empty({m}, DType::f32, kCPU);
            cpu::int8::quantized_linear(x.data_as<float>(), w.data_as<int8_t>(), m, n, k, isa, 0,
                                        cpu::int8::kAvx2ActivationLevels, cols.data_as<float>(),
                                        shift_data, scales.data_as<float>(),
                                        linear.data_as<float>());
            cpu::int8::quantized_product(a.data_as<int8_t>(), w.data_as<int8_t>(), m, n, k, isa,
                                         row_scales.data_as<float>(), cols.data_as<float>(),
                                         shift_data, product.data_as<float>());
            REQUIRE(same_bytes(linear, expected_linear));
            REQUIRE(same_bytes(product, expected_product));
          });
        }
      }
    }
  }
}

TEST_CASE("int8 weights stay packed between products, and are packed again after a write",
          "[quantize][int8_gemm]") {
  std::mt19937_64 gen(16);
  // The plain loop's product, and CpuKernels' (whose fast paths keep b packed by its storage).
  const auto plain_product = [](const Tensor& a, const Tensor& b) { return reference_gemm(a, b); };
  const auto chosen_product = [](const Tensor& a, const Tensor& b) {
    const Tensor acc = empty({a.size(0), b.size(0)}, DType::i32, kCPU);
    kernels(kCPU).gemm_i8(a, b, acc);
    return acc;
  };
  for (bool seven_bits : {true, false}) {
    INFO((seven_bits ? "7-bit a" : "full-range a"));
    const Tensor a = seven_bits ? random_i7(9, 37, gen) : random_i8(9, 37, gen);
    const Tensor w = random_i8(13, 37, gen);
    REQUIRE(same_bytes(chosen_product(a, w), plain_product(a, w)));
    REQUIRE(same_bytes(chosen_product(a, w), plain_product(a, w)));  // packed the first time
    w.copy_(random_i8(13, 37, gen));  // an in-place write: a new version, packed again
    REQUIRE(same_bytes(chosen_product(a, w), plain_product(a, w)));
    w.fill_(-128);
    REQUIRE(same_bytes(chosen_product(a, w), plain_product(a, w)));
    // a view into the same storage (another place in it) is another B
    const Tensor rows = w.narrow(0, 3, 5).contiguous();
    REQUIRE(same_bytes(chosen_product(a, rows), plain_product(a, rows)));
    // new weights, one after another: the allocator may give each the last one's address
    for (int i = 0; i < 5; ++i) {
      const Tensor fresh = random_i8(13, 37, gen);
      REQUIRE(same_bytes(chosen_product(a, fresh), plain_product(a, fresh)));
    }
  }
}
