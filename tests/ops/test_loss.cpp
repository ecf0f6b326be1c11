// cross_entropy, nll_loss and mse_loss: hand-computed values, ignore_index, errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/ops/ops.h"

using namespace tg;

namespace {
const double kLogSumExp123 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));  // 3.4076
}

TEST_CASE("cross_entropy of a small case by hand", "[loss]") {
  // row 0: logits [1, 2, 3], target 0 -> 3.4076 - 1; row 1: [1, 1, 1], target 1 -> log 3
  Tensor logits = from_values({1, 2, 3, 1, 1, 1}, {2, 3}, DType::f64).requires_grad_();
  Tensor loss = cross_entropy(logits, from_indices({0, 1}, {2}));
  REQUIRE(loss.shape() == Shape{});
  REQUIRE(loss.item() == Approx((kLogSumExp123 - 1.0 + std::log(3.0)) / 2));  // 1.7531091
  loss.backward();
  // d loss / d logits = (softmax - one_hot) / N
  const auto g = logits.grad().to_host_f64();
  REQUIRE(g[0] == Approx((std::exp(1.0 - kLogSumExp123) - 1) / 2));
  REQUIRE(g[2] == Approx(std::exp(3.0 - kLogSumExp123) / 2));
  REQUIRE(g[3] == Approx(1.0 / 6));
  REQUIRE(g[4] == Approx((1.0 / 3 - 1) / 2));
}

TEST_CASE("cross_entropy leaves ignored targets out of the sum and the mean", "[loss]") {
  Tensor logits = from_values({1, 2, 3, 1, 1, 1}, {2, 3}, DType::f64).requires_grad_();
  Tensor loss = cross_entropy(logits, from_indices({0, -100}, {2}));
  REQUIRE(loss.item() == Approx(kLogSumExp123 - 1.0));
  loss.backward();
  const auto g = logits.grad().to_host_f64();
  REQUIRE(g[3] == 0);
  REQUIRE(g[4] == 0);
  REQUIRE(g[5] == 0);
  // another ignore_index: row 0 ignored, row 1 ([1, 1, 1], target 2) gives log 3
  REQUIRE(cross_entropy(logits.detach(), from_indices({7, 2}, {2}), 7).item() == Approx(std::log(3.0)));
}

TEST_CASE("cross_entropy with every target ignored is 0, not NaN", "[loss]") {
  Tensor logits = from_values({1, 2, 3, 1, 1, 1}, {2, 3}, DType::f64).requires_grad_();
  Tensor loss = cross_entropy(logits, from_indices({-100, -100}, {2}));
  REQUIRE(loss.item() == 0);
  loss.backward();
  REQUIRE(logits.grad().to_host_f64() == std::vector<double>(6, 0.0));
}

TEST_CASE("cross_entropy: an ignored, fully masked row gives no NaN", "[loss]") {
  const double inf = std::numeric_limits<double>::infinity();
  Tensor logits = from_values({1, 2, 3, -inf, -inf, -inf}, {2, 3}, DType::f64).requires_grad_();
  Tensor loss = cross_entropy(logits, from_indices({2, -100}, {2}));
  REQUIRE(loss.item() == Approx(kLogSumExp123 - 3.0));
  loss.backward();
  for (double g : logits.grad().to_host_f64()) REQUIRE(std::isfinite(g));
}

TEST_CASE("cross_entropy on (B, S, C) with (B, S) targets matches the flattened (N, C)", "[loss]") {
  const Tensor logits = from_values({1, 2, 3, 1, 1, 1, 0, 5, 2, 3, 3, 0}, {2, 2, 3}, DType::f64);
  const Tensor target = from_indices({0, 1, 1, -100}, {2, 2});
  REQUIRE(cross_entropy(logits, target).item() ==
          Approx(cross_entropy(logits.reshape({4, 3}), target.reshape({4})).item()));
}

TEST_CASE("cross_entropy and nll_loss check targets", "[loss]") {
  const Tensor logits = zeros({2, 3});
  REQUIRE_THROWS_AS(cross_entropy(logits, from_indices({0, 3}, {2})), tg::Error);   // >= C
  REQUIRE_THROWS_AS(cross_entropy(logits, from_indices({-1, 0}, {2})), tg::Error);  // negative
  REQUIRE_THROWS_AS(cross_entropy(logits, from_values({0, 1}, {2})), tg::Error);    // f32 target
  REQUIRE_THROWS_AS(cross_entropy(logits, from_indices({0, 1, 2}, {3})), tg::Error);  // shape
  REQUIRE_THROWS_AS(cross_entropy(zeros({2, 2, 3}), from_indices({0, 1}, {2})), tg::Error);
  REQUIRE_THROWS_AS(nll_loss(zeros({2, 3, 1}), from_indices({0, 1}, {2})), tg::Error);
  REQUIRE_THROWS_WITH(cross_entropy(zeros({2, 0}), from_indices({0, 0}, {2})),  // no classes
                      Catch::Contains("cross_entropy") && Catch::Contains("[2, 0]"));
  try {
    cross_entropy(logits, from_indices({0, 5}, {2}));
  } catch (const tg::Error& e) {
    REQUIRE(std::string(e.what()).find("target 5") != std::string::npos);
  }
}

TEST_CASE("mse_loss by hand", "[loss]") {
  Tensor input = from_values({1, 2, 3}, {3}, DType::f64).requires_grad_();
  Tensor loss = mse_loss(input, from_values({1, 1, 1}, {3}, DType::f64));
  REQUIRE(loss.item() == Approx(5.0 / 3));
  loss.backward();
  const auto g = input.grad().to_host_f64();  // 2 (x - t) / n
  REQUIRE(g[0] == Approx(0).margin(1e-12));
  REQUIRE(g[1] == Approx(2.0 / 3));
  REQUIRE(g[2] == Approx(4.0 / 3));
}

TEST_CASE("mse_loss needs exactly matching shapes", "[loss]") {
  REQUIRE_THROWS_AS(mse_loss(zeros({2, 3}), zeros({3})), tg::Error);
  REQUIRE_THROWS_AS(mse_loss(zeros({2, 3}), zeros({3, 2})), tg::Error);
}
