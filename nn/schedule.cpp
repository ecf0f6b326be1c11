#include "tapegrad/nn/schedule.h"

#include <cmath>
#include <numbers>

#include "tapegrad/autograd/error.h"

namespace tg {

WarmupCosine::WarmupCosine(double base_lr, int64_t warmup_steps, int64_t total_steps,
                           double min_lr)
    : base_lr_(base_lr), warmup_steps_(warmup_steps), total_steps_(total_steps), min_lr_(min_lr) {
  TG_CHECK(base_lr >= 0, "WarmupCosine: base_lr ", base_lr, " must be >= 0");
  TG_CHECK(min_lr >= 0 && min_lr <= base_lr, "WarmupCosine: min_lr ", min_lr,
           " must be in [0, base_lr = ", base_lr, "]");
  TG_CHECK(warmup_steps >= 0, "WarmupCosine: warmup_steps ", warmup_steps, " must be >= 0");
  TG_CHECK(total_steps >= warmup_steps, "WarmupCosine: total_steps ", total_steps,
           " must be >= warmup_steps ", warmup_steps);
}

double WarmupCosine::lr_at(int64_t step) const {
  TG_CHECK(step >= 0, "WarmupCosine.lr_at: step ", step, " must be >= 0");
  if (step < warmup_steps_) {
    return base_lr_ * static_cast<double>(step + 1) / static_cast<double>(warmup_steps_);
  }
  if (step >= total_steps_) return min_lr_;
  const double progress = static_cast<double>(step - warmup_steps_) /
                          static_cast<double>(total_steps_ - warmup_steps_);
  return min_lr_ + (base_lr_ - min_lr_) * 0.5 * (1 + std::cos(std::numbers::pi * progress));
}

}  // namespace tg
