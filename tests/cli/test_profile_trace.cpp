// --profile-trace and --profile-schedule on `tapegrad train` and `tapegrad bench`, run as
// programs: the Chrome trace of the scheduled steps, beside --profile's table, and the flags'
// errors. The recorder itself is tested in process in tests/runtime/test_trace.cpp.
#include <algorithm>
#include <set>

#include "tests/cli/cli_support.h"
#include "tests/support/trace_events.h"

using namespace tg::testing;
using nlohmann::json;

namespace {

const std::string kTiny = " --dim 8 --heads 2 --batch 4 --threads 1 --seed 3";

}  // namespace

TEST_CASE("train --profile-trace writes a Chrome trace of the scheduled steps", "[trace][cli]") {
  TempDir dir;
  write_bytes(dir.file("series.csv"), small_csv());
  // 6 steps, schedule wait 1, warmup 1, active 3: steps 3, 4 and 5 are written; 1, 2 and 6 are not.
  const CliResult run = run_cli("train --task timeseries --data " + dir.file("series.csv") +
                                    " --window 6 --steps 6 --profile-trace " + dir.file("trace.json") +
                                    " --profile-schedule 1,1,3" + kTiny,
                                dir);
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  REQUIRE_THAT(run.err, Catch::Contains("wrote " + dir.file("trace.json")));
  const json trace = json::parse(read_bytes(dir.file("trace.json")));
  REQUIRE(trace["displayTimeUnit"] == "ms");
  REQUIRE(trace["traceEvents"].is_array());

  SECTION("the schedule: wait and warmup steps are absent, the active ones whole") {
    REQUIRE(step_slice_names(trace) == std::vector<std::string>{"ProfilerStep#3", "ProfilerStep#4", "ProfilerStep#5"});
    std::set<int64_t> steps;
    for (const json& slice : events_with(trace, "X")) steps.insert(slice["args"]["step"].get<int64_t>());
    REQUIRE(steps == std::set<int64_t>{3, 4, 5});
    REQUIRE(trace["metadata"]["steps_written"] == 3);
    REQUIRE(trace["metadata"]["steps_seen"] == 6);
    REQUIRE(trace["metadata"]["truncated"] == false);
    REQUIRE(trace["metadata"]["device"] == "cpu");
    REQUIRE(slices_named(trace, "AdamW.step").size() == 3);
    REQUIRE(slices_named(trace, "backward()").size() == 3);
  }
  SECTION("forward and backward slices named after the ops, with the model's real shapes") {
    // TimeSeriesModel: 2 input columns -> dim 8; 2 heads of 4; batch 4 x window 6.
    const std::vector<json> linears = slices_named(trace, "linear");
    REQUIRE(!linears.empty());
    const json input_projection = json::parse("[[4, 6, 2], [8, 2], [8]]");
    REQUIRE(std::any_of(linears.begin(), linears.end(),
                        [&](const json& s) { return s["args"]["input shapes"] == input_projection; }));
    REQUIRE(linears.front()["cat"] == "forward");
    // Self-attention: q, k, v on one stacked GEMM ([3 x 8, 8] weights), attended in place
    const std::vector<json> projections = slices_named(trace, "stacked_linear");
    REQUIRE(projections.size() == 3);  // one a step
    REQUIRE(projections.front()["args"]["input shapes"] ==
            json::parse("[[4, 6, 8], [8, 8], [8, 8], [8, 8], [8], [8], [8]]"));
    const std::vector<json> attention = slices_named(trace, "packed_self_attention");
    REQUIRE(attention.size() == 3);
    REQUIRE(attention.front()["args"]["input shapes"] == json::parse("[[4, 6, 24]]"));
    const std::vector<json> backward = slices_named(trace, "linear.backward");
    REQUIRE(!backward.empty());
    REQUIRE(backward.front()["cat"] == "backward");
    REQUIRE(slices_named(trace, "packed_self_attention.backward").size() == 3);
    for (const json& slice : events_with(trace, "X")) {
      REQUIRE(slice["dur"].get<double>() >= 0);
      REQUIRE(slice["args"]["bytes allocated"].get<int64_t>() >= 0);
      REQUIRE(slice.contains("pid"));
      REQUIRE(slice.contains("tid"));
    }
    REQUIRE(std::any_of(linears.begin(), linears.end(),
                        [](const json& s) { return s["args"]["bytes allocated"].get<int64_t>() > 0; }));
  }
  SECTION("slices nest: each op lies inside its step") {
    for (const json& step : slices_named(trace, "ProfilerStep#4")) {
      const double start = step["ts"], end = start + step["dur"].get<double>();
      for (const json& slice : events_with(trace, "X")) {
        if (slice["args"]["step"] != 4) continue;
        REQUIRE(slice["ts"].get<double>() >= start - 1e-3);
        REQUIRE(slice["ts"].get<double>() + slice["dur"].get<double>() <= end + 1e-3);
      }
    }
  }
  SECTION("a memory counter sampled at each slice") {
    const std::vector<json> counters = events_with(trace, "C");
    REQUIRE(counters.size() == events_with(trace, "X").size());
    double previous = -1;
    for (const json& counter : counters) {
      REQUIRE(counter["name"] == "memory");
      REQUIRE(counter["args"]["allocated bytes"].get<int64_t>() > 0);
      REQUIRE(counter["ts"].get<double>() >= previous);  // in time order
      previous = counter["ts"];
    }
  }
}

