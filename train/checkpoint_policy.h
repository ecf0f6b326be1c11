#pragma once
// When `tapegrad train` writes checkpoints during training and when it stops early: the policy of
// --save-every, --save-best and --patience, asked once a step by the trainer.
//
// - --save-every N writes the resumable checkpoint (what --save writes) to the --save path after
//   every N-th step, counted from the first step of the whole run (a resumed run saves at the
//   same steps as an uninterrupted one); not after the run's last step, which --save writes anyway.
// - The validation record: the best validation loss so far, the step it was measured after, and
//   how many evaluations since then did not improve on it. Every checkpoint stores it, so a
//   resumed run continues the count exactly. An improvement is a loss strictly below the best
//   (Keras's EarlyStopping with min_delta 0).
// - --save-best writes the resumable checkpoint to its path at each evaluation that improves on
//   the record; --patience K ends the run (normally: --save is written) once K evaluations in a
//   row have not improved on it.
#include <cstdint>
#include <limits>

namespace tg::train {

struct ValidationRecord {
  double best_loss = std::numeric_limits<double>::infinity();  // +inf until the first evaluation
  int64_t best_step = 0;               // the step after which best_loss was measured; 0: none yet
  int64_t evaluations_since_best = 0;  // evaluations after best_step that did not improve on it
  bool empty() const { return best_step == 0; }
};

// Records the validation `loss` measured after `step` (1-based); true when it is the best so far.
bool record_evaluation(ValidationRecord& record, double loss, int64_t step);

// True when `patience` (0: none) evaluations in a row have not improved on the best.
bool patience_exhausted(const ValidationRecord& record, int64_t patience);

// --save-every `every` (0: none): whether the checkpoint is due after `step` (1-based), the
// run's last step `last_step` excepted.
bool periodic_save_due(int64_t step, int64_t every, int64_t last_step);

}  // namespace tg::train
