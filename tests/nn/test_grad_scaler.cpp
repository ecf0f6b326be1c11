// GradScaler: PyTorch's defaults, scaling and unscaling, an overflow injected on purpose (step
// skipped, weights bit-identical, scale halved), growth after the interval, the disabled
// pass-through, misuse errors, the checkpoint state, and why f16 needs it (bf16 does not).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <optional>
#include <cstring>
#include <limits>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/nn/grad_scaler.h"
#include "tapegrad/nn/optim.h"
#include "tapegrad/ops/ops.h"
#include "tapegrad/runtime/autocast.h"

using namespace tg;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

Tensor parameter(std::vector<double> values) {
  const int64_t n = static_cast<int64_t>(values.size());
  return from_values(values, {n}).requires_grad_();
}

void give_grad(const Tensor& param, std::vector<double> grad) {
  param.set_grad(from_values(grad, param.shape(), param.dtype()));
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const auto* begin = static_cast<const uint8_t*>(t.data());
  return {begin, begin + t.numel() * dtype_size(t.dtype())};
}

GradScalerOptions with_interval(int64_t growth_interval, double init_scale = 1024.0) {
  GradScalerOptions options;
  options.init_scale = init_scale;
  options.growth_interval = growth_interval;
  return options;
}

}  // namespace

TEST_CASE("GradScaler has PyTorch's defaults", "[grad_scaler]") {
  const GradScaler scaler;
  REQUIRE(scaler.options().init_scale == 65536.0);  // 2^16
  REQUIRE(scaler.options().growth_factor == 2.0);
  REQUIRE(scaler.options().backoff_factor == 0.5);
  REQUIRE(scaler.options().growth_interval == 2000);
  REQUIRE(scaler.is_enabled());
  REQUIRE(scaler.get_scale() == 65536.0);
  REQUIRE(scaler.state().growth_tracker == 0);
}

TEST_CASE("GradScaler scales the loss and unscales the gradients before the step", "[grad_scaler]") {
  const Tensor p = parameter({1.0, -2.0, 0.5});
  SGD sgd({p}, 0.1);
  GradScaler scaler(with_interval(2000, 8.0));
  const Tensor loss = sum(p * p);  // d/dp = 2p
  const Tensor scaled = scaler.scale(loss);
  REQUIRE(scaled.item() == 8.0 * loss.item());
  scaled.backward();
  REQUIRE(p.grad().to_host_f64() == std::vector<double>{16.0, -32.0, 8.0});  // scaled by 8
  REQUIRE(scaler.step(sgd));
  scaler.update();
  // p -= 0.1 * 2p with the true gradient.
  const std::vector<double> stepped = p.to_host_f64();
  REQUIRE(stepped[0] == Approx(0.8));
  REQUIRE(stepped[1] == Approx(-1.6));
  REQUIRE(stepped[2] == Approx(0.4));
  REQUIRE(sgd.step_count() == 1);
}

TEST_CASE("unscale() first gives the true gradients (for clipping), never written in place", "[grad_scaler]") {
  const Tensor p = parameter({3.0, 4.0});
  SGD sgd({p}, 1.0);
  GradScaler scaler(with_interval(2000, 4.0));
  give_grad(p, {12.0, 16.0});
  const Tensor scaled_grad = p.grad();
  scaler.unscale(sgd);
  REQUIRE(p.grad().to_host_f64() == std::vector<double>{3.0, 4.0});
  REQUIRE(scaled_grad.to_host_f64() == std::vector<double>{12.0, 16.0});  // the old tensor untouched
  REQUIRE(clip_grad_norm({p}, 1.0) == Approx(5.0));                   // the true norm
  REQUIRE(scaler.step(sgd));  // no second unscale
  scaler.update();
  REQUIRE(p.to_host_f64()[0] == Approx(3.0 - 0.6).epsilon(1e-5));
}

TEST_CASE("an overflow skips the step, leaves the weights bit-identical and halves the scale", "[grad_scaler]") {
  for (double bad : {kInf, -kInf, std::nan("")}) {
    INFO("bad gradient " << bad);
    const Tensor a = parameter({1.0, 2.0}), b = parameter({-3.0});
    AdamW adamw({a, b}, 0.1);
    GradScaler scaler;
    give_grad(a, {0.5, 0.25});
    give_grad(b, {bad});  // an f16 backward that overflowed
    const std::vector<uint8_t> a_before = bytes_of(a), b_before = bytes_of(b);
    REQUIRE_FALSE(scaler.step(adamw));
    REQUIRE(bytes_of(a) == a_before);
    REQUIRE(bytes_of(b) == b_before);
    REQUIRE(adamw.step_count() == 0);
    REQUIRE(adamw.state().size() == 1);  // "step" only: no moments were created
    scaler.update();
    REQUIRE(scaler.get_scale() == 32768.0);
    REQUIRE(scaler.state().growth_tracker == 0);
    // The next clean step goes through.
    give_grad(a, {0.5, 0.25});
    give_grad(b, {1.0});
    REQUIRE(scaler.step(adamw));
    scaler.update();
    REQUIRE(adamw.step_count() == 1);
    REQUIRE(bytes_of(a) != a_before);
    REQUIRE(scaler.get_scale() == 32768.0);
    REQUIRE(scaler.state().growth_tracker == 1);
  }
}

