#include "tapegrad/train/train_step.h"

#include <optional>

#include "tapegrad/runtime/autocast.h"
#include "tapegrad/runtime/profiler.h"

namespace tg::train {

TrainStepResult train_step(const std::function<Tensor()>& loss, Optimizer& optimizer, GradScaler& scaler,
                           const TrainStepOptions& options) {
  TrainStepResult result;
  Tensor value;
  {
    const Autocast autocast(options.autocast);
    value = loss();
  }
  result.loss_scale = scaler.get_scale();  // before update() changes it
  scaler.scale(value).backward();
  if (options.reduce_gradients) {
    const ProfileRegion region("allreduce");
    options.reduce_gradients();
  }
  // Clipping, inspection and the norm's check see the true gradients, not the scaled ones.
  const bool check_norm = static_cast<bool>(options.check_gradient_norm);
  if (options.clip > 0 || options.inspect_gradients || check_norm) scaler.unscale(optimizer);
  if (options.inspect_gradients) options.inspect_gradients();
  std::optional<double> norm;  // computed once, for the check and clipping both
  if (check_norm) {
    norm = grad_norm(optimizer.params());
    options.check_gradient_norm(*norm);
  }
  if (options.clip > 0) clip_grad_norm(optimizer.params(), options.clip, norm);
  {
    const ProfileRegion region(optimizer.name(), ".step");
    result.skipped = !scaler.step(optimizer);  // unscales first if not done above
    scaler.update();
  }
  optimizer.zero_grad();
  result.loss = value.item();  // after the step: on a GPU, no wait between forward and backward
  return result;
}

}  // namespace tg::train
