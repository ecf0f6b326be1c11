// Optimizers, gradient clipping and the warm-up + cosine schedule against values worked out by hand
// (the literals) and against the textbook formulas written out again here (the reference loops),
// never against the code under test.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <numbers>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/nn/layers.h"
#include "tapegrad/nn/optim.h"
#include "tapegrad/nn/schedule.h"
#include "tapegrad/ops/ops.h"

using namespace tg;

namespace {

Tensor parameter(std::vector<double> values, DType dtype = DType::f64) {
  const int64_t n = static_cast<int64_t>(values.size());
  return from_values(values, {n}, dtype).requires_grad_();
}

void give_grad(const Tensor& param, std::vector<double> grad) {
  param.set_grad(from_values(grad, param.shape(), param.dtype()));
}

// Runs `optimizer` on a one-element parameter with the given gradient sequence; returns p after
// each step.
template <typename Make>
std::vector<double> run_scalar(Make make, const std::vector<double>& grads, double p0 = 1.0) {
  Tensor p = parameter({p0});
  auto optimizer = make(std::vector<Tensor>{p});
  std::vector<double> trajectory;
  for (double g : grads) {
    give_grad(p, {g});
    optimizer.step();
    trajectory.push_back(p.to_host_f64()[0]);
  }
  return trajectory;
}

// Textbook Adam / AdamW on one number (Kingma & Ba with PyTorch's eps placement).
std::vector<double> reference_adam(const std::vector<double>& grads, double p, double lr,
                                   double beta1, double beta2, double eps, double weight_decay,
                                   bool decoupled) {
  double m = 0, v = 0;
  std::vector<double> trajectory;
  for (size_t t = 1; t <= grads.size(); ++t) {
    double g = grads[t - 1];
    if (decoupled) {
      p = p - lr * weight_decay * p;
    } else {
      g = g + weight_decay * p;
    }
    m = beta1 * m + (1 - beta1) * g;
    v = beta2 * v + (1 - beta2) * g * g;
    const double m_hat = m / (1 - std::pow(beta1, t));
    const double v_hat = v / (1 - std::pow(beta2, t));
    p = p - lr * m_hat / (std::sqrt(v_hat) + eps);
    trajectory.push_back(p);
  }
  return trajectory;
}

// Textbook heavy-ball / Nesterov SGD on one number (Sutskever et al. as PyTorch writes it).
std::vector<double> reference_sgd(const std::vector<double>& grads, double p, double lr,
                                  double momentum, double dampening, double weight_decay,
                                  bool nesterov) {
  double velocity = 0;
  std::vector<double> trajectory;
  for (size_t t = 0; t < grads.size(); ++t) {
    const double g = grads[t] + weight_decay * p;
    velocity = t == 0 ? g : momentum * velocity + (1 - dampening) * g;
    const double direction = momentum == 0 ? g : nesterov ? g + momentum * velocity : velocity;
    p = p - lr * direction;
    trajectory.push_back(p);
  }
  return trajectory;
}

const std::vector<double> kGrads = {1.0, 2.0, 3.0};
const std::vector<double> kLongGrads = {0.5, -1.25, 2.0, 0.0, -0.75, 3.5, -2.0, 1.0, 0.25, -0.5};

void require_close(const std::vector<double>& actual, const std::vector<double>& expected,
                   double epsilon = 1e-12) {
  REQUIRE(actual.size() == expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(actual[i] == Approx(expected[i]).epsilon(epsilon).margin(epsilon));
  }
}

}  // namespace

TEST_CASE("SGD without momentum: p -= lr * grad", "[optim]") {
  const auto trajectory = run_scalar([](auto p) { return SGD(p, 0.1); }, kGrads);
  require_close(trajectory, {0.9, 0.7, 0.4});
}

TEST_CASE("SGD with momentum: the first buffer is the gradient itself", "[optim]") {
  const auto trajectory = run_scalar([](auto p) { return SGD(p, 0.1, 0.9); }, kGrads);
  // buf: 1, 0.9*1 + 2 = 2.9, 0.9*2.9 + 3 = 5.61
  require_close(trajectory, {0.9, 0.61, 0.049});
  require_close(run_scalar([](auto p) { return SGD(p, 0.05, 0.8); }, kLongGrads),
                reference_sgd(kLongGrads, 1.0, 0.05, 0.8, 0.0, 0.0, false));
}

