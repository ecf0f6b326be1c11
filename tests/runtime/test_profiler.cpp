// The Profiler as torch.profiler.profile (runtime/profiler.h): a small model trained under a
// schedule, step() after every step, and the Chrome trace export_chrome_trace writes, read back
// as JSON: which steps it holds (by number), ops nested in their steps, valid event phases. Also
// the per-op table beside it, a Profiler without a trace, bad options, and a write that fails
// (nothing left where nothing was, the old file byte for byte where one was).
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/nn/layers.h"
#include "tapegrad/nn/module.h"
#include "tapegrad/nn/optim.h"
#include "tapegrad/ops/elementwise.h"
#include "tapegrad/ops/loss.h"
#include "tapegrad/runtime/profiler.h"
#include "tapegrad/runtime/tape_observer.h"
#include "tests/support/file_size_limit.h"
#include "tests/support/temp_files.h"
#include "tests/support/trace_events.h"

using namespace tg::testing;
using nlohmann::json;

namespace {

// 4 -> 8 -> 1 with tanh between, trained with Adam on fixed points: two "linear" ops a step.
struct TinyModel : tg::nn::Module {
  std::shared_ptr<tg::nn::Linear> hidden = register_module("hidden", std::make_shared<tg::nn::Linear>(4, 8));
  std::shared_ptr<tg::nn::Linear> output = register_module("output", std::make_shared<tg::nn::Linear>(8, 1));
  tg::Tensor forward(const tg::Tensor& x) const { return output->forward(tg::tanh(hidden->forward(x))); }
};

struct Training {
  TinyModel model;
  tg::Adam optimizer{model.parameters(), 0.01};
  tg::Tensor x = tg::randn({16, 4}), y = tg::randn({16, 1});

  void step() {
    optimizer.zero_grad();
    tg::mse_loss(model.forward(x), y).backward();
    const tg::ProfileRegion region("Adam.step");  // untaped work, named: a slice of its own
    optimizer.step();
  }
};

// Trains `steps` steps under a Profiler made with `options`, step() after each, and returns the
// trace it exports.
json trace_of_training(const tg::ProfilerOptions& options, int steps) {
  tg::manual_seed(0);
  Training training;
  TempDir dir;
  tg::Profiler profiler(options);
  for (int i = 0; i < steps; ++i) {
    training.step();
    profiler.step();
  }
  REQUIRE(profiler.step_num() == steps);
  profiler.export_chrome_trace(dir.file("trace.json"));
  return json::parse(read_bytes(dir.file("trace.json")));
}

// The step numbers of the trace's ProfilerStep slices, in order.
std::vector<int64_t> step_numbers(const json& trace) {
  std::vector<int64_t> numbers;
  for (const std::string& name : step_slice_names(trace)) {
    REQUIRE(name.rfind("ProfilerStep#", 0) == 0);
    numbers.push_back(std::stoll(name.substr(13)));
  }
  return numbers;
}

// The names of the files in `directory`.
std::set<std::string> files_in(const std::filesystem::path& directory) {
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) names.insert(entry.path().filename());
  return names;
}

}  // namespace

