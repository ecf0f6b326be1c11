#pragma once
// Learning-rate schedules: pure functions of the step, applied with optimizer.set_lr(...).
#include <cstdint>

namespace tg {

// Linear warm-up, then cosine decay to min_lr (what PyTorch users write as a LambdaLR).
// `step` is the 0-based index of the optimizer step about to run; call
// optimizer.set_lr(schedule.lr_at(step)) before optimizer.step().
//
//   step < warmup:           base_lr * (step + 1) / warmup
//                            (the first step is not wasted on lr 0; step warmup-1 reaches base_lr)
//   warmup <= step < total:  min_lr + (base_lr - min_lr) * (1 + cos(pi * progress)) / 2,
//                            progress = (step - warmup) / (total - warmup), from 0 towards 1
//   step >= total:           min_lr
class WarmupCosine {
 public:
  WarmupCosine(double base_lr, int64_t warmup_steps, int64_t total_steps, double min_lr = 0.0);

  double lr_at(int64_t step) const;

  double base_lr() const { return base_lr_; }
  double min_lr() const { return min_lr_; }
  int64_t warmup_steps() const { return warmup_steps_; }
  int64_t total_steps() const { return total_steps_; }

 private:
  double base_lr_;
  int64_t warmup_steps_;
  int64_t total_steps_;
  double min_lr_;
};

// Linear warm-up, then base_lr for good: PyTorch's default (an optimizer and no scheduler) when
// warmup_steps is 0. It is a WarmupCosine whose decay ends where it starts (min_lr = base_lr).
inline WarmupCosine warmup_constant(double base_lr, int64_t warmup_steps, int64_t total_steps) {
  return WarmupCosine(base_lr, warmup_steps, total_steps, /*min_lr=*/base_lr);
}

}  // namespace tg