TEST_CASE("the scale grows x2 after growth_interval clean steps; an overflow restarts the count", "[grad_scaler]") {
  const Tensor p = parameter({1.0});
  SGD sgd({p}, 0.01);
  GradScaler scaler(with_interval(3, 1024.0));
  const auto iteration = [&](double grad) {
    give_grad(p, {grad * scaler.get_scale()});
    const bool stepped = scaler.step(sgd);
    scaler.update();
    return stepped;
  };
  REQUIRE(iteration(1.0));
  REQUIRE(iteration(1.0));
  REQUIRE(scaler.get_scale() == 1024.0);
  REQUIRE(scaler.state().growth_tracker == 2);
  REQUIRE_FALSE(iteration(kInf));  // backoff, count restarts
  REQUIRE(scaler.get_scale() == 512.0);
  REQUIRE(iteration(1.0));
  REQUIRE(iteration(1.0));
  REQUIRE(scaler.get_scale() == 512.0);
  REQUIRE(iteration(1.0));  // the third clean step in a row
  REQUIRE(scaler.get_scale() == 1024.0);
  REQUIRE(scaler.state().growth_tracker == 0);
  REQUIRE(sgd.step_count() == 5);
}

TEST_CASE("the scale stops growing where f32 would overflow", "[grad_scaler]") {
  const Tensor p = parameter({1.0});
  SGD sgd({p}, 0.01);
  GradScaler scaler(with_interval(1, 0x1.0p127));
  give_grad(p, {1.0});
  REQUIRE(scaler.step(sgd));
  scaler.update();
  REQUIRE(scaler.get_scale() == 0x1.0p127);
  REQUIRE(scaler.state().growth_tracker == 0);
}

TEST_CASE("a disabled GradScaler is a pass-through (bf16)", "[grad_scaler]") {
  const Tensor p = parameter({1.0});
  SGD sgd({p}, 0.5);
  GradScalerOptions options;
  options.enabled = false;
  GradScaler scaler(options);
  REQUIRE(scaler.get_scale() == 1.0);
  const Tensor loss = sum(p * 3.0);
  REQUIRE(scaler.scale(loss).same(loss));
  loss.backward();
  scaler.unscale(sgd);
  REQUIRE(p.grad().to_host_f64() == std::vector<double>{3.0});
  REQUIRE(scaler.step(sgd));
  scaler.update();
  scaler.update();  // no checks to make: nothing happens
  REQUIRE(p.to_host_f64()[0] == Approx(-0.5));
}

TEST_CASE("GradScaler misuse is a clear error", "[grad_scaler]") {
  const Tensor p = parameter({1.0});
  SGD sgd({p}, 0.1);
  GradScaler scaler;
  REQUIRE_THROWS_WITH(scaler.update(), Catch::Contains("no unscale() or step()"));
  give_grad(p, {1.0});
  scaler.unscale(sgd);
  REQUIRE_THROWS_WITH(scaler.unscale(sgd), Catch::Contains("already called"));
  scaler.step(sgd);
  REQUIRE_THROWS_WITH(scaler.step(sgd), Catch::Contains("already called"));
  scaler.update();
  REQUIRE_THROWS_AS(GradScaler(with_interval(0)), Error);
  GradScalerOptions bad;
  bad.backoff_factor = 1.5;
  REQUIRE_THROWS_AS(GradScaler(bad), Error);
}

TEST_CASE("GradScaler state round-trips (checkpoints) and is validated", "[grad_scaler]") {
  const Tensor p = parameter({1.0});
  SGD sgd({p}, 0.1);
  GradScaler scaler(with_interval(10, 256.0));
  for (int i = 0; i < 3; ++i) {
    give_grad(p, {1.0});
    scaler.step(sgd);
    scaler.update();
  }
  const GradScalerState saved = scaler.state();
  REQUIRE(saved.scale == 256.0);
  REQUIRE(saved.growth_tracker == 3);
  GradScaler restored(with_interval(10));
  restored.load_state(saved);
  REQUIRE(restored.get_scale() == 256.0);
  REQUIRE(restored.state().growth_tracker == 3);
  REQUIRE_THROWS_AS(restored.load_state({-1.0, 0}), Error);
  REQUIRE_THROWS_AS(restored.load_state({kInf, 0}), Error);
  REQUIRE_THROWS_AS(restored.load_state({1.0, 10}), Error);  // >= growth_interval
}

