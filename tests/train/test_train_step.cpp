// train_step (train/train_step.h), the step `tapegrad train` and `tapegrad bench` run: the same
// updates as the recipe written out by hand, a skipped fp16 step, and the autocast scope.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "tapegrad/nn/grad_scaler.h"
#include "tapegrad/nn/optim.h"
#include "tapegrad/ops/ops.h"
#include "tapegrad/runtime/autocast.h"
#include "tapegrad/train/train_step.h"

using namespace tg;

namespace {

Tensor parameter(const std::vector<double>& values) {
  return from_values(values, {static_cast<int64_t>(values.size())}).requires_grad_();
}

// sum((w * x)^2): large gradients, so that clipping to 1 changes them.
Tensor square_loss(const Tensor& w, const Tensor& x) { return sum(pow(w * x, 2.0)); }

}  // namespace

TEST_CASE("train_step: the same update as forward, backward, unscale, clip, step, zero_grad by hand",
          "[train_step]") {
  const Tensor x = from_values({3, -4, 5}, {3});
  for (const bool scaled : {false, true}) {
    CAPTURE(scaled);
    const Tensor by_hand = parameter({1, 2, -1}), stepped = parameter({1, 2, -1});
    AdamW manual_optimizer({by_hand}, 0.1), optimizer({stepped}, 0.1);
    GradScaler manual_scaler(GradScalerOptions{.enabled = scaled}), scaler(GradScalerOptions{.enabled = scaled});
    for (int step = 0; step < 3; ++step) {
      const Tensor loss = square_loss(by_hand, x);
      manual_scaler.scale(loss).backward();
      manual_scaler.unscale(manual_optimizer);
      clip_grad_norm({by_hand}, 1.0);
      REQUIRE(manual_scaler.step(manual_optimizer));
      manual_scaler.update();
      manual_optimizer.zero_grad();

      const train::TrainStepResult result =
          train::train_step([&] { return square_loss(stepped, x); }, optimizer, scaler, {.clip = 1.0});
      CHECK(result.loss == loss.item());
      CHECK_FALSE(result.skipped);
      CHECK(result.loss_scale == (scaled ? 65536.0 : 1.0));
      CHECK(stepped.to_host_f64() == by_hand.to_host_f64());  // bit for bit
      CHECK_FALSE(stepped.grad().defined());
    }
  }
}

TEST_CASE("train_step: an inf gradient under fp16 loss scaling skips the update and halves the scale",
          "[train_step]") {
  const Tensor w = parameter({1, 2});
  SGD optimizer({w}, 0.1);
  GradScaler scaler;  // enabled, scale 2^16
  const Tensor x = from_values({std::numeric_limits<double>::infinity(), 1}, {2});
  const train::TrainStepResult result = train::train_step([&] { return sum(w * x); }, optimizer, scaler);
  CHECK(result.skipped);
  CHECK(std::isinf(result.loss));
  CHECK(result.loss_scale == 65536.0);
  CHECK(scaler.get_scale() == 32768.0);
  CHECK(w.to_host_f64() == std::vector<double>{1, 2});
  CHECK_FALSE(w.grad().defined());
}

TEST_CASE("train_step: the loss runs under the asked autocast, and only the loss", "[train_step]") {
  const Tensor w = parameter({1, 2});
  SGD optimizer({w}, 0.1);
  GradScaler scaler(GradScalerOptions{.enabled = false});
  std::optional<DType> seen;
  train::train_step([&] { seen = autocast_dtype(); return sum(w * w); }, optimizer, scaler,
                    {.autocast = DType::bf16});
  CHECK(seen == DType::bf16);
  CHECK_FALSE(autocast_dtype().has_value());
  train::train_step([&] { seen = autocast_dtype(); return sum(w * w); }, optimizer, scaler);
  CHECK_FALSE(seen.has_value());
}

TEST_CASE("train_step: inspect_gradients sees the unscaled, unclipped gradients before the update",
          "[train_step][grad_stats]") {
  const Tensor x = from_values({3, -4, 5}, {3});
  for (const bool scaled : {false, true}) {
    CAPTURE(scaled);
    const Tensor w = parameter({1, 2, -1});
    SGD optimizer({w}, 0.1);
    GradScaler scaler(GradScalerOptions{.enabled = scaled});
    std::vector<double> seen_grad, seen_weights;
    train::train_step([&] { return square_loss(w, x); }, optimizer, scaler,
                      {.clip = 1.0, .inspect_gradients = [&] {
                         seen_grad = w.grad().to_host_f64();
                         seen_weights = w.to_host_f64();
                       }});
    // d/dw sum((w x)^2) = 2 w x^2: [18, 64, -50], far past the clip norm of 1.
    REQUIRE(seen_grad == std::vector<double>{18, 64, -50});
    REQUIRE(seen_weights == std::vector<double>{1, 2, -1});
    REQUIRE(w.to_host_f64() != seen_weights);  // then the update ran
  }
}

TEST_CASE("train_step: check_gradient_norm gets the global norm, unscaled and before clipping, once",
          "[train_step][grad_health]") {
  const Tensor x = from_values({3, -4, 5}, {3});
  for (const bool scaled : {false, true}) {
    CAPTURE(scaled);
    const Tensor w = parameter({1, 2, -1}), unchecked = parameter({1, 2, -1});
    SGD optimizer({w}, 0.1), unchecked_optimizer({unchecked}, 0.1);
    GradScaler scaler(GradScalerOptions{.enabled = scaled});
    GradScaler unchecked_scaler(GradScalerOptions{.enabled = scaled});
    std::vector<double> norms;
    train::train_step([&] { return square_loss(w, x); }, optimizer, scaler,
                      {.clip = 1.0, .check_gradient_norm = [&](double norm) {
                         norms.push_back(norm);
                         CHECK(w.grad().to_host_f64() == std::vector<double>{18, 64, -50});
                       }});
    // The gradient 2 w x^2 = [18, 64, -50]: its norm sqrt(324 + 4096 + 2500).
    REQUIRE(norms.size() == 1);
    CHECK(norms[0] == Approx(std::sqrt(6920.0)).epsilon(1e-12));
    // Clipping used that norm: the same update as a step that did not check it.
    train::train_step([&] { return square_loss(unchecked, x); }, unchecked_optimizer,
                      unchecked_scaler, {.clip = 1.0});
    CHECK(w.to_host_f64() == unchecked.to_host_f64());
  }
}
