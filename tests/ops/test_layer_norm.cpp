// layer_norm: hand-computed values, affine part, two normalised dims, gradients, errors.
#include <catch2/catch.hpp>

#include <cmath>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/ops/ops.h"

using namespace tg;

TEST_CASE("layer_norm of (1, 2, 3) by hand", "[layer_norm]") {
  // mean 2, biased variance 2/3: xhat = (x - 2) / sqrt(2/3 + eps) = [-1.2247, 0, 1.2247]
  const double rstd = 1.0 / std::sqrt(2.0 / 3.0 + 1e-5);
  const auto y = layer_norm(from_values({1, 2, 3}, {1, 3}, DType::f64), {3}).to_host_f64();
  REQUIRE(y[0] == Approx(-rstd));
  REQUIRE(y[1] == Approx(0).margin(1e-12));
  REQUIRE(y[2] == Approx(rstd));
  const Tensor w = from_values({2, 2, 2}, {3}, DType::f64), b = from_values({1, 1, 1}, {3}, DType::f64);
  const auto affine = layer_norm(from_values({1, 2, 3}, {1, 3}, DType::f64), {3}, w, b).to_host_f64();
  REQUIRE(affine[0] == Approx(1 - 2 * rstd));
  REQUIRE(affine[2] == Approx(1 + 2 * rstd));
}

TEST_CASE("layer_norm over the last two dims normalises each item as a whole", "[layer_norm]") {
  const Tensor x = from_values({1, 2, 3, 4, 10, 20, 30, 40}, {2, 2, 2}, DType::f64);
  const Tensor y = layer_norm(x, {2, 2}, Tensor(), Tensor(), 0.0);
  REQUIRE(y.shape() == Shape{2, 2, 2});
  const auto v = y.to_host_f64();
  for (int item = 0; item < 2; ++item) {
    double total = 0, squares = 0;
    for (int k = 0; k < 4; ++k) total += v[item * 4 + k], squares += v[item * 4 + k] * v[item * 4 + k];
    REQUIRE(total == Approx(0).margin(1e-12));
    REQUIRE(squares / 4 == Approx(1));
  }
  REQUIRE(v[0] == Approx(v[4]));  // scale invariant
}

TEST_CASE("layer_norm gradients of sum(y): dx = 0, dw = xhat, db = 1", "[layer_norm]") {
  Tensor x = from_values({1, 2, 3, 0, 5, 1}, {2, 3}, DType::f64).requires_grad_();
  Tensor w = from_values({1, 2, 3}, {3}, DType::f64).requires_grad_();
  Tensor b = from_values({0, 0, 0}, {3}, DType::f64).requires_grad_();
  sum(layer_norm(x, {3}, w, b)).backward();
  REQUIRE(b.grad().to_host_f64() == std::vector<double>{2, 2, 2});
  const auto xhat = layer_norm(x.detach(), {3}).to_host_f64();
  for (int k = 0; k < 3; ++k) REQUIRE(w.grad().to_host_f64()[k] == Approx(xhat[k] + xhat[3 + k]));
  x.zero_grad();
  sum(layer_norm(x, {3})).backward();  // sum of xhat is always 0, so its gradient is 0
  for (double g : x.grad().to_host_f64()) REQUIRE(g == Approx(0).margin(1e-9));
}

TEST_CASE("layer_norm is one tape node", "[layer_norm]") {
  clear_tape();
  Tensor x = zeros({2, 3}, DType::f64).requires_grad_();
  Tensor w = ones({3}, DType::f64).requires_grad_();
  Tensor y = layer_norm(x, {3}, w, zeros({3}, DType::f64));
  REQUIRE(y.grad_fn()->op == "layer_norm");
  REQUIRE(y.grad_fn()->inputs.size() == 3);
}

TEST_CASE("layer_norm checks normalized_shape and the affine shapes", "[layer_norm]") {
  const Tensor x = zeros({2, 3});
  REQUIRE_THROWS_AS(layer_norm(x, {4}), tg::Error);
  REQUIRE_THROWS_AS(layer_norm(x, {2}), tg::Error);
  REQUIRE_THROWS_AS(layer_norm(x, {}), tg::Error);
  REQUIRE_THROWS_AS(layer_norm(x, {3}, zeros({4})), tg::Error);
  REQUIRE_THROWS_AS(layer_norm(x, {3}, Tensor(), zeros({3}, DType::f64)), tg::Error);
}
