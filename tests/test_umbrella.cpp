// The umbrella header alone is enough for a small model end to end (what users of the installed
// package include; examples/consumer builds against the installed copy).
#include "tapegrad/tapegrad.h"

#include <catch2/catch.hpp>

TEST_CASE("umbrella: tapegrad.h declares the engine, the ops and nn", "[umbrella]") {
  tg::nn::Linear layer(2, 1);
  tg::Adam optimizer(layer.parameters(), 0.01);
  const tg::Tensor x = tg::from_values({1, 2, 3, 4}, {2, 2});
  const tg::Tensor loss = tg::mse_loss(layer.forward(x), tg::zeros({2, 1}));
  loss.backward();
  REQUIRE(layer.weight.grad().defined());
  optimizer.step();
  REQUIRE(layer.state_dict().size() == 2);
  // autograd/textbook.h: the switch to the code the reading path shows.
  {
    const tg::Textbook textbook;
    REQUIRE(tg::textbook_mode());
  }
  REQUIRE_FALSE(tg::textbook_mode());
}

TEST_CASE("umbrella: tapegrad.h declares generation and the attention weights", "[umbrella]") {
  // nn/generation.h: greedy decoding draws the largest logit.
  tg::nn::SamplingOptions greedy;
  greedy.temperature = 0;
  REQUIRE(tg::nn::draw_token({0.25, 2.0, -1.0}, greedy, 0.5f) == 1);
  // nn/attention_weights.h: with q = 0 every projected key scores the same, so the softmax over
  // the two ranks is [1/2, 1/2], and F = I spreads it as 1/2 on each position.
  const tg::Tensor q = tg::zeros({1, 2, 2}, tg::DType::f64);
  const tg::Tensor k = tg::from_values({1, 2, 3, 4}, {1, 2, 2}, tg::DType::f64);
  const tg::Tensor identity = tg::from_values({1, 0, 0, 1}, {2, 2}, tg::DType::f64);
  const tg::Tensor weights = tg::nn::linformer_implied_weights(q, k, identity, identity);
  REQUIRE(weights.shape() == tg::Shape{1, 2, 2});
  REQUIRE(weights.to_host_f64() == std::vector<double>{0.5, 0.5, 0.5, 0.5});
  // nn/kv_cache.h comes with generation.
  REQUIRE(sizeof(tg::nn::KVCache) > 0);
}