TEST_CASE("why f16 needs loss scaling: small gradients flush to zero, bf16 keeps them", "[grad_scaler]") {
  manual_seed(31);
  const Tensor w = randn({4, 8}).requires_grad_();
  const Tensor x = randn({16, 8});
  SGD sgd({w}, 0.0);
  // d loss / d y = 1e-9 everywhere: below f16's smallest subnormal (2^-24 = 6e-8), so in an f16
  // backward it rounds to 0; times 2^16 it is 6.6e-5, an f16 normal number.
  const auto gradient = [&](std::optional<DType> amp, GradScaler* scaler) {
    w.zero_grad();
    Tensor loss;
    {
      const Autocast autocast(amp.value_or(DType::f32));
      loss = sum(linear(x, w)) * 1e-9;
    }
    (scaler ? scaler->scale(loss) : loss).backward();
    if (scaler) {
      scaler->unscale(sgd);
      scaler->step(sgd);
      scaler->update();
    }
    return w.grad().to_host_f64();
  };
  const std::vector<double> f32 = gradient(std::nullopt, nullptr);
  const auto relative_error = [&](const std::vector<double>& g) {
    double diff = 0, norm = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      diff += (g[i] - f32[i]) * (g[i] - f32[i]);
      norm += f32[i] * f32[i];
    }
    return std::sqrt(diff / norm);
  };
  const std::vector<double> f16_unscaled = gradient(DType::f16, nullptr);
  REQUIRE(std::all_of(f16_unscaled.begin(), f16_unscaled.end(), [](double g) { return g == 0.0; }));
  GradScaler scaler;
  REQUIRE(relative_error(gradient(DType::f16, &scaler)) < 4 * 0x1.0p-11);
  REQUIRE(relative_error(gradient(DType::bf16, nullptr)) < 4 * 0x1.0p-8);
}

// 200 overflowing steps in a row halve an f32 scale of 2^16 past 2^-149 to 0 without a floor;
// then the loss is scaled by 0, unscaled by 1/0 = inf, and 0 * inf = NaN would reach the weights.
TEST_CASE("the scale backs off to f32's smallest normal and no further: weights never get NaN", "[grad_scaler]") {
  const float floor = std::numeric_limits<float>::min();  // 2^-126
  const Tensor w = parameter({1.0, 2.0});
  SGD sgd({w}, 0.1);
  GradScaler scaler;
  const std::vector<uint8_t> before = bytes_of(w);
  for (int step = 0; step < 200; ++step) {
    give_grad(w, {kInf, 1.0});  // an f16 backward that overflowed
    REQUIRE_FALSE(scaler.step(sgd));
    scaler.update();
    REQUIRE(scaler.get_scale() >= floor);
  }
  REQUIRE(scaler.get_scale() == floor);
  REQUIRE(bytes_of(w) == before);
  // A clean step at the floor: loss = w . [0.5, 0.25], its scaled gradient [0.5, 0.25] * 2^-126 is
  // exact, unscaled by 2^126 back to [0.5, 0.25]; SGD: w - 0.1 * grad.
  w.zero_grad();
  scaler.scale(sum(mul(w, from_values({0.5, 0.25}, {2})))).backward();
  REQUIRE(scaler.step(sgd));
  scaler.update();
  const std::vector<double> after = w.to_host_f64();
  REQUIRE(after[0] == Approx(1.0 - 0.1 * 0.5).epsilon(1e-6));
  REQUIRE(after[1] == Approx(2.0 - 0.1 * 0.25).epsilon(1e-6));
  // A finite scaled gradient that overflows f32 once unscaled (8 * 2^126 = 2^129) is an overflow
  // too: the step is skipped, not taken with inf.
  const std::vector<uint8_t> clean = bytes_of(w);
  give_grad(w, {8.0, 1.0});
  REQUIRE_FALSE(scaler.step(sgd));
  scaler.update();
  REQUIRE(bytes_of(w) == clean);
  REQUIRE(scaler.get_scale() == floor);
  // and a scale below the floor is refused where it could come in
  REQUIRE_THROWS_WITH(scaler.load_state({0.0, 0}), Catch::Contains("smallest normal"));
  REQUIRE_THROWS_WITH(GradScaler(with_interval(10, 1e-45)), Catch::Contains("smallest normal"));
}
