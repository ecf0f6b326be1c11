#pragma once
// A timeline of training steps in Chrome's trace-event format, which Perfetto (ui.perfetto.dev)
// and chrome://tracing open: what Profiler::export_chrome_trace writes (runtime/profiler.h), and
// --profile-trace FILE.json on `tapegrad train` and `tapegrad bench`. Where the per-op table
// sums, the trace shows every call in order:
//
//   {"traceEvents": [...], "displayTimeUnit": "ms", "metadata": {...}}
//
//   "ph": "X"  a complete event (a slice), ts and dur in microseconds since the recorder started:
//              "linear"             a forward op (cat "forward"): the gap since the previous hook,
//                                   as the profiler's forward rows (see runtime/profiler.h)
//              "linear.backward"    a node's backward (cat "backward")
//              "backward()"         the whole sweep, around every node (cat "backward")
//              "AdamW.step"         a ProfileRegion, here the optimizer's update (cat "region")
//              "ProfilerStep#12"    a whole training step, around all of the above (cat "step")
//              args: "input shapes" (forward: the op's inputs, null for an absent one; backward:
//              its forward op's inputs, whose gradients it returns), "bytes allocated" (the
//              allocator's bytes allocated inside the slice, frees not subtracted), "step".
//   "ph": "C"  the counter track "memory": the allocator's current bytes at the end of each slice.
//   "ph": "M"  the process and thread names.
//
// Which steps are written follows a ProfileSchedule (runtime/profile_schedule.h). The file is kept
// bounded: once keeping the step in progress would pass max_events, recording stops, only whole
// steps are written, and the metadata says so ("truncated": true, with the steps written). The
// same bound holds the memory a step being recorded takes.
//
// How it hears of the ops: a TraceRecorder is a TapeObserver (runtime/tape_observer.h), the
// engine's one seam. It installs itself when made and passes every event on to the observer it
// replaced, so a per-op profiler made before it keeps working; it takes itself out when
// destroyed, which must happen before that profiler ends. (A Profiler made with ProfilerOptions
// owns one and keeps that order itself.)
//
// The JSON is built in trace.cpp: nlohmann-json stays out of the installed headers.
//
// On a GPU, kernels run asynchronously: an op's host slice would only time its launch. So there
// the recorder synchronises the device at every hook (Kernels::synchronize), each slice then
// covers the op's launch and its kernels' run, and every op and backward node is drawn again on a
// second track, the device's ("kernels on cuda:0", cat "kernel"). The waits serialise host and
// device, as torch.profiler's per-op timing does without CUPTI; the metadata says so.
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tapegrad/autograd/device.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/runtime/profile_schedule.h"
#include "tapegrad/runtime/tape_observer.h"

namespace tg {

// Events a trace keeps at most by default: about 20 MB of JSON.
inline constexpr int64_t kDefaultMaxTraceEvents = 200'000;

struct TraceOptions {
  ProfileSchedule schedule;                   // which steps are written
  int64_t max_events = kDefaultMaxTraceEvents;
  Device device = kCPU;                       // whose allocator the memory track follows
  std::string process_name = "tapegrad";      // the name the viewer shows for the process
  std::map<std::string, std::string> metadata;  // more entries for the file's "metadata"
};

class TraceRecorder final : public TapeObserver {
 public:
  explicit TraceRecorder(TraceOptions options);  // installs itself on this thread
  ~TraceRecorder() override;                     // puts back the observer it replaced
  TraceRecorder(const TraceRecorder&) = delete;
  TraceRecorder& operator=(const TraceRecorder&) = delete;

  // Around each training step (`step`: the number its ProfilerStep# slice shows: the run's 1-based
  // step on the command line, the 0-based step count in a Profiler); the schedule decides from
  // the order of the calls whether the step is recorded and kept.
  void begin_step(int64_t step);
  void end_step();

  // The trace-event JSON of the steps kept so far, as text.
  std::string trace_json() const;
  int64_t steps_kept() const { return steps_kept_; }

  void op_recorded(const char* op, const std::vector<Tensor>& inputs) override;
  void backward_started() override;
  void backward_finished() override;
  void node_started(const Node& node) override;
  void node_finished(const Node& node) override;
  void region_started(std::string_view name, const char* suffix) override;
  void region_finished() override;

 private:
  using Clock = std::chrono::steady_clock;
  using Shapes = std::vector<std::optional<Shape>>;  // nullopt: an absent input

  struct Slice {
    std::string name;
    const char* category;
    double start_us = 0, end_us = 0;
    int64_t bytes_allocated = 0;  // inside the slice
    int64_t current_bytes = 0;    // live at its end (the memory track)
    std::optional<Shapes> input_shapes;
    int64_t step = 0;
  };
  struct OpenSpan {  // a slice whose end has not come yet
    std::string name;
    const char* category;
    double start_us;
    int64_t start_allocated;
    std::optional<Shapes> input_shapes;
  };

  double now_us() const;  // on a GPU, after the device has finished what was queued
  void open(std::string name, const char* category, std::optional<Shapes> input_shapes);
  void close();
  void set_mark(double us, int64_t allocated);
  void keep(Slice slice);  // into the step in progress, unless that passes max_events
  void stop_recording();   // max_events reached: the step in progress is dropped, and all after it

  TraceOptions options_;
  TapeObserver* next_;  // the observer this one replaced: every event goes on to it
  Clock::time_point origin_ = Clock::now();
  // The last hook: a forward op's slice starts here (its time is the gap since then).
  double mark_us_ = 0;
  int64_t mark_allocated_ = 0;
  std::vector<OpenSpan> open_;
  // The step in progress and what it recorded so far; kept_ holds the finished active steps.
  int64_t steps_begun_ = 0, steps_ended_ = 0, step_ = 0, steps_kept_ = 0;
  StepPhase phase_ = StepPhase::wait;
  bool in_step_ = false;
  double step_start_us_ = 0;
  int64_t step_start_allocated_ = 0;
  std::vector<Slice> pending_, kept_;
  bool truncated_ = false;
  int64_t truncated_at_step_ = 0;
};

}  // namespace tg
