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
}
