// --profile-schedule's text (train/profile_schedule_flag.h): the numbers it accepts, and one
// error starting with the flag for everything else.
#include <catch2/catch.hpp>

#include <vector>

#include "tapegrad/train/profile_schedule_flag.h"

TEST_CASE("the profile-schedule flag: wait,warmup,active[,repeat] into a schedule", "[trace]") {
  using tg::StepPhase;
  const auto once = tg::train::parse_profile_schedule("1,2,3", "--profile-schedule");
  REQUIRE(once.wait == 1);
  REQUIRE(once.warmup == 2);
  REQUIRE(once.active == 3);
  REQUIRE(once.repeat == 1);  // the default: one cycle
  const std::vector<StepPhase> expected = {StepPhase::wait,   StepPhase::warmup, StepPhase::warmup,
                                           StepPhase::active, StepPhase::active, StepPhase::active,
                                           StepPhase::wait,   StepPhase::wait};
  for (size_t i = 0; i < expected.size(); ++i) REQUIRE(once.phase(static_cast<int64_t>(i)) == expected[i]);
  const auto forever = tg::train::parse_profile_schedule("2,0,1,0", "--profile-schedule");
  REQUIRE(forever.repeat == 0);
  REQUIRE(forever.describe() == "wait 2, warmup 0, active 1, repeat 0 (until the end)");

  for (const char* bad : {"1,2", "", "1,2,3,4,5", "-1,1,1", "1,1,0", "a,b,c", "1,2,3,", "1.5,1,1"}) {
    INFO(bad);
    REQUIRE_THROWS_WITH(tg::train::parse_profile_schedule(bad, "--profile-schedule"),
                        Catch::StartsWith("--profile-schedule"));
  }
}