TEST_CASE("SGD with Nesterov momentum", "[optim]") {
  const auto trajectory = run_scalar([](auto p) { return SGD(p, 0.1, 0.9, 0, 0, true); }, kGrads);
  // g + 0.9 * buf: 1 + 0.9 = 1.9, 2 + 0.9*2.9 = 4.61, 3 + 0.9*5.61 = 8.049
  require_close(trajectory, {0.81, 0.349, -0.4559});
  require_close(run_scalar([](auto p) { return SGD(p, 0.05, 0.8, 0.01, 0, true); }, kLongGrads),
                reference_sgd(kLongGrads, 1.0, 0.05, 0.8, 0.0, 0.01, true));
}

TEST_CASE("SGD with weight decay and dampening", "[optim]") {
  const auto trajectory = run_scalar([](auto p) { return SGD(p, 0.1, 0.9, 0.1, 0.5); }, {1.0, 2.0});
  // step 1: g = 1 + 0.1*1 = 1.1, buf = 1.1 (no dampening on the first step), p = 0.89
  // step 2: g = 2 + 0.089 = 2.089, buf = 0.99 + 0.5*2.089 = 2.0345, p = 0.89 - 0.20345
  require_close(trajectory, {0.89, 0.68655});
  require_close(run_scalar([](auto p) { return SGD(p, 0.05, 0.7, 0.05, 0.3); }, kLongGrads),
                reference_sgd(kLongGrads, 1.0, 0.05, 0.7, 0.3, 0.05, false));
}

TEST_CASE("SGD rejects Nesterov without momentum or with dampening", "[optim]") {
  Tensor p = parameter({1.0});
  REQUIRE_THROWS_AS(SGD({p}, 0.1, 0.0, 0, 0, true), tg::Error);
  REQUIRE_THROWS_AS(SGD({p}, 0.1, 0.9, 0, 0.1, true), tg::Error);
  REQUIRE_THROWS_AS(SGD({p}, -0.1), tg::Error);
}

TEST_CASE("Adam with bias correction", "[optim]") {
  const auto trajectory = run_scalar([](auto p) { return Adam(p, 0.1); }, kGrads);
  // step 1: m_hat = g, v_hat = g^2, so p moves by lr * 1 / (1 + 1e-8)
  // step 2: m = 0.29, v = 0.004999, m_hat = 0.29/0.19, v_hat = 0.004999/0.001999
  require_close(trajectory, {0.900000001, 0.803481799028166, 0.707681677061681}, 1e-13);
  require_close(run_scalar([](auto p) { return Adam(p, 0.01, {0.8, 0.99}, 1e-6); }, kLongGrads),
                reference_adam(kLongGrads, 1.0, 0.01, 0.8, 0.99, 1e-6, 0.0, false));
}

TEST_CASE("Adam with weight decay adds weight_decay * p to the gradient", "[optim]") {
  const auto trajectory = run_scalar([](auto p) { return Adam(p, 0.1, {0.9, 0.999}, 1e-8, 0.1); },
                                     kGrads);
  require_close(trajectory, {0.900000000909091, 0.802947334687674, 0.706609994835533}, 1e-13);
  require_close(
      run_scalar([](auto p) { return Adam(p, 0.01, {0.9, 0.999}, 1e-8, 0.3); }, kLongGrads),
      reference_adam(kLongGrads, 1.0, 0.01, 0.9, 0.999, 1e-8, 0.3, false));
}

TEST_CASE("AdamW decays the weights before the Adam update", "[optim]") {
  const auto trajectory = run_scalar([](auto p) { return AdamW(p, 0.1, {0.9, 0.999}, 1e-8, 0.1); },
                                     kGrads);
  // step 1: p = 1 * (1 - 0.1*0.1) = 0.99, then the Adam step of about -0.1
  require_close(trajectory, {0.890000001, 0.784581799018166, 0.680935859061499}, 1e-13);
  require_close(run_scalar([](auto p) { return AdamW(p, 0.01); }, kLongGrads),  // default wd 1e-2
                reference_adam(kLongGrads, 1.0, 0.01, 0.9, 0.999, 1e-8, 1e-2, true));
}

