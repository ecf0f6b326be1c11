#include "tapegrad/runtime/profile_schedule.h"

#include "tapegrad/autograd/error.h"

namespace tg {

StepPhase ProfileSchedule::phase(int64_t index) const {
  if (every_step()) return StepPhase::active;
  const int64_t cycle = wait + warmup + active;
  if (repeat > 0 && index / cycle >= repeat) return StepPhase::wait;  // the cycles are over
  const int64_t position = index % cycle;
  if (position < wait) return StepPhase::wait;
  if (position < wait + warmup) return StepPhase::warmup;
  return StepPhase::active;
}

std::string ProfileSchedule::describe() const {
  if (every_step()) return "every step";
  return "wait " + std::to_string(wait) + ", warmup " + std::to_string(warmup) + ", active " +
         std::to_string(active) + ", repeat " + std::to_string(repeat) + (repeat == 0 ? " (until the end)" : "");
}

void ProfileSchedule::check(const std::string& what) const {
  TG_CHECK(wait >= 0 && warmup >= 0 && active >= 0 && repeat >= 0, what,
           ": a schedule's numbers must be >= 0, got wait ", wait, ", warmup ", warmup, ", active ",
           active, ", repeat ", repeat);
  TG_CHECK(active > 0 || (wait == 0 && warmup == 0), what, ": a schedule with wait ", wait,
           " and warmup ", warmup, " needs active >= 1 (active 0 means every step is kept)");
}

}  // namespace tg
