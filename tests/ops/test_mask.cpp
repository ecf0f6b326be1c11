// where and masked_fill: values, gradients routed by the mask, broadcasting, errors.
#include <catch2/catch.hpp>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/ops/ops.h"

using namespace tg;

TEST_CASE("where picks a or b and routes the gradient the same way", "[mask]") {
  const Tensor condition = from_bools({true, false, true}, {3});  // broadcast over rows
  Tensor a = from_values({1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad_();
  Tensor b = from_values({9}, {1}).requires_grad_();  // broadcast everywhere
  Tensor out = where(condition, a, b);
  REQUIRE(out.shape() == Shape{2, 3});
  REQUIRE(out.to_host_f64() == std::vector<double>{1, 9, 3, 4, 9, 6});
  sum(out).backward();
  REQUIRE(a.grad().to_host_f64() == std::vector<double>{1, 0, 1, 1, 0, 1});
  REQUIRE(b.grad().to_host_f64() == std::vector<double>{2});  // taken at two places
}

TEST_CASE("where broadcasts the condition up too", "[mask]") {
  const Tensor condition = from_bools({true, false}, {2, 1});
  Tensor out = where(condition, from_values({1, 2, 3}, {3}), zeros({}));
  REQUIRE(out.shape() == Shape{2, 3});
  REQUIRE(out.to_host_f64() == std::vector<double>{1, 2, 3, 0, 0, 0});
}

TEST_CASE("masked_fill fills where the mask is true; gradient flows where it is false", "[mask]") {
  Tensor x = from_values({1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad_();
  const Tensor mask = from_bools({false, true, false}, {1, 3});
  Tensor out = masked_fill(x, mask, -7);
  REQUIRE(out.shape() == Shape{2, 3});
  REQUIRE(out.to_host_f64() == std::vector<double>{1, -7, 3, 4, -7, 6});
  sum(out * 2.0).backward();
  REQUIRE(x.grad().to_host_f64() == std::vector<double>{2, 0, 2, 2, 0, 2});
}

TEST_CASE("where and masked_fill reject non-bool masks and bad shapes", "[mask]") {
  const Tensor x = zeros({2, 3});
  REQUIRE_THROWS_AS(masked_fill(x, zeros({2, 3}), 1.0), tg::Error);           // f32 mask
  REQUIRE_THROWS_AS(masked_fill(x, from_indices({0, 1, 0}, {3}), 1.0), tg::Error);  // i64 mask
  REQUIRE_THROWS_AS(where(ones({2, 3}), x, x), tg::Error);                    // f32 condition
  REQUIRE_THROWS_AS(masked_fill(x, from_bools({true, false}, {2}), 1.0), tg::Error);  // [2] vs [2, 3]
  REQUIRE_THROWS_AS(masked_fill(x, from_bools(std::vector<bool>(12, true), {2, 2, 3}), 1.0), tg::Error);
  REQUIRE_THROWS_AS(where(from_bools({true, false}, {2}), x, x), tg::Error);
  REQUIRE_THROWS_AS(where(from_bools({true}, {1}), zeros({2, 3}), zeros({4})), tg::Error);
  REQUIRE_THROWS_AS(where(from_bools({true}, {1}), zeros({3}), zeros({3}, DType::f64)), tg::Error);
  try {
    masked_fill(x, from_bools({true, false}, {2}), 1.0);
  } catch (const tg::Error& e) {
    const std::string message = e.what();
    REQUIRE(message.find("masked_fill") != std::string::npos);
    REQUIRE(message.find("[2, 3]") != std::string::npos);
  }
}

TEST_CASE("where and masked_fill take integer and bool tensors as PyTorch's do", "[mask]") {
  const Tensor condition = from_bools({true, false, true}, {3});
  const Tensor picked = where(condition, from_indices({1, 2, 3}, {3}), from_indices({-1, -2, -3}, {3}));
  REQUIRE(picked.dtype() == DType::i64);
  REQUIRE(picked.to_host_i64() == std::vector<int64_t>{1, -2, 3});
  const Tensor flags = where(condition, from_bools({false, false, false}, {3}), from_bools({true, true, true}, {3}));
  REQUIRE(flags.dtype() == DType::b8);
  REQUIRE(flags.to_host_i64() == std::vector<int64_t>{0, 1, 0});
  // a token batch with its padding replaced: i64 in, i64 out, nothing on the tape
  const Tensor tokens = from_indices({5, 0, 7, 0}, {2, 2});
  const Tensor filled = masked_fill(tokens, from_bools({false, true, false, true}, {2, 2}), 9);
  REQUIRE(filled.dtype() == DType::i64);
  REQUIRE(filled.to_host_i64() == std::vector<int64_t>{5, 9, 7, 9});
  REQUIRE_FALSE(filled.requires_grad());
  CHECK_THROWS_WITH(where(condition, from_indices({1, 2, 3}, {3}), zeros({3})),
                    Catch::Contains("op 'where'") && Catch::Contains("same dtype"));
}