TEST_CASE("Adam on an f32 vector parameter updates each element", "[optim]") {
  Tensor p = parameter({1.0, -2.0}, DType::f32);
  Adam adam({p}, 0.1);
  const std::vector<std::vector<double>> grads = {{1.0, -0.5}, {2.0, 0.25}, {3.0, 1.0}};
  for (const auto& g : grads) {
    give_grad(p, g);
    adam.step();
  }
  const auto first = reference_adam({1.0, 2.0, 3.0}, 1.0, 0.1, 0.9, 0.999, 1e-8, 0, false);
  const auto second = reference_adam({-0.5, 0.25, 1.0}, -2.0, 0.1, 0.9, 0.999, 1e-8, 0, false);
  REQUIRE(p.dtype() == DType::f32);
  CHECK(p.to_host_f64()[0] == Approx(first.back()).epsilon(1e-6));
  CHECK(p.to_host_f64()[1] == Approx(second.back()).epsilon(1e-6));
}

TEST_CASE("Optimizers skip parameters without a grad and never write into a grad", "[optim]") {
  Tensor a = parameter({1.0});
  Tensor b = parameter({5.0});
  Adam adam({a, b}, 0.1, {0.9, 0.999}, 1e-8, 0.5);
  Tensor shared_grad = from_values({2.0}, {1}, DType::f64);
  a.set_grad(shared_grad);
  adam.step();
  adam.step();
  CHECK(b.to_host_f64()[0] == 5.0);           // no grad: untouched
  CHECK(shared_grad.to_host_f64()[0] == 2.0);  // weight decay did not write into the grad
  CHECK(adam.step_count() == 2);

  // b's own step count starts at its first gradient: its first update is a full lr step.
  adam.zero_grad();
  CHECK_FALSE(a.grad().defined());
  give_grad(b, {1.0});
  adam.step();
  const auto expected = reference_adam({1.0}, 5.0, 0.1, 0.9, 0.999, 1e-8, 0.5, false);
  CHECK(b.to_host_f64()[0] == Approx(expected[0]).epsilon(1e-12));
  CHECK(adam.step_count() == 3);
}

TEST_CASE("Optimizer state round-trips through state() and load_state()", "[optim]") {
  Tensor p = parameter({1.0, 2.0});
  Adam adam({p}, 0.1);
  give_grad(p, {1.0, -1.0});
  adam.step();
  give_grad(p, {2.0, 0.5});
  adam.step();

  const auto state = adam.state();
  std::vector<std::string> names;
  for (const auto& [name, tensor] : state) names.push_back(name);
  REQUIRE(names == std::vector<std::string>{"step", "0.exp_avg", "0.exp_avg_sq", "0.step"});
  CHECK(state[0].second.to_host_i64()[0] == 2);
  CHECK(state[3].second.to_host_i64()[0] == 2);
  // m = 0.9 * 0.1 * g1 + 0.1 * g2
  CHECK(state[1].second.to_host_f64()[0] == Approx(0.09 * 1.0 + 0.1 * 2.0));
  CHECK(state[1].second.to_host_f64()[1] == Approx(0.09 * -1.0 + 0.1 * 0.5));

  // A fresh optimizer on a copy of the parameter, given the state, continues identically.
  Tensor q = from_values(p.to_host_f64(), {2}, DType::f64).requires_grad_();
  Adam resumed({q}, 0.1);
  resumed.load_state(state);
  CHECK(resumed.step_count() == 2);
  give_grad(p, {3.0, 1.0});
  give_grad(q, {3.0, 1.0});
  adam.step();
  resumed.step();
  CHECK(q.to_host_f64() == p.to_host_f64());

  SECTION("SGD keeps momentum_buffer") {
    Tensor s = parameter({1.0});
    SGD sgd({s}, 0.1, 0.9);
    give_grad(s, {1.0});
    sgd.step();
    const auto sgd_state = sgd.state();
    REQUIRE(sgd_state.size() == 2);
    CHECK(sgd_state[1].first == "0.momentum_buffer");
    CHECK(sgd_state[1].second.to_host_f64()[0] == 1.0);
  }
}

