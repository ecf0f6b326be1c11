#pragma once
// One training step, the one `tapegrad train` and `tapegrad bench` both run:
//
//   forward + loss (under autocast)  ->  scaler.scale(loss).backward()  ->  reduce_gradients
//   ->  unscale (when clipping, inspecting or checking)  ->  inspect_gradients (when given)
//   ->  grad_norm -> check_gradient_norm (when given)  ->  clip_grad_norm (when clipping)
//   ->  scaler.step(optimizer) + scaler.update()
//   ->  optimizer.zero_grad()
//
// PyTorch's AMP recipe (torch.autocast + GradScaler) written once. The learning rate is the
// caller's (set it on the optimizer before the step), and so is what to do with the result: log
// it, count skipped steps, stop on divergence.
#include <functional>

#include "tapegrad/autograd/dtype.h"
#include "tapegrad/autograd/tensor.h"
#include "tapegrad/nn/grad_scaler.h"
#include "tapegrad/nn/optim.h"

namespace tg::train {

struct TrainStepOptions {
  DType autocast = DType::f32;  // the forward and the loss run under tg::Autocast(autocast); f32: off
  double clip = 0;              // clip_grad_norm of the optimizer's parameters to this; 0: none
  // Called once the gradients are in place (unscaled, not yet clipped) and the weights not yet
  // updated, e.g. to measure them (--grad-stats); empty: nothing is called.
  std::function<void()> inspect_gradients = nullptr;
  // Called with the global gradient norm (nn/optim.h grad_norm: unscaled, before clipping; inf or
  // NaN when a gradient holds them), the gradients still in place, e.g. to judge it
  // (train/grad_health.h). With clipping on, the norm is the one clipping uses (computed once).
  std::function<void(double)> check_gradient_norm = nullptr;
  // Called right after backward, before anything reads the gradients: data-parallel training
  // averages them over the ranks here (distributed/gradient_sync.h); empty: nothing is called.
  std::function<void()> reduce_gradients = nullptr;
};

struct TrainStepResult {
  double loss = 0;        // the batch loss before the update, unscaled (NaN/inf when it diverged)
  bool skipped = false;   // the scaler found inf/NaN gradients and skipped the update
  double loss_scale = 1;  // the scale this step's backward ran with (1 when the scaler is disabled)
};

// `loss` computes the batch loss (a scalar) from the model's current weights. Gradients of the
// optimizer's parameters must be empty on entry; they are empty again on return. The scaler
// steps and updates once. Profiling, the update is the row "<optimizer>.step" (e.g. "Adam.step").
TrainStepResult train_step(const std::function<Tensor()>& loss, Optimizer& optimizer, GradScaler& scaler,
                           const TrainStepOptions& options = {});

}  // namespace tg::train
