// The vectorised f32 Adam step (cpu/fast/optim_avx2.cpp) against the plain loop of
// cpu/optim.cpp (f64 arithmetic, rounded once): the same kernel call with and without a
// FastPathsOff scope, on sizes that exercise the 8-lane loop, its tail and the threads' chunks.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "tapegrad/autograd/kernels.h"
#include "tapegrad/ops/ops.h"
#include "tapegrad/runtime/features.h"
#include "tests/support/skip.h"

using namespace tg;

namespace {

Tensor random_tensor(int64_t count, std::mt19937& gen, double low, double high) {
  std::uniform_real_distribution<double> dist(low, high);
  std::vector<double> values(count);
  for (double& x : values) x = dist(gen);
  return from_values(values, {count}, DType::f32);
}

struct AdamState {
  Tensor param, exp_avg, exp_avg_sq;
};

// Five steps of `step` with the gradients given, from the same start.
AdamState run(const AdamStep& step, const std::vector<Tensor>& grads, const AdamState& start) {
  AdamState s{start.param.clone(), start.exp_avg.clone(), start.exp_avg_sq.clone()};
  for (const Tensor& grad : grads) kernels(kCPU).adam_step(step, s.param, grad, s.exp_avg, s.exp_avg_sq);
  return s;
}

void require_close(const Tensor& fast, const Tensor& plain, double relative, double absolute) {
  const std::vector<double> a = fast.to_host_f64(), b = plain.to_host_f64();
  REQUIRE(a.size() == b.size());
  double worst = 0;
  size_t worst_at = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double error = std::abs(a[i] - b[i]) / (absolute + relative * std::abs(b[i]));
    if (error > worst) worst = error, worst_at = i;
  }
  INFO("worst error / tolerance " << worst << " at " << worst_at << ": " << a[worst_at] << " vs "
                                  << b[worst_at]);
  REQUIRE(worst <= 1.0);
}

}  // namespace

TEST_CASE("Adam f32: the AVX2 path agrees with the plain loop", "[optim][simd]") {
  if (tg::testing::skip_unless(cpu::cpu_has_avx2_fma(), "this CPU has no AVX2 + FMA")) return;
  std::mt19937 gen(7);
  AdamStep adam;  // step 3 of Adam(lr 1e-2, betas 0.9, 0.999), L2 weight decay 0.1
  adam.lr = 1e-2;
  adam.bias_correction1 = 1 - std::pow(0.9, 3);
  adam.bias_correction2 = 1 - std::pow(0.999, 3);
  adam.beta1 = 0.9, adam.beta2 = 0.999, adam.eps = 1e-8, adam.l2 = 0.1;
  AdamStep adamw = adam;  // AdamW: decoupled decay, no L2 term
  adamw.l2 = 0, adamw.decay_factor = 1 - 1e-2 * 0.05;

  for (const int64_t count : {1, 7, 8, 9, 23, 16384, 16385, 40001}) {
    for (const AdamStep& step : {adam, adamw}) {
      INFO(count << " elements, " << (step.l2 > 0 ? "Adam" : "AdamW"));
      const AdamState start{random_tensor(count, gen, -2, 2), random_tensor(count, gen, -0.1, 0.1),
                            random_tensor(count, gen, 0, 0.01)};
      std::vector<Tensor> grads;
      for (int i = 0; i < 5; ++i) grads.push_back(random_tensor(count, gen, -1, 1));
      grads[2] = zeros({count}, DType::f32);  // a step without gradient: m and v only decay
      REQUIRE(cpu::fast_paths_enabled());
      const AdamState fast = run(step, grads, start);
      AdamState plain;
      {
        const cpu::FastPathsOff off;
        REQUIRE_FALSE(cpu::fast_paths_enabled());
        plain = run(step, grads, start);
      }
      // f32 arithmetic against f64 rounded once: a few f32 roundings (2^-24 each) of the terms apart.
      require_close(fast.exp_avg, plain.exp_avg, 1e-6, 1e-7);  // m can cancel to near 0
      require_close(fast.exp_avg_sq, plain.exp_avg_sq, 1e-6, 1e-12);
      require_close(fast.param, plain.param, 1e-6, 1e-7);
      // And the steps moved the parameters by far more than that tolerance.
      const std::vector<double> before = start.param.to_host_f64(), after = fast.param.to_host_f64();
      double moved = 0;
      for (size_t i = 0; i < before.size(); ++i) moved = std::max(moved, std::abs(after[i] - before[i]));
      REQUIRE(moved > 1e-3);
    }
  }
}