TEST_CASE("load_state rejects state that does not fit", "[optim]") {
  Tensor p = parameter({1.0, 2.0});
  Adam adam({p}, 0.1);
  const Tensor step = from_indices({1}, {});
  const Tensor buffer = zeros({2}, DType::f64);
  using State = std::vector<std::pair<std::string, Tensor>>;
  const State good = {{"step", step}, {"0.exp_avg", buffer}, {"0.exp_avg_sq", buffer},
                      {"0.step", step}};
  REQUIRE_NOTHROW(adam.load_state(good));

  CHECK_THROWS_AS(adam.load_state({{"0.exp_avg", buffer}}), tg::Error);          // no "step"
  CHECK_THROWS_AS(adam.load_state({{"step", step}, {"0.exp_avg", buffer}}), tg::Error);  // partial
  CHECK_THROWS_AS(adam.load_state({{"step", step}, {"1.exp_avg", buffer}}), tg::Error);  // index
  CHECK_THROWS_AS(adam.load_state({{"step", step}, {"0.momentum_buffer", buffer}}), tg::Error);
  CHECK_THROWS_AS(adam.load_state({{"step", step}, {"exp_avg", buffer}}), tg::Error);
  CHECK_THROWS_AS(adam.load_state({{"step", buffer}}), tg::Error);  // not a scalar
  CHECK_THROWS_AS(adam.load_state({{"step", from_indices({-1}, {})}}), tg::Error);
  CHECK_THROWS_AS(adam.load_state({{"step", step},
                                   {"0.exp_avg", zeros({3}, DType::f64)},
                                   {"0.exp_avg_sq", buffer},
                                   {"0.step", step}}),
                  tg::Error);  // shape
  CHECK_THROWS_AS(adam.load_state({{"step", step},
                                   {"0.exp_avg", zeros({2}, DType::f32)},
                                   {"0.exp_avg_sq", buffer},
                                   {"0.step", step}}),
                  tg::Error);  // dtype
  // A rejected state changed nothing: the good one is still there.
  CHECK(adam.state().size() == 4);
  CHECK(adam.step_count() == 1);
}

// A Linear(1, 1) without bias, its weight 1, made `first` for the first of kGrads's steps and
// `second` (Module::to, in place) for the rest; returns the weight after the last step.
template <typename Make>
double weight_across_dtypes(Make make, DType first, DType second) {
  nn::Linear layer(1, 1, /*bias=*/false, first);
  {
    NoGrad no_grad;
    layer.weight.fill_(1.0);
  }
  auto optimizer = make(layer.parameters());
  for (size_t t = 0; t < kGrads.size(); ++t) {
    if (t == 1) layer.to(second);
    give_grad(layer.weight, {kGrads[t]});
    optimizer.step();
    for (const auto& [name, buffer] : optimizer.state()) {
      INFO(name);
      if (name != "step" && name != "0.step") CHECK(buffer.dtype() == layer.weight.dtype());
    }
  }
  return layer.weight.to_host_f64()[0];
}