TEST_CASE("Profiler: a schedule's active steps, and only those, in the exported Chrome trace", "[profiler][trace]") {
  // Steps 0..5; wait 1, warmup 1, active 2, one cycle: step 0 skipped, 1 recorded and dropped,
  // 2 and 3 kept, 4 and 5 after the cycle.
  const json trace = trace_of_training({.schedule = {.wait = 1, .warmup = 1, .active = 2, .repeat = 1}}, 6);

  REQUIRE(trace["traceEvents"].is_array());
  REQUIRE(trace["displayTimeUnit"] == "ms");
  for (const json& event : trace["traceEvents"]) {
    const std::string phase = event["ph"];
    REQUIRE((phase == "X" || phase == "C" || phase == "M"));
    REQUIRE(event.contains("pid"));
    REQUIRE(event.contains("tid"));
  }
  REQUIRE(step_numbers(trace) == std::vector<int64_t>{2, 3});
  REQUIRE(trace["metadata"]["steps_seen"] == 6);
  REQUIRE(trace["metadata"]["steps_written"] == 2);
  REQUIRE(trace["metadata"]["schedule"] == "wait 1, warmup 1, active 2, repeat 1");

  // Every slice belongs to a kept step and lies inside that step's slice.
  std::map<int64_t, std::pair<double, double>> step_spans;  // step -> [start, end] in us
  for (const json& slice : events_with(trace, "X")) {
    if (slice["cat"] != "step") continue;
    const double start = slice["ts"];
    step_spans[slice["args"]["step"]] = {start, start + slice["dur"].get<double>()};
  }
  REQUIRE(step_spans.size() == 2);
  REQUIRE(step_spans[2].second <= step_spans[3].first + 1e-3);  // one after the other
  for (const json& slice : events_with(trace, "X")) {
    INFO(slice.dump());
    const int64_t step = slice["args"]["step"];
    REQUIRE(step_spans.count(step) == 1);
    REQUIRE(slice["dur"].get<double>() >= 0);
    REQUIRE(slice["ts"].get<double>() >= step_spans[step].first - 1e-3);  // ts rounded to the ns
    REQUIRE(slice["ts"].get<double>() + slice["dur"].get<double>() <= step_spans[step].second + 1e-3);
  }

  // The model's ops, forward and backward, in each kept step: two linears, a tanh, the loss.
  for (const char* op : {"linear", "linear.backward"}) {
    INFO(op);
    const std::vector<json> slices = slices_named(trace, op);
    REQUIRE(slices.size() == 4);  // two layers, two steps
    REQUIRE(slices.front()["cat"] == (std::string(op) == "linear" ? "forward" : "backward"));
  }
  REQUIRE(slices_named(trace, "linear").front()["args"]["input shapes"] == json::parse("[[16, 4], [8, 4], [8]]"));
  REQUIRE(slices_named(trace, "tanh").size() == 2);
  REQUIRE(slices_named(trace, "backward()").size() == 2);
  REQUIRE(slices_named(trace, "Adam.step").size() == 2);
  REQUIRE(events_with(trace, "C").size() == events_with(trace, "X").size());  // the memory track
}

TEST_CASE("Profiler: repeat 0 cycles until the end, the default schedule keeps every step", "[profiler][trace]") {
  SECTION("wait 1, active 1, repeat 0: every other step") {
    const json trace = trace_of_training({.schedule = {.wait = 1, .warmup = 0, .active = 1, .repeat = 0}}, 6);
    REQUIRE(step_numbers(trace) == std::vector<int64_t>{1, 3, 5});
  }
  SECTION("the same with repeat 1: one cycle") {
    const json trace = trace_of_training({.schedule = {.wait = 1, .warmup = 0, .active = 1, .repeat = 1}}, 6);
    REQUIRE(step_numbers(trace) == std::vector<int64_t>{1});
  }
  SECTION("the default options: every finished step, not the one in progress") {
    const json trace = trace_of_training({}, 3);
    REQUIRE(step_numbers(trace) == std::vector<int64_t>{0, 1, 2});
    REQUIRE(trace["metadata"]["schedule"] == "every step");
    REQUIRE(slices_named(trace, "linear").size() == 6);
  }
}

TEST_CASE("Profiler: the per-op table beside the trace, and a Profiler without one", "[profiler]") {
  tg::manual_seed(0);
  Training training;
  TempDir dir;
  auto linear_calls = [] {
    const tg::ProfileTable table = tg::profile_results();
    const auto row = std::find_if(table.begin(), table.end(), [](const tg::ProfileRow& r) { return r.name == "linear"; });
    return row == table.end() ? int64_t{0} : row->calls;
  };

  SECTION("with a trace: the table covers every step, whatever the schedule keeps") {
    {
      tg::Profiler profiler({.schedule = {.wait = 2, .warmup = 0, .active = 1}});
      for (int i = 0; i < 3; ++i) {
        training.step();
        profiler.step();
      }
      profiler.export_chrome_trace(dir.file("t.json"));
    }
    REQUIRE(tg::tape_observer() == nullptr);  // the recorder and the table's observer, both out
    REQUIRE(linear_calls() == 6);
    REQUIRE(step_numbers(json::parse(read_bytes(dir.file("t.json")))) == std::vector<int64_t>{2});
  }
  SECTION("Profiler(): the table alone; step() counts, there is no trace to export") {
    {
      tg::Profiler profiler;
      training.step();
      profiler.step();
      REQUIRE(profiler.step_num() == 1);
      REQUIRE_THROWS_WITH(profiler.export_chrome_trace(dir.file("t.json")),
                          Catch::Contains("export_chrome_trace") && Catch::Contains(dir.file("t.json")) &&
                              Catch::Contains("records no trace"));
      tg::Profiler no_trace({.record_trace = false});  // nested: leaves the table to the outer one
      training.step();
      REQUIRE_THROWS_AS(no_trace.export_chrome_trace(dir.file("t.json")), tg::Error);
    }
    REQUIRE(linear_calls() == 4);
    REQUIRE(files_in(dir.path).empty());
  }
  SECTION("nested in a table-only Profiler, a tracing one records its own steps") {
    {
      tg::Profiler outer;
      training.step();
      tg::Profiler inner(tg::ProfilerOptions{});
      training.step();
      inner.step();
      inner.export_chrome_trace(dir.file("t.json"));
    }
    REQUIRE(tg::tape_observer() == nullptr);
    REQUIRE(linear_calls() == 4);  // the outer table saw both steps
    const json trace = json::parse(read_bytes(dir.file("t.json")));
    REQUIRE(step_numbers(trace) == std::vector<int64_t>{0});
    REQUIRE(slices_named(trace, "linear").size() == 2);
  }
}

