#include "tapegrad/train/checkpoint_policy.h"

namespace tg::train {

bool record_evaluation(ValidationRecord& record, double loss, int64_t step) {
  if (record.empty() || loss < record.best_loss) {
    record = {.best_loss = loss, .best_step = step, .evaluations_since_best = 0};
    return true;
  }
  ++record.evaluations_since_best;
  return false;
}

bool patience_exhausted(const ValidationRecord& record, int64_t patience) {
  return patience > 0 && record.evaluations_since_best >= patience;
}

bool periodic_save_due(int64_t step, int64_t every, int64_t last_step) {
  return every > 0 && step % every == 0 && step != last_step;
}

}  // namespace tg::train