// The chosen behaviour, torch.optim's: state made for an f32 parameter is converted when the
// parameter becomes f64 (and back), as its load_state_dict casts state to the parameter's dtype.
// The update kernels never see an f32 buffer beside an f64 parameter.
TEST_CASE("Optimizers convert their state when Module::to changes a parameter's dtype",
          "[optim]") {
  for (const auto& [first, second] : {std::pair{DType::f32, DType::f64},
                                      std::pair{DType::f64, DType::f32}}) {
    INFO(dtype_name(first) << " -> " << dtype_name(second));
    // The f32 steps round to f32 (about 1e-7 of the weight, which ends near 0.05 for SGD); the
    // references run in f64 throughout.
    const double epsilon = 1e-6;
    const auto sgd = [](auto p) { return SGD(p, 0.1, 0.9); };
    const auto nesterov = [](auto p) { return SGD(p, 0.1, 0.9, 0, 0, true); };
    const auto adam = [](auto p) { return Adam(p, 0.1); };
    const auto adamw = [](auto p) { return AdamW(p, 0.1, {0.9, 0.999}, 1e-8, 0.1); };
    CHECK(weight_across_dtypes(sgd, first, second) ==
          Approx(reference_sgd(kGrads, 1.0, 0.1, 0.9, 0, 0, false).back())
              .epsilon(epsilon)
              .margin(epsilon));
    CHECK(weight_across_dtypes(nesterov, first, second) ==
          Approx(reference_sgd(kGrads, 1.0, 0.1, 0.9, 0, 0, true).back())
              .epsilon(epsilon)
              .margin(epsilon));
    CHECK(weight_across_dtypes(adam, first, second) ==
          Approx(reference_adam(kGrads, 1.0, 0.1, 0.9, 0.999, 1e-8, 0, false).back())
              .epsilon(epsilon)
              .margin(epsilon));
    CHECK(weight_across_dtypes(adamw, first, second) ==
          Approx(reference_adam(kGrads, 1.0, 0.1, 0.9, 0.999, 1e-8, 0.1, true).back())
              .epsilon(epsilon)
              .margin(epsilon));
  }
}

TEST_CASE("Optimizers refuse state of another shape than its parameter, before any update",
          "[optim]") {
  Tensor p = parameter({1.0, 2.0});
  Tensor q = parameter({5.0});
  Adam adam({q, p}, 0.1);
  give_grad(p, {1.0, 1.0});
  adam.step();  // p's state: [2]
  // p's tensor swapped under the optimizer for one of three elements (nothing in the library does
  // this any more: Module::replace_in_place keeps shapes; the check guards the kernels anyway).
  const Tensor longer = from_values({1.0, 2.0, 3.0}, {3}, DType::f64);
  p.impl()->storage = longer.storage();
  p.impl()->shape = longer.shape();
  p.impl()->strides = longer.strides();
  give_grad(p, {1.0, 1.0, 1.0});
  give_grad(q, {1.0});
  REQUIRE_THROWS_WITH(adam.step(),
                      Catch::Contains("Adam.step: parameter 1 has shape [3] (f64)") &&
                          Catch::Contains("'exp_avg' has shape [2] (f64)"));
  CHECK(q.to_host_f64()[0] == 5.0);  // no parameter was updated
  CHECK(p.to_host_f64() == std::vector<double>{1.0, 2.0, 3.0});
}

TEST_CASE("Optimizers check their parameters", "[optim]") {
  Tensor leaf = parameter({1.0});
  CHECK_THROWS_AS(SGD({}, 0.1), tg::Error);
  CHECK_THROWS_AS(SGD({from_values({1.0}, {1})}, 0.1), tg::Error);  // no requires_grad
  CHECK_THROWS_AS(SGD({leaf, leaf}, 0.1), tg::Error);                 // duplicate
  CHECK_THROWS_AS(Adam({leaf}, 0.1, {1.0, 0.999}), tg::Error);
  CHECK_THROWS_AS(Adam({leaf}, 0.1, {0.9, 0.999}, -1e-8), tg::Error);
  SGD sgd({leaf}, 0.1);
  CHECK_THROWS_AS(sgd.set_lr(-1), tg::Error);
  sgd.set_lr(0.5);
  CHECK(sgd.lr() == 0.5);
  // A grad of the wrong shape never gets in (set_grad checks it), so step has nothing to update.
  CHECK_THROWS_AS(leaf.set_grad(from_values({1.0, 2.0}, {2}, DType::f64)), tg::Error);
  sgd.step();
  CHECK(leaf.to_host_f64()[0] == 1.0);
}

