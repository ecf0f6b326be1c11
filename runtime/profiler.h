#pragma once
// An op profiler, like the summary table of PyTorch's profiler, built from the op names the tape
// already knows. While a Profiler is alive on a thread, that thread's ops are timed and their
// allocations counted, one row per name:
//
//   "matmul", "linear", ...        forward ops, charged when record() puts them on the tape
//   "matmul.backward", ...         a node's backward function, timed exactly around the call
//   "backward()"                   the whole backward() sweep; its self time is the engine's own
//                                  work (the seed, gradient accumulation, broadcast reduction)
//   "(untaped)"                    time before a region or backward() that no op claims
//   any ProfileRegion name         e.g. "Adam.step": work you name yourself
//
// How forward time is measured: there is no hook when an op starts, only when it is recorded,
// right after it computed its output. So a forward row's time is the gap since the previous hook
// on this thread (the previous taped op, a region's start or end, or the Profiler's start), and
// that gap includes any untaped work in between: building a batch, a mask from from_values(), a
// factory like zeros(), and every op that is not taped (under NoGrad, or on inputs that need no
// grad). That last part is what makes the rows right: an op's internal helpers (linear's
// reshape of a detached input and view of its output, attention's contiguous() copies) are
// untaped and fold into the op that called them, instead of taking its GEMM time. Wrap other
// untaped work in a ProfileRegion to give it a row of its own; untaped work just before a region
// or backward() goes to "(untaped)", but work just before an op cannot be told apart from it.
// Consequence: under NoGrad (inference) nothing is taped, and the time lands in "(untaped)" or in
// the enclosing region.
//
// Self vs total: a region (a backward node, backward(), a ProfileRegion) contains the taped ops
// and the regions that run inside it; total = wall time of the region, self = total minus those
// children. Backward nodes run under NoGrad, so the GEMMs of linear.backward are its own self
// time (self = total for them); backward() contains every node, so its self time is the engine.
// Forward rows have self = total. Summing self over all rows gives the profiled wall time. Bytes
// are the allocator's bytes allocated (frees not subtracted), split the same way: "bytes"
// inclusive, "self bytes" without the children. The allocator counts every thread; the times
// are this thread's (the pool's workers run inside the op that started them).
//
// How it hears of the engine: a Profiler installs a TapeObserver (runtime/tape_observer.h) on its
// thread, the engine's one hook, and takes it out again when it ends. ProfileRegions reach it the
// same way.
// A tool installed after it (the trace recorder of runtime/trace.h) passes every event on to it, so
// both can run at once; that tool must be taken out before the Profiler ends.
//
// Steps and the Chrome trace, as torch.profiler.profile: made with ProfilerOptions, a Profiler
// also records a trace (runtime/trace.h) of the steps its schedule keeps. Call step() at the end
// of every training step; the steps are numbered from 0 as torch numbers them (the first runs
// from the Profiler's start to the first step(), ProfilerStep#0), and export_chrome_trace(path)
// writes the steps kept so far, each whole; the step in progress is not written.
//
//   tg::Profiler profiler({.schedule = {.wait = 1, .warmup = 1, .active = 2}});
//   for (int i = 0; i < 5; ++i) { train_step(); profiler.step(); }
//   profiler.export_chrome_trace("trace.json");   // ProfilerStep#2 and #3, for ui.perfetto.dev
//
// Unlike torch's table, profile_results() covers the Profiler's whole life, every step included:
// the schedule chooses the trace's steps only.
//
// Cost when off: one thread_local pointer test per taped op and per backward node.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tapegrad/autograd/device.h"
#include "tapegrad/runtime/profile_schedule.h"
#include "tapegrad/runtime/trace.h"

namespace tg {

class TapeObserver;

struct ProfileRow {
  std::string name;
  int64_t calls = 0;
  double total_ms = 0;
  double self_ms = 0;
  int64_t bytes = 0;       // allocated inside, children included
  int64_t self_bytes = 0;  // allocated inside, children excluded
};
using ProfileTable = std::vector<ProfileRow>;  // sorted by self time, largest first

struct ProfilerOptions {
  ProfileSchedule schedule;   // which steps the trace keeps; the default keeps every step
  bool record_trace = true;   // false: the per-op table alone, as Profiler()
  Device device = kCPU;       // whose allocator the trace's memory track follows (on a GPU the
                              // device is synchronised at every op, see runtime/trace.h)
  int64_t max_trace_events = kDefaultMaxTraceEvents;  // whole steps up to this many events
};

// RAII: profiles this thread from construction to destruction. Starting one clears the previous
// results of this thread; profile_results() still returns them after it ends. A Profiler created
// while another is alive on the thread leaves the table to the outer one; a trace it records is
// its own.
class Profiler {
 public:
  Profiler();  // the per-op table alone: no trace, step() only counts
  // The table and, unless options.record_trace is false, the trace. tg::Error for a schedule with
  // a negative number, or wait or warmup without active steps, or max_trace_events < 1.
  explicit Profiler(ProfilerOptions options);
  ~Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // The end of a training step, and the start of the next (torch.profiler.profile.step).
  void step();
  // The number of the step in progress: how many times step() was called.
  int64_t step_num() const { return step_num_; }
  // Writes the Chrome trace of the finished steps the schedule kept to `path` (runtime/trace.h
  // says what it holds), replacing the file whole or not at all (io/file_io.h's atomic write;
  // defined in io/profiler_export.cpp). tg::Error naming the path when it cannot be written, or
  // when this Profiler records no trace.
  void export_chrome_trace(const std::string& path) const;

 private:
  void start_table();
  void end_table();

  bool owner_;  // of this thread's table: no other Profiler was alive when this one started
  TapeObserver* previous_observer_ = nullptr;
  std::unique_ptr<TraceRecorder> trace_;  // installed after the table's observer, taken out first
  int64_t step_num_ = 0;
};

// This thread's rows from the running or the last finished Profiler.
ProfileTable profile_results();
// The table as text, one row per line (max_rows = 0: all), with a total line.
std::string format_profile(const ProfileTable& table, size_t max_rows = 0);

// RAII: a named region, reported to this thread's TapeObserver (runtime/tape_observer.h): the
// profiler gives it a row of its own, with children; a trace (runtime/trace.h) a slice. The name is
// name + suffix, joined only when someone observes ("AdamW" + ".step"). Costs one call and a
// pointer test when nobody observes.
class ProfileRegion {
 public:
  explicit ProfileRegion(std::string_view name, const char* suffix = "");
  ~ProfileRegion();
  ProfileRegion(const ProfileRegion&) = delete;
  ProfileRegion& operator=(const ProfileRegion&) = delete;

 private:
  TapeObserver* observer_;  // the one that saw the start hears of the end
};

}  // namespace tg
