#include "tapegrad/runtime/profiler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <unordered_map>
#include <utility>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/storage.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/runtime/tape_observer.h"

namespace tg {
namespace {

thread_local constinit bool enabled = false;  // a Profiler is alive on this thread

using Clock = std::chrono::steady_clock;

struct Frame {  // an open region
  std::string name;
  uint64_t token;
  Clock::time_point start;
  int64_t start_bytes;
  double child_ms = 0;
  int64_t child_bytes = 0;
};

struct State {
  Clock::time_point mark;  // the last hook: the next forward op's time starts here
  int64_t mark_bytes = 0;
  std::vector<Frame> open;
  std::unordered_map<std::string, ProfileRow> rows;
};

thread_local State state;
thread_local uint64_t next_token = 1;

int64_t bytes_allocated() { return allocator_stats(kCPU).allocated_bytes; }

double ms_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

void add(const std::string& name, double total_ms, double self_ms, int64_t bytes, int64_t self_bytes) {
  ProfileRow& row = state.rows[name];
  row.calls += 1;
  row.total_ms += total_ms;
  row.self_ms += self_ms;
  row.bytes += bytes;
  row.self_bytes += self_bytes;
}

// Time and bytes since the last hook, charged as a leaf row `name` (a child of the open region).
void charge_gap(const std::string& name, Clock::time_point now, int64_t bytes) {
  const double ms = ms_between(state.mark, now);
  const int64_t allocated = bytes - state.mark_bytes;
  add(name, ms, ms, allocated, allocated);
  if (!state.open.empty()) {
    state.open.back().child_ms += ms;
    state.open.back().child_bytes += allocated;
  }
}

void set_mark(Clock::time_point now, int64_t bytes) {
  state.mark = now;
  state.mark_bytes = bytes;
}

std::string human_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (std::abs(value) >= 1024 && unit < 3) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.1f %s", value, units[unit]);
  return text;
}

// A region opens: returns its token.
uint64_t begin_region(std::string_view name, const char* suffix) {
  const Clock::time_point now = Clock::now();
  const int64_t bytes = bytes_allocated();
  // Inside a region the gap stays in that region's self time; at the top level nothing claims it.
  if (state.open.empty()) charge_gap("(untaped)", now, bytes);
  const uint64_t token = next_token++;
  state.open.push_back({std::string(name) + suffix, token, now, bytes});
  set_mark(now, bytes);
  return token;
}

// The region `token` closes (if it is the innermost open one of this Profiler).
void end_region(uint64_t token) {
  // A region opened under an earlier Profiler (or before this one started) is not ours.
  if (!enabled || state.open.empty() || state.open.back().token != token) return;
  const Clock::time_point now = Clock::now();
  const int64_t bytes = bytes_allocated();
  const Frame frame = std::move(state.open.back());
  state.open.pop_back();
  const double total_ms = ms_between(frame.start, now);
  const int64_t total_bytes = bytes - frame.start_bytes;
  add(frame.name, total_ms, total_ms - frame.child_ms, total_bytes, total_bytes - frame.child_bytes);
  if (!state.open.empty()) {
    state.open.back().child_ms += total_ms;
    state.open.back().child_bytes += total_bytes;
  }
  set_mark(now, bytes);
}

// The profiler's side of the engine's seam: a forward op is charged the gap since the last hook;
// backward() and each node's backward are regions ("backward()", "matmul.backward"). Installed
// while a Profiler is alive; thread_local and never destroyed before its thread, so a span that
// ends after its Profiler (which end_region then ignores) still finds it.
class ProfilerObserver final : public TapeObserver {
 public:
  void op_recorded(const char* op, const std::vector<Tensor>&) override {
    const Clock::time_point now = Clock::now();
    const int64_t bytes = bytes_allocated();
    charge_gap(op, now, bytes);
    set_mark(now, bytes);
  }
  void backward_started() override { open("backward()", ""); }
  void backward_finished() override { close(); }
  void node_started(const Node& node) override { open(node.op, ".backward"); }
  void node_finished(const Node&) override { close(); }
  void region_started(std::string_view name, const char* suffix) override { open(name, suffix); }
  void region_finished() override { close(); }

