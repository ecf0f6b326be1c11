// The trace recorder (runtime/trace.h) in process: it passes every event on to the profiler below
// it, nests slices, records only inside steps and keeps whole steps under its cap; and the
// schedule (runtime/profile_schedule.h) that chooses the steps. The command line's
// --profile-trace is tested in tests/cli/test_profile_trace.cpp, the Profiler's steps and
// export_chrome_trace in tests/runtime/test_profiler.cpp.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "tapegrad/autograd/rng.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/ops/ops.h"
#include "tapegrad/runtime/profile_schedule.h"
#include "tapegrad/runtime/profiler.h"
#include "tapegrad/runtime/tape_observer.h"
#include "tapegrad/runtime/trace.h"
#include "tests/support/trace_events.h"

using namespace tg::testing;
using nlohmann::json;

TEST_CASE("profile schedule: phases like torch.profiler.schedule", "[trace]") {
  using tg::StepPhase;
  const tg::ProfileSchedule every;
  REQUIRE(every.every_step());
  REQUIRE(every.phase(0) == StepPhase::active);
  REQUIRE(every.phase(1000) == StepPhase::active);
  REQUIRE(every.describe() == "every step");

  const tg::ProfileSchedule once{.wait = 1, .warmup = 2, .active = 3};
  const std::vector<StepPhase> expected = {StepPhase::wait,   StepPhase::warmup, StepPhase::warmup,
                                           StepPhase::active, StepPhase::active, StepPhase::active,
                                           StepPhase::wait,   StepPhase::wait};
  for (size_t i = 0; i < expected.size(); ++i) REQUIRE(once.phase(static_cast<int64_t>(i)) == expected[i]);

  const tg::ProfileSchedule twice{.wait = 1, .warmup = 0, .active = 1, .repeat = 2};
  REQUIRE(twice.phase(1) == StepPhase::active);
  REQUIRE(twice.phase(3) == StepPhase::active);
  REQUIRE(twice.phase(5) == StepPhase::wait);
  const tg::ProfileSchedule forever{.wait = 2, .warmup = 0, .active = 1, .repeat = 0};
  REQUIRE(forever.phase(2) == StepPhase::active);
  REQUIRE(forever.phase(3001) == StepPhase::wait);
  REQUIRE(forever.phase(3002) == StepPhase::active);

  every.check("Profiler");
  once.check("Profiler");
  forever.check("Profiler");
  REQUIRE_THROWS_WITH((tg::ProfileSchedule{.wait = -1, .active = 1}.check("Profiler")),
                      Catch::StartsWith("Profiler: a schedule's numbers must be >= 0, got wait -1"));
  REQUIRE_THROWS_WITH((tg::ProfileSchedule{.active = 1, .repeat = -2}.check("Profiler")),
                      Catch::Contains("repeat -2"));
  REQUIRE_THROWS_WITH((tg::ProfileSchedule{.wait = 2, .active = 0}.check("Profiler")),
                      Catch::StartsWith("Profiler: a schedule with wait 2 and warmup 0 needs active >= 1"));
}

TEST_CASE("trace recorder: passes events on, nests slices, and keeps whole steps under the cap", "[trace]") {
  const tg::Tensor w = tg::randn({3, 3}).requires_grad_();
  const tg::Tensor x = tg::randn({2, 3});
  auto step = [&] {
    const tg::Tensor loss = tg::sum(tg::matmul(x, w));
    loss.backward();
    const tg::ProfileRegion region("update");
    w.zero_grad();
  };

  SECTION("alongside a profiler, which still sees every op") {
    {
      tg::Profiler profiler;
      tg::TraceRecorder recorder({});
      for (int64_t i = 1; i <= 2; ++i) {
        recorder.begin_step(i);
        step();
        recorder.end_step();
      }
      const json trace = json::parse(recorder.trace_json());
      REQUIRE(slices_named(trace, "matmul").size() == 2);
      REQUIRE(slices_named(trace, "matmul").front()["args"]["input shapes"] == json::parse("[[2, 3], [3, 3]]"));
      REQUIRE(slices_named(trace, "matmul.backward").size() == 2);
      REQUIRE(slices_named(trace, "update").front()["cat"] == "region");
    }
    REQUIRE(tg::tape_observer() == nullptr);  // each took itself out
    const tg::ProfileTable table = tg::profile_results();
    const auto row = std::find_if(table.begin(), table.end(), [](const tg::ProfileRow& r) { return r.name == "matmul"; });
    REQUIRE(row != table.end());
    REQUIRE(row->calls == 2);
  }
  SECTION("ops outside a step are not recorded") {
    tg::TraceRecorder recorder({});
    step();
    REQUIRE(events_with(json::parse(recorder.trace_json()), "X").empty());
  }
  SECTION("the cap stops recording after the last whole step and says so") {
    // One step here: sum, matmul, backward(), sum.backward, matmul.backward, update, the step: 7
    // slices, 14 events. A cap of 30 keeps two steps.
    tg::TraceRecorder recorder({.max_events = 30});
    for (int64_t i = 1; i <= 5; ++i) {
      recorder.begin_step(i);
      step();
      recorder.end_step();
    }
    const json trace = json::parse(recorder.trace_json());
    REQUIRE(step_slice_names(trace) == std::vector<std::string>{"ProfilerStep#1", "ProfilerStep#2"});
    REQUIRE(trace["metadata"]["truncated"] == true);
    REQUIRE_THAT(trace["metadata"]["note"].get<std::string>(), Catch::Contains("step 3"));
    REQUIRE(events_with(trace, "X").size() + events_with(trace, "C").size() <= 30);
  }
  SECTION("the cap also bounds a step that never ends") {
    tg::TraceRecorder recorder({.max_events = 30});
    recorder.begin_step(1);
    for (int i = 0; i < 10; ++i) step();  // 60 slices, and no end_step
    const json trace = json::parse(recorder.trace_json());
    REQUIRE(trace["metadata"]["truncated"] == true);
    REQUIRE_THAT(trace["metadata"]["note"].get<std::string>(), Catch::Contains("step 1"));
    REQUIRE(events_with(trace, "X").empty());
  }
  SECTION("the caller's metadata beside the recorder's own") {
    tg::TraceRecorder recorder({.process_name = "test run", .metadata = {{"command", "test"}, {"seed", "3"}}});
    recorder.begin_step(1);
    step();
    recorder.end_step();
    recorder.begin_step(2);  // begun, not ended: not a step seen
    const json trace = json::parse(recorder.trace_json());
    REQUIRE(trace["metadata"]["command"] == "test");
    REQUIRE(trace["metadata"]["seed"] == "3");
    REQUIRE(trace["metadata"]["steps_seen"] == 1);
    REQUIRE(trace["metadata"]["steps_written"] == 1);
    REQUIRE(trace["metadata"]["schedule"] == "every step");
    const std::vector<json> names = events_with(trace, "M");
    REQUIRE(std::any_of(names.begin(), names.end(), [](const json& e) {
      return e["name"] == "process_name" && e["args"]["name"] == "test run";
    }));
  }
}