TEST_CASE("clip_grad_norm scales all gradients by max_norm / (norm + 1e-6)", "[optim]") {
  Tensor a = parameter({3.0, 4.0});
  Tensor b = parameter({1.0});
  Tensor c = parameter({7.0});  // no grad: skipped
  Tensor grad_a = from_values({3.0, 4.0}, {2}, DType::f64);
  a.set_grad(grad_a);
  give_grad(b, {12.0});

  const double norm = clip_grad_norm({a, b, c}, 6.5);
  CHECK(norm == Approx(13.0).epsilon(1e-15));  // sqrt(9 + 16 + 144)
  const double factor = 6.5 / (13.0 + 1e-6);
  CHECK(a.grad().to_host_f64()[0] == Approx(3.0 * factor).epsilon(1e-15));
  CHECK(a.grad().to_host_f64()[1] == Approx(4.0 * factor).epsilon(1e-15));
  CHECK(b.grad().to_host_f64()[0] == Approx(12.0 * factor).epsilon(1e-15));
  CHECK_FALSE(c.grad().defined());
  CHECK(grad_a.to_host_f64() == std::vector<double>{3.0, 4.0});  // replaced, not written into

  SECTION("a norm under max_norm leaves the gradients alone") {
    const Tensor before = a.grad();
    CHECK(clip_grad_norm({a, b, c}, 100.0) == Approx(6.5).epsilon(1e-6));
    CHECK(a.grad().same(before));
  }
}

TEST_CASE("grad_norm: the norm of all gradients, inf and NaN kept; clip_grad_norm takes it once",
          "[optim]") {
  Tensor a = parameter({3.0, 4.0});
  Tensor b = parameter({1.0});
  Tensor c = parameter({7.0});  // no grad: skipped
  give_grad(a, {3.0, 4.0});
  give_grad(b, {12.0});
  const Tensor grad_a = a.grad();
  CHECK(grad_norm({a, b, c}) == Approx(13.0).epsilon(1e-15));  // sqrt(9 + 16 + 144)
  CHECK(a.grad().same(grad_a));                                 // untouched
  // A norm the caller already has is the one clipping uses: 6.5 / 26 halves the gradients.
  CHECK(clip_grad_norm({a, b, c}, 6.5, 26.0) == 26.0);
  CHECK(a.grad().to_host_f64()[1] == Approx(4.0 * 6.5 / (26.0 + 1e-6)).epsilon(1e-15));
  give_grad(b, {std::numeric_limits<double>::infinity()});
  CHECK(std::isinf(grad_norm({a, b})));
  give_grad(b, {std::nan("")});
  CHECK(std::isnan(grad_norm({a, b})));
}

TEST_CASE("WarmupCosine: linear warm-up then cosine decay to min_lr", "[optim]") {
  const WarmupCosine schedule(1.0, 4, 12, 0.1);
  CHECK(schedule.lr_at(0) == Approx(0.25));   // (0 + 1) / 4
  CHECK(schedule.lr_at(1) == Approx(0.5));
  CHECK(schedule.lr_at(3) == Approx(1.0));    // end of warm-up
  CHECK(schedule.lr_at(4) == Approx(1.0));    // cosine at progress 0
  CHECK(schedule.lr_at(8) == Approx(0.55));   // progress 1/2: halfway between 1 and 0.1
  CHECK(schedule.lr_at(6) == Approx(0.1 + 0.9 * (1 + std::sqrt(0.5)) / 2));  // progress 1/4
  CHECK(schedule.lr_at(11) == Approx(0.1 + 0.9 * (1 + std::cos(7 * std::numbers::pi / 8)) / 2));
  CHECK(schedule.lr_at(12) == Approx(0.1));   // end
  CHECK(schedule.lr_at(1000) == Approx(0.1));

  const WarmupCosine no_warmup(2.0, 0, 10);
  CHECK(no_warmup.lr_at(0) == Approx(2.0));
  CHECK(no_warmup.lr_at(5) == Approx(1.0));
  CHECK(no_warmup.lr_at(10) == Approx(0.0).margin(1e-15));

  CHECK_THROWS_AS(WarmupCosine(1.0, 10, 5), tg::Error);
  CHECK_THROWS_AS(WarmupCosine(1.0, 2, 5, 2.0), tg::Error);
  CHECK_THROWS_AS(schedule.lr_at(-1), tg::Error);
}