TEST_CASE("Profiler: bad options are a tg::Error, and nothing stays installed", "[profiler]") {
  REQUIRE_THROWS_WITH(tg::Profiler({.schedule = {.wait = -1, .active = 1}}),
                      Catch::StartsWith("Profiler: a schedule's numbers must be >= 0"));
  REQUIRE_THROWS_WITH(tg::Profiler({.schedule = {.wait = 1, .warmup = 1, .active = 0}}),
                      Catch::Contains("needs active >= 1"));
  REQUIRE_THROWS_WITH(tg::Profiler({.max_trace_events = 0}), Catch::Contains("max_trace_events must be at least 1"));
  // A device this machine does not have fails when the first step starts, inside the
  // constructor, after the table's observer was installed: it is taken out again.
  REQUIRE_THROWS_AS(tg::Profiler({.device = {tg::DeviceType::cuda, tg::kMaxCudaDevices - 1}}), tg::Error);
  REQUIRE(tg::tape_observer() == nullptr);
  // And the thread's next Profiler owns the table.
  {
    tg::Profiler profiler;
    tg::manual_seed(0);
    Training training;
    training.step();
  }
  const tg::ProfileTable table = tg::profile_results();
  REQUIRE(std::any_of(table.begin(), table.end(), [](const tg::ProfileRow& r) { return r.name == "linear"; }));
}

TEST_CASE("Profiler::export_chrome_trace: a path it cannot write is a tg::Error naming it, and no file", "[profiler][trace]") {
  tg::manual_seed(0);
  Training training;
  TempDir dir;
  tg::Profiler profiler(tg::ProfilerOptions{});
  training.step();
  profiler.step();

  SECTION("a directory that does not exist") {
    const std::string path = dir.file("missing/trace.json");
    REQUIRE_THROWS_WITH(profiler.export_chrome_trace(path),
                        Catch::StartsWith("Profiler::export_chrome_trace") && Catch::Contains(path) &&
                            Catch::Contains("No such file or directory"));
    REQUIRE(files_in(dir.path).empty());
  }
  SECTION("a directory where the file would go") {
    std::filesystem::create_directory(dir.file("out"));
    REQUIRE_THROWS_WITH(profiler.export_chrome_trace(dir.file("out")),
                        Catch::Contains(dir.file("out")) && Catch::Contains("is a directory"));
    REQUIRE(files_in(dir.path) == std::set<std::string>{"out"});
    REQUIRE(files_in(dir.file("out")).empty());
  }
  SECTION("a write that fails midway leaves the previous trace byte for byte, and no temporary") {
    const std::string path = dir.file("trace.json");
    profiler.export_chrome_trace(path);
    const std::string good = read_bytes(path);
    REQUIRE(json::parse(good)["metadata"]["steps_written"] == 1);
    training.step();
    profiler.step();
    {
      const FileSizeLimit limit(good.size() / 2);  // the new trace is longer than the old one
      REQUIRE_THROWS_WITH(profiler.export_chrome_trace(path),
                          Catch::Contains(path) && Catch::Contains("File too large"));
    }
    REQUIRE(read_bytes(path) == good);
    REQUIRE(files_in(dir.path) == std::set<std::string>{"trace.json"});
    profiler.export_chrome_trace(path);  // and with room again, the new one replaces it
    REQUIRE(json::parse(read_bytes(path))["metadata"]["steps_written"] == 2);
  }
}
