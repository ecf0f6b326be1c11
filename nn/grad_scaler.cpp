#include "tapegrad/nn/grad_scaler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/ops/elementwise.h"

namespace tg {
namespace {

// The smallest scale update() backs off to: f32's smallest normal number, 2^-126. PyTorch halves
// on and on, and after ~150 overflows in a row the f32 scale underflows to 0: the loss is scaled
// to 0 and unscaled by 1/0 = inf, and 0 * inf = NaN reaches the weights. Floored, the reciprocal
// 2^126 stays finite. (By then no f16 step has been finite for 140 steps; `tapegrad train` stops
// long before, once the scale falls below f16's smallest subnormal: train/trainer.cpp.)
constexpr float kSmallestScale = std::numeric_limits<float>::min();

}  // namespace

GradScaler::GradScaler(GradScalerOptions options)
    : options_(options), scale_(static_cast<float>(options.init_scale)) {
  TG_CHECK(options.init_scale >= kSmallestScale &&
               std::isfinite(static_cast<float>(options.init_scale)),
           "GradScaler: init_scale must be a finite f32 number >= ", kSmallestScale,
           " (f32's smallest normal), got ", options.init_scale);
  TG_CHECK(options.growth_factor > 1, "GradScaler: growth_factor must be > 1, got ",
           options.growth_factor);
  TG_CHECK(options.backoff_factor > 0 && options.backoff_factor < 1,
           "GradScaler: backoff_factor must be in (0, 1), got ", options.backoff_factor);
  TG_CHECK(options.growth_interval > 0, "GradScaler: growth_interval must be positive, got ",
           options.growth_interval);
}

Tensor GradScaler::scale(const Tensor& loss) const {
  TG_CHECK(loss.defined(), "GradScaler.scale: the loss is undefined");
  if (!options_.enabled) return loss;
  return mul(loss, static_cast<double>(scale_));
}

void GradScaler::unscale(Optimizer& optimizer) {
  if (!options_.enabled) return;
  PerOptimizer& state = this_iteration_[&optimizer];
  TG_CHECK(!state.unscaled, "GradScaler.unscale: already called for this optimizer since the last update()");
  TG_CHECK(!state.stepped, "GradScaler.unscale: called after step(); call it before step()");
  NoGrad no_grad;
  // The reciprocal in double, rounded to f32, then an f32 product: PyTorch's arithmetic.
  const double inv_scale = static_cast<float>(1.0 / static_cast<double>(scale_));
  // One f32 flag per device, set by the kernel when a gradient holds inf or NaN; read back once.
  std::vector<Tensor> found_inf_flags;
  for (const Tensor& param : optimizer.params()) {
    const Tensor grad = param.grad();
    if (!grad.defined()) continue;
    const Tensor values = grad.contiguous();
    Tensor unscaled = empty_like(values);  // a new tensor: gradients may be shared
    kernels(grad.device()).unscale_and_check(
        values, inv_scale, unscaled, accumulator_on(found_inf_flags, grad.device(), DType::f32));
    param.set_grad(unscaled);
  }
  for (const Tensor& flag : found_inf_flags) state.found_inf = state.found_inf || flag.item() != 0;
  state.unscaled = true;
}

bool GradScaler::step(Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return true;
  }
  if (!this_iteration_[&optimizer].unscaled) unscale(optimizer);
  PerOptimizer& state = this_iteration_[&optimizer];
  TG_CHECK(!state.stepped, "GradScaler.step: already called for this optimizer since the last update()");
  state.stepped = true;
  if (state.found_inf) return false;  // the weights and the optimizer's state stay as they are
  optimizer.step();
  return true;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  TG_CHECK(!this_iteration_.empty(), "GradScaler.update: no unscale() or step() since the last update()");
  bool found_inf = false;
  for (const auto& [optimizer, state] : this_iteration_) found_inf = found_inf || state.found_inf;
  this_iteration_.clear();
  if (found_inf) {
    scale_ = std::max(static_cast<float>(scale_ * options_.backoff_factor), kSmallestScale);
    growth_tracker_ = 0;
    return;
  }
  if (++growth_tracker_ == options_.growth_interval) {
    const float grown = static_cast<float>(scale_ * options_.growth_factor);
    if (std::isfinite(grown)) scale_ = grown;
    growth_tracker_ = 0;
  }
}

double GradScaler::get_scale() const { return options_.enabled ? scale_ : 1.0; }

GradScalerState GradScaler::state() const { return {scale_, growth_tracker_}; }

void GradScaler::load_state(const GradScalerState& state) {
  TG_CHECK(state.scale >= kSmallestScale && std::isfinite(static_cast<float>(state.scale)),
           "GradScaler.load_state: scale must be a finite f32 number >= ", kSmallestScale,
           " (f32's smallest normal), got ", state.scale);
  TG_CHECK(state.growth_tracker >= 0 && state.growth_tracker < options_.growth_interval,
           "GradScaler.load_state: growth_tracker ", state.growth_tracker, " is outside [0, ",
           options_.growth_interval, ")");
  scale_ = static_cast<float>(state.scale);
  growth_tracker_ = state.growth_tracker;
  this_iteration_.clear();
}

}  // namespace tg
