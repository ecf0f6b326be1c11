#pragma once
// Dynamic loss scaling for f16 training: torch.cuda.amp.GradScaler's algorithm and defaults.
//
// f16's smallest normal number is 6e-5 (subnormals reach 6e-8): small gradients of an f16
// forward flush to zero. Multiplying the loss by a large scale S moves the whole backward pass
// up into f16's range; the f32 gradients of the master weights are then divided by S before the
// optimizer sees them. A scale too large overflows to inf/NaN: that step is skipped and S halved.
//
//   scaler.scale(loss).backward();
//   scaler.unscale(optimizer);          // optional: only to clip (or inspect) true gradients
//   clip_grad_norm(params, 1.0);
//   scaler.step(optimizer);             // unscales if not done; skips the step on inf/NaN
//   scaler.update();                    // backoff on overflow, growth after growth_interval
//
// update(): on overflow S *= backoff_factor, but never below f32's smallest normal number (2^-126,
// whose reciprocal is finite: a scale of 0 would unscale by inf), and the count of clean steps
// restarts; otherwise after growth_interval clean steps in a row S *= growth_factor (if still
// finite). The scale is an f32 number, as in PyTorch. bf16 has f32's exponent range and needs no scaling: a disabled
// scaler makes every call a pass-through (scale() returns the loss, step() just steps).
#include <cstdint>
#include <map>

#include "tapegrad/autograd/tensor.h"
#include "tapegrad/nn/optim.h"

namespace tg {

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;
};

// What a checkpoint keeps (PyTorch's state_dict has the same "scale" and "_growth_tracker").
struct GradScalerState {
  double scale = 65536.0;
  int64_t growth_tracker = 0;  // clean steps in a row since the scale last changed
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  // loss * scale (recorded, so backward carries the scale); the loss itself when disabled.
  Tensor scale(const Tensor& loss) const;
  // Replaces each gradient of the optimizer's parameters by grad * (1 / scale), computed in f32
  // (never in place: gradients may be shared), and notes whether any unscaled gradient is inf or
  // NaN (the scaled one was, or the product overflowed): then step() skips. At most once per
  // optimizer between update()s.
  void unscale(Optimizer& optimizer);
  // Unscales if unscale() was not called, then runs optimizer.step() unless a gradient was inf or
  // NaN. Returns whether the optimizer stepped. At most once per optimizer between update()s.
  bool step(Optimizer& optimizer);
  // Adjusts the scale from this iteration's overflow checks and starts the next iteration.
  void update();

  double get_scale() const;  // 1 when disabled, as PyTorch
  bool is_enabled() const { return options_.enabled; }
  const GradScalerOptions& options() const { return options_; }

  GradScalerState state() const;
  void load_state(const GradScalerState& state);

 private:
  struct PerOptimizer {
    bool unscaled = false, stepped = false, found_inf = false;
  };
  GradScalerOptions options_;
  float scale_;
  int64_t growth_tracker_ = 0;
  std::map<const Optimizer*, PerOptimizer> this_iteration_;
};

}  // namespace tg