TEST_CASE("Optimizers minimize a quadratic through the tape", "[optim]") {
  const Tensor target = from_values({1.5, -2.0, 0.25}, {3});
  auto minimize = [&](auto make, int steps) {
    Tensor x = zeros({3}).requires_grad_();
    auto optimizer = make(std::vector<Tensor>{x});
    for (int i = 0; i < steps; ++i) {
      optimizer.zero_grad();
      const Tensor difference = x - target;
      sum(difference * difference).backward();
      optimizer.step();
    }
    return x.to_host_f64();
  };
  auto require_at_target = [&](const std::vector<double>& x, double margin) {
    for (size_t i = 0; i < x.size(); ++i) CHECK(x[i] == Approx(target.to_host_f64()[i]).margin(margin));
  };
  require_at_target(minimize([](auto p) { return SGD(p, 0.1); }, 100), 1e-5);
  require_at_target(minimize([](auto p) { return SGD(p, 0.05, 0.9, 0, 0, true); }, 200), 1e-5);
  require_at_target(minimize([](auto p) { return Adam(p, 0.05); }, 1000), 1e-3);
  require_at_target(minimize([](auto p) { return AdamW(p, 0.05, {0.9, 0.999}, 1e-8, 0); }, 1000),
                    1e-3);
}

TEST_CASE("A schedule drives the optimizer's learning rate", "[optim]") {
  Tensor p = parameter({0.0});
  SGD sgd({p}, 0.0);
  const WarmupCosine schedule(0.1, 2, 4);
  double expected = 0.0;
  for (int64_t step = 0; step < 4; ++step) {
    sgd.set_lr(schedule.lr_at(step));
    give_grad(p, {-1.0});
    sgd.step();
    expected += schedule.lr_at(step);  // p -= lr * (-1)
  }
  // lr: 0.05, 0.1, 0.1 (cosine start), 0.05 (cosine halfway)
  CHECK(expected == Approx(0.3));
  CHECK(p.to_host_f64()[0] == Approx(0.3));
}

TEST_CASE("An optimizer step between forward and backward makes backward throw",
          "[optim][version]") {
  // y = sum(x * w) with w = [1, 1]: dy/dx = w = [1, 1] as the forward saw it. SGD with lr 1 and
  // grad [5, 5] moves w to [-4, -4]; back-propagating after that would give dx = [-4, -4].
  const Tensor x = parameter({2.0, 3.0});
  const Tensor w = parameter({1.0, 1.0});
  SGD sgd({w}, 1.0);
  give_grad(w, {5.0, 5.0});
  Tensor y = sum(x * w);
  sgd.step();
  CHECK(w.to_host_f64() == std::vector<double>{-4.0, -4.0});
  CHECK_THROWS_WITH(y.backward(), Catch::Contains("modified by an in-place operation") &&
                                      Catch::Contains("'mul'") &&
                                      Catch::Contains("at version 0, now version 1"));
  CHECK_FALSE(x.grad().defined());
}

TEST_CASE("Training with the step after backward never trips the version check",
          "[optim][version]") {
  // Minimise sum((w - t)^2) with t = [3, -1]: grad 2 (w - t). Adam and SGD, several steps each,
  // every one a fresh forward, backward, step; the loss must fall and nothing may throw.
  const Tensor target = from_values({3.0, -1.0}, {2}, DType::f64);
  for (int which = 0; which < 2; ++which) {
    const Tensor w = parameter({0.0, 0.0});
    SGD sgd({w}, 0.1, 0.9);
    Adam adam({w}, 0.1);
    Optimizer& optimizer = which == 0 ? static_cast<Optimizer&>(sgd) : adam;
    double first_loss = 0, last_loss = 0;
    for (int step = 0; step < 20; ++step) {
      optimizer.zero_grad();
      const Tensor diff = w - target;
      Tensor loss = sum(diff * diff);
      REQUIRE_NOTHROW(loss.backward());
      REQUIRE_NOTHROW(optimizer.step());
      (step == 0 ? first_loss : last_loss) = loss.item();
    }
    CHECK(first_loss == Approx(10.0));  // 3^2 + 1^2 at w = 0
    CHECK(last_loss < first_loss / 4);
  }
}
