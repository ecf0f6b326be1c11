#pragma once
// --profile-schedule's text, on `tapegrad train` and `tapegrad bench`: the schedule of
// runtime/profile_schedule.h as "wait,warmup,active" or "wait,warmup,active,repeat".
//
//   --profile-schedule 1,1,3     step 1 skipped, step 2 recorded and dropped, steps 3-5 kept
//   --profile-schedule 2,0,1,0   every third step kept
#include <string>

#include "tapegrad/runtime/profile_schedule.h"

namespace tg::train {

// Parses "wait,warmup,active" or "wait,warmup,active,repeat": integers, wait, warmup and repeat
// >= 0, active >= 1. tg::Error otherwise, starting with `flag`.
ProfileSchedule parse_profile_schedule(const std::string& text, const std::string& flag);

}  // namespace tg::train
