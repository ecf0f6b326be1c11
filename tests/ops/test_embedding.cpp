// embedding: row lookup of any index shape, repeated indices accumulate, range errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/ops/ops.h"
#include "tests/support/thread_counts.h"

using namespace tg;

TEST_CASE("embedding looks up rows for indices of any shape", "[embedding]") {
  const Tensor weight = from_values({0, 1, 2, 3, 4, 5, 6, 7}, {4, 2});
  const Tensor out = embedding(from_indices({1, 3, 1, 0}, {2, 2}), weight);
  REQUIRE(out.shape() == Shape{2, 2, 2});
  REQUIRE(out.to_host_f64() == std::vector<double>{2, 3, 6, 7, 2, 3, 0, 1});
  REQUIRE(embedding(from_indices({2}, {}), weight).shape() == Shape{2});
}

TEST_CASE("embedding gradient: repeated indices add up", "[embedding]") {
  Tensor weight = from_values({0, 1, 2, 3, 4, 5, 6, 7}, {4, 2}).requires_grad_();
  const Tensor out = embedding(from_indices({1, 3, 1, 0, 1}, {5}), weight);
  sum(out * from_values({1, 10}, {2})).backward();
  // row 1 taken three times, rows 0 and 3 once, row 2 never
  REQUIRE(weight.grad().to_host_f64() == std::vector<double>{1, 10, 3, 30, 0, 0, 1, 10});
}

TEST_CASE("embedding rows of width 0: empty rows forward, an empty gradient back", "[embedding]") {
  Tensor weight = zeros({4, 0}).requires_grad_();
  const Tensor out = embedding(from_indices({1, 3, 0}, {3}), weight);
  REQUIRE(out.shape() == Shape{3, 0});
  sum(out).backward();
  REQUIRE(weight.grad().shape() == Shape{4, 0});
}

TEST_CASE("embedding forward and backward at any thread count, indices repeated", "[embedding]") {
  // 900 lookups of width 100 (360 KB each way: the rows and the table's columns are split among
  // the threads) into a 50-row table, every row used many times; against loops over the indices.
  const int64_t rows = 50, width = 100, count = 900;
  std::vector<double> table(rows * width), upstream(count * width);
  for (size_t e = 0; e < table.size(); ++e) table[e] = static_cast<float>(std::sin(0.7 * static_cast<double>(e)));
  for (size_t e = 0; e < upstream.size(); ++e) upstream[e] = static_cast<float>(std::cos(0.3 * static_cast<double>(e)));
  std::vector<int64_t> picked(count);
  for (int64_t r = 0; r < count; ++r) picked[r] = (r * 7 + r / 3) % rows;
  std::vector<double> looked_up, grad(rows * width, 0.0);
  for (int64_t r = 0; r < count; ++r) {
    for (int64_t k = 0; k < width; ++k) looked_up.push_back(table[picked[r] * width + k]);
  }
  for (int64_t k = 0; k < width; ++k) {  // each entry's f32 sum, in index order
    for (int64_t row = 0; row < rows; ++row) {
      float total = 0;
      for (int64_t r = 0; r < count; ++r) {
        if (picked[r] == row) total += static_cast<float>(upstream[r * width + k]);
      }
      grad[row * width + k] = total;
    }
  }
  tg::testing::at_thread_counts([&] {
    Tensor weight = from_values(table, {rows, width}).requires_grad_();
    const Tensor out = embedding(from_indices(picked, {count}), weight);
    REQUIRE(out.to_host_f64() == looked_up);
    out.backward(from_values(upstream, {count, width}));
    REQUIRE(weight.grad().to_host_f64() == grad);
  });
}

TEST_CASE("embedding checks dtypes and index range", "[embedding]") {
  const Tensor weight = zeros({4, 2});
  REQUIRE_THROWS_AS(embedding(from_indices({0, 4}, {2}), weight), tg::Error);
  REQUIRE_THROWS_AS(embedding(from_indices({-1}, {1}), weight), tg::Error);
  REQUIRE_THROWS_AS(embedding(from_values({0, 1}, {2}), weight), tg::Error);   // f32 indices
  REQUIRE_THROWS_AS(embedding(from_indices({0}, {1}), zeros({4})), tg::Error);  // 1-D weight
  try {
    embedding(from_indices({0, 2, 7}, {3}), weight);
  } catch (const tg::Error& e) {
    REQUIRE(std::string(e.what()).find("index 7") != std::string::npos);
  }
}