TEST_CASE("train --profile-trace and --profile together: the table stays, the trace gets every step", "[trace][cli]") {
  TempDir dir;
  write_bytes(dir.file("series.csv"), small_csv());
  const CliResult run = run_cli("train --task timeseries --data " + dir.file("series.csv") +
                                    " --window 6 --steps 2 --profile --profile-trace " + dir.file("t.json") + kTiny,
                                dir);
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  REQUIRE_THAT(run.err, Catch::Contains("per-op profile of 2 steps") && Catch::Contains("linear.backward") &&
                            Catch::Contains("AdamW.step"));
  const json trace = json::parse(read_bytes(dir.file("t.json")));
  REQUIRE(step_slice_names(trace) == std::vector<std::string>{"ProfilerStep#1", "ProfilerStep#2"});
  REQUIRE(trace["metadata"]["schedule"] == "every step");
}

TEST_CASE("bench --profile-trace traces the timed steps", "[trace][cli][bench]") {
  TempDir dir;
  const CliResult run = run_cli("bench --workload textcls-small --steps 3 --warmup 0 --threads 1 --profile-trace " +
                                    dir.file("bench.json") + " --profile-schedule 0,1,2",
                                dir);
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  const json trace = json::parse(read_bytes(dir.file("bench.json")));
  REQUIRE(step_slice_names(trace) == std::vector<std::string>{"ProfilerStep#2", "ProfilerStep#3"});
  REQUIRE(slices_named(trace, "Adam.step").size() == 2);
  REQUIRE(slices_named(trace, "embedding").size() == 2);
  REQUIRE(trace["metadata"]["workload"] == "textcls-small");
}

TEST_CASE("trace flags: bad values exit 2 with one line, and nothing is trained", "[trace][cli]") {
  TempDir dir;
  write_bytes(dir.file("series.csv"), small_csv());
  const std::string train = "train --task timeseries --data " + dir.file("series.csv") + " --window 6 --steps 2" + kTiny;
  const std::string trace = " --profile-trace " + dir.file("t.json");
  require_one_line_error(run_cli(train + trace + " --profile-schedule 1,2", dir), "--profile-schedule");
  require_one_line_error(run_cli(train + trace + " --profile-schedule 1,2,3,4,5", dir), "wait,warmup,active");
  require_one_line_error(run_cli(train + trace + " --profile-schedule=-1,1,1", dir), "--profile-schedule");
  require_one_line_error(run_cli(train + trace + " --profile-schedule 1,1,0", dir), "active must be at least 1");
  require_one_line_error(run_cli(train + trace + " --profile-schedule 1,x,2", dir), "--profile-schedule");
  require_one_line_error(run_cli(train + " --profile-schedule 1,1,1", dir), "needs --profile-trace");
  require_one_line_error(run_cli(train + " --profile-trace " + dir.path.string(), dir), "is a directory");
  require_one_line_error(run_cli(train + " --profile-trace " + dir.file("series.csv"), dir), "is the --data file");
  require_one_line_error(run_cli("bench --workload sgemm --steps 1 --profile-trace " + dir.path.string(), dir),
                         "is a directory");
  require_one_line_error(run_cli("bench --workload sgemm --steps 1 --profile-schedule 1,1", dir),
                         "needs --profile-trace");
  REQUIRE(!std::filesystem::exists(dir.file("t.json")));
  REQUIRE(read_bytes(dir.file("series.csv")) == small_csv());
}
