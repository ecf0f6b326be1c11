#pragma once
// Which steps a trace records, like torch.profiler.schedule(wait, warmup, active, repeat): a cycle
// of `wait` steps that are not recorded, `warmup` steps that are recorded and thrown away (the
// first steps pay for caches, allocations and the recorder's own start), and `active` steps that
// are kept. `repeat` cycles run back to back, then nothing more is recorded; repeat 0 cycles until
// the run ends. The default schedule keeps every step.
//
//   --profile-schedule 1,1,3     step 1 skipped, step 2 recorded and dropped, steps 3-5 kept
//   --profile-schedule 2,0,1,0   every third step kept
#include <cstdint>
#include <string>

namespace tg::train {

enum class StepPhase { wait, warmup, active };

struct ProfileSchedule {
  int64_t wait = 0, warmup = 0, active = 0;  // active 0: no schedule, every step is active
  int64_t repeat = 1;                        // cycles; 0: cycles until the run ends

  bool every_step() const { return active == 0; }
  // The phase of the `index`-th profiled step (0 = the first step the trace sees).
  StepPhase phase(int64_t index) const;
  // "wait,warmup,active,repeat", or "every step".
  std::string describe() const;
};

// Parses "wait,warmup,active" or "wait,warmup,active,repeat": integers, wait, warmup and repeat
// >= 0, active >= 1. tg::Error otherwise, starting with `flag`.
ProfileSchedule parse_profile_schedule(const std::string& text, const std::string& flag);

}  // namespace tg::train
