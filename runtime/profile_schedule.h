#pragma once
// Which steps a trace records, like torch.profiler.schedule(wait, warmup, active, repeat): a cycle
// of `wait` steps that are not recorded, `warmup` steps that are recorded and thrown away (the
// first steps pay for caches, allocations and the recorder's own start), and `active` steps that
// are kept. `repeat` cycles run back to back, then nothing more is recorded; repeat 0 cycles until
// the run ends. The default schedule keeps every step.
//
//   {.wait = 1, .warmup = 1, .active = 3}               step 0 skipped, 1 recorded and dropped, 2-4 kept
//   {.wait = 2, .warmup = 0, .active = 1, .repeat = 0}  every third step kept
//
// The command line spells it --profile-schedule wait,warmup,active[,repeat]
// (train/profile_schedule_flag.h parses it).
#include <cstdint>
#include <string>

namespace tg {

enum class StepPhase { wait, warmup, active };

struct ProfileSchedule {
  int64_t wait = 0, warmup = 0, active = 0;  // active 0: no schedule, every step is active
  int64_t repeat = 1;                        // cycles; 0: cycles until the run ends

  bool every_step() const { return active == 0; }
  // The phase of the `index`-th profiled step (0 = the first step the trace sees).
  StepPhase phase(int64_t index) const;
  // "wait 1, warmup 1, active 3, repeat 1", or "every step".
  std::string describe() const;
  // tg::Error starting with `what` unless every number is >= 0, and wait and warmup are 0 when
  // active is (a schedule without active steps would keep nothing).
  void check(const std::string& what) const;
};

}  // namespace tg
