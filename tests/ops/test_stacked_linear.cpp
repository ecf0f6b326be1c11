// stacked_linear against linear on the stacked weights (values and every gradient, bit for bit:
// the same GEMMs on the same operands), and its errors.
#include <catch2/catch.hpp>

#include <vector>

#include "tapegrad/autograd/rng.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/ops/ops.h"

using namespace tg;

TEST_CASE("stacked_linear: linear on the stacked weights, values and gradients equal", "[stacked_linear]") {
  manual_seed(4);
  for (bool with_bias : {true, false}) {
    INFO("bias " << with_bias);
    const Tensor x_values = randn({2, 5, 4});
    const std::vector<Tensor> weight_values = {randn({3, 4}), randn({1, 4}), randn({2, 4})};
    const std::vector<Tensor> bias_values = {randn({3}), randn({1}), randn({2})};
    const Tensor probe = randn({2, 5, 6});
    const auto leaves = [](const std::vector<Tensor>& values) {
      std::vector<Tensor> out;
      for (const Tensor& v : values) out.push_back(v.detach().contiguous().requires_grad_());
      return out;
    };
    Tensor x = x_values.detach().contiguous().requires_grad_();
    const std::vector<Tensor> weights = leaves(weight_values), biases = leaves(bias_values);
    const Tensor y = stacked_linear(x, weights, with_bias ? biases : std::vector<Tensor>{});
    sum(y * probe).backward();

    Tensor x_ref = x_values.detach().contiguous().requires_grad_();
    const std::vector<Tensor> weights_ref = leaves(weight_values), biases_ref = leaves(bias_values);
    const Tensor y_ref = linear(x_ref, cat(weights_ref, 0), with_bias ? cat(biases_ref, 0) : Tensor());
    sum(y_ref * probe).backward();

    // The same GEMMs on the same operands: equal bits
    REQUIRE(y.shape() == Shape{2, 5, 6});
    REQUIRE(y.to_host_f64() == y_ref.to_host_f64());
    REQUIRE(x.grad().to_host_f64() == x_ref.grad().to_host_f64());
    for (size_t i = 0; i < weights.size(); ++i) {
      REQUIRE(weights[i].grad().shape() == weights[i].shape());
      REQUIRE(weights[i].grad().to_host_f64() == weights_ref[i].grad().to_host_f64());
      if (with_bias) REQUIRE(biases[i].grad().to_host_f64() == biases_ref[i].grad().to_host_f64());
    }
  }
}

TEST_CASE("stacked_linear: mismatched weights or biases are one clear error", "[stacked_linear][errors]") {
  const Tensor x = zeros({2, 4});
  REQUIRE_THROWS_WITH(stacked_linear(x, {zeros({3, 4}), zeros({2, 5})}), Catch::Contains("cat"));
  REQUIRE_THROWS_WITH(stacked_linear(x, {zeros({3, 3}), zeros({2, 3})}),
                      Catch::Contains("linear") && Catch::Contains("[2, 4]"));
  REQUIRE_THROWS_WITH(stacked_linear(x, {zeros({3, 4})}, {zeros({3}), zeros({3})}),
                      Catch::Contains("stacked_linear"));
  REQUIRE_THROWS_WITH(stacked_linear(x, {}), Catch::Contains("stacked_linear"));
  REQUIRE_THROWS_WITH(stacked_linear(x, {zeros({3, 4})}, {Tensor()}), Catch::Contains("stacked_linear"));
}

// stacked_linear's backward builds the stacked weight for dx only: with an x that needs no
// gradient (a MultiHeadAttention on raw input) dW's shape must come from G and x.
TEST_CASE("stacked_linear: weights' gradients when x needs none", "[stacked_linear]") {
  manual_seed(5);
  const Tensor x = randn({3, 4});  // no gradient wanted
  const std::vector<Tensor> weight_values = {randn({2, 4}), randn({3, 4})};
  const Tensor probe = randn({3, 5});
  std::vector<Tensor> weights, weights_ref;
  for (const Tensor& w : weight_values) {
    weights.push_back(w.detach().contiguous().requires_grad_());
    weights_ref.push_back(w.detach().contiguous().requires_grad_());
  }
  sum(stacked_linear(x, weights) * probe).backward();
  sum(linear(x, cat(weights_ref, 0)) * probe).backward();
  for (size_t i = 0; i < weights.size(); ++i) {
    REQUIRE(weights[i].grad().shape() == weights[i].shape());
    REQUIRE(weights[i].grad().to_host_f64() == weights_ref[i].grad().to_host_f64());
  }
}
