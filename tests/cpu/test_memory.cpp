// CPU copies and fills: large ones are split among the threads (cpu/memory.cpp); every thread
// count must give the bytes an element-by-element loop gives.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/tensor.h"
#include "tapegrad/ops/ops.h"
#include "tests/support/thread_counts.h"

using namespace tg;

namespace {

// A [rows, cols] f32 tensor of distinct values, and those values as doubles.
std::vector<double> distinct_values(int64_t count) {
  std::vector<double> values(count);
  for (int64_t e = 0; e < count; ++e) values[e] = static_cast<float>(std::sin(0.11 * static_cast<double>(e)) * 7.0);
  return values;
}

}  // namespace

TEST_CASE("CPU copies: contiguous, rows of a view, and a broadcast row, at any thread count", "[cpu-memory]") {
  const int64_t rows = 1500, cols = 130;  // 780 KB: past the size at which copies are split
  const std::vector<double> values = distinct_values(rows * cols);
  const Tensor x = from_values(values, {rows, cols}, DType::f32);
  tg::testing::at_thread_counts([&] {
    // contiguous -> contiguous
    REQUIRE(x.contiguous().to_host_f64() == values);
    const Tensor copied = empty({rows, cols}, DType::f32);
    kernels(kCPU).copy(x, copied);
    REQUIRE(copied.to_host_f64() == values);
    // rows of a narrowed view (last stride 1, rows 130 apart) -> a contiguous [rows, 100]
    std::vector<double> narrowed;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 20; c < 120; ++c) narrowed.push_back(values[r * cols + c]);
    }
    REQUIRE(x.narrow(1, 20, 100).contiguous().to_host_f64() == narrowed);
    // one row broadcast over 3000 rows (row stride 0), as a linear's bias
    const Tensor bias = x.narrow(0, 7, 1).squeeze(0);
    std::vector<double> repeated;
    for (int64_t r = 0; r < 3000; ++r) {
      for (int64_t c = 0; c < cols; ++c) repeated.push_back(values[7 * cols + c]);
    }
    REQUIRE(bias.expand({3000, cols}).contiguous().to_host_f64() == repeated);
  });
}

TEST_CASE("CPU fills at any thread count, and a copy within one storage keeps memmove's order", "[cpu-memory]") {
  tg::testing::at_thread_counts([&] {
    const Tensor filled = full({1000, 300}, 2.5, DType::f32);
    REQUIRE(filled.to_host_f64() == std::vector<double>(300000, 2.5));
    // Shift a 400000-element buffer by one element inside its own storage: the ranges overlap.
    const std::vector<double> values = distinct_values(400001);
    const Tensor buffer = from_values(values, {400001}, DType::f32);
    kernels(kCPU).copy(buffer.narrow(0, 0, 400000), buffer.narrow(0, 1, 400000));
    std::vector<double> expected = values;
    for (int64_t e = 400000; e >= 1; --e) expected[e] = values[e - 1];
    REQUIRE(buffer.to_host_f64() == expected);
  });
}

TEST_CASE("CPU copy of a tensor without elements does nothing, whatever its other sizes",
          "[cpu-memory]") {
  // [0, 1, 2^61] f64, not contiguous (a narrow of [0, 2, 2^61]): a row would be 2^61 x 8 bytes,
  // which overflows int64 (UBSan, in the sanitizer suite, reports the multiplication).
  const Tensor source = empty({0, 2, int64_t{1} << 61}, DType::f64).narrow(1, 0, 1);
  REQUIRE_FALSE(source.is_contiguous());
  const Tensor target = empty(source.shape(), DType::f64);
  kernels(kCPU).copy(source, target);
  REQUIRE(target.numel() == 0);
}
