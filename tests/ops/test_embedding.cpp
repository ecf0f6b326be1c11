// embedding: row lookup of any index shape, repeated indices accumulate, range errors.
#include <catch2/catch.hpp>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/ops/ops.h"

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