 private:
  // Spans nest (checkpoint's backward runs a backward() inside a node): a stack of region tokens.
  void open(std::string_view name, const char* suffix) {
    tokens_.push_back(enabled ? begin_region(name, suffix) : 0);
  }
  void close() {
    const uint64_t token = tokens_.back();
    tokens_.pop_back();
    if (token != 0) end_region(token);
  }
  std::vector<uint64_t> tokens_;
};

thread_local ProfilerObserver observer;

}  // namespace

ProfileRegion::ProfileRegion(std::string_view name, const char* suffix) : observer_(tape_observer()) {
  if (observer_) observer_->region_started(name, suffix);
}

ProfileRegion::~ProfileRegion() {
  if (observer_) observer_->region_finished();
}

namespace {
ProfilerOptions table_only() {
  ProfilerOptions options;
  options.record_trace = false;
  return options;
}
}  // namespace

Profiler::Profiler() : Profiler(table_only()) {}

Profiler::Profiler(ProfilerOptions options) : owner_(!enabled) {
  options.schedule.check("Profiler");
  TG_CHECK(options.max_trace_events >= 1, "Profiler: max_trace_events must be at least 1, got ",
           options.max_trace_events);
  start_table();
  if (!options.record_trace) return;
  // After the table's observer: the recorder passes every event on to it (runtime/trace.h).
  try {
    TraceOptions trace_options;
    trace_options.schedule = options.schedule;
    trace_options.max_events = options.max_trace_events;
    trace_options.device = options.device;
    trace_ = std::make_unique<TraceRecorder>(std::move(trace_options));
    trace_->begin_step(0);  // on a GPU, the first use of the device: it may not exist
  } catch (...) {
    // No destructor runs for a constructor that throws: take out what was installed, in order.
    trace_.reset();
    end_table();
    throw;
  }
}

Profiler::~Profiler() {
  trace_.reset();  // out of the seam before the table's observer
  end_table();
}

void Profiler::start_table() {
  if (!owner_) return;
  state.rows.clear();
  state.open.clear();
  set_mark(Clock::now(), bytes_allocated());
  enabled = true;
  previous_observer_ = set_tape_observer(&observer);
}

void Profiler::end_table() {
  if (!owner_) return;
  set_tape_observer(previous_observer_);
  if (state.open.empty()) charge_gap("(untaped)", Clock::now(), bytes_allocated());
  state.open.clear();
  enabled = false;
}

void Profiler::step() {
  ++step_num_;
  if (!trace_) return;
  trace_->end_step();
  trace_->begin_step(step_num_);
}

ProfileTable profile_results() {
  ProfileTable table;
  table.reserve(state.rows.size());
  for (const auto& [name, row] : state.rows) {
    table.push_back(row);
    table.back().name = name;
  }
  std::sort(table.begin(), table.end(), [](const ProfileRow& a, const ProfileRow& b) {
    return a.self_ms != b.self_ms ? a.self_ms > b.self_ms : a.name < b.name;
  });
  return table;
}

std::string format_profile(const ProfileTable& table, size_t max_rows) {
  double wall_ms = 0;
  int64_t wall_bytes = 0;
  for (const ProfileRow& row : table) {
    wall_ms += row.self_ms;
    wall_bytes += row.self_bytes;
  }
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%-38s %7s %11s %11s %7s %12s %12s\n", "op", "calls",
                "total ms", "self ms", "self %", "bytes", "self bytes");
  out += line;
  const size_t shown = max_rows == 0 ? table.size() : std::min(max_rows, table.size());
  for (size_t i = 0; i < shown; ++i) {
    const ProfileRow& row = table[i];
    std::snprintf(line, sizeof line, "%-38s %7lld %11.3f %11.3f %6.1f%% %12s %12s\n",
                  row.name.c_str(), static_cast<long long>(row.calls), row.total_ms, row.self_ms,
                  wall_ms > 0 ? 100.0 * row.self_ms / wall_ms : 0.0, human_bytes(row.bytes).c_str(),
                  human_bytes(row.self_bytes).c_str());
    out += line;
  }
  if (shown < table.size()) {
    std::snprintf(line, sizeof line, "... %zu more rows\n", table.size() - shown);
    out += line;
  }
  std::snprintf(line, sizeof line, "self total: %.3f ms, %s allocated\n", wall_ms,
                human_bytes(wall_bytes).c_str());
  out += line;
  return out;
}

}  // namespace tg
