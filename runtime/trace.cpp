#include "tapegrad/runtime/trace.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <utility>

#include <nlohmann/json.hpp>

#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/storage.h"

namespace tg {
namespace {

constexpr int kHostThread = 1;    // the tid of every slice: the thread that runs the steps
constexpr int kDeviceThread = 2;  // on a GPU, the device's track: the ops again, as it ran them

// Microseconds to the nanosecond: what a viewer resolves, and a smaller file than full doubles.
double round_us(double us) { return std::round(us * 1000) / 1000; }

nlohmann::json shapes_json(const std::vector<std::optional<Shape>>& shapes) {
  nlohmann::json list = nlohmann::json::array();
  for (const std::optional<Shape>& shape : shapes) list.push_back(shape ? nlohmann::json(*shape) : nlohmann::json());
  return list;
}

}  // namespace

TraceRecorder::TraceRecorder(TraceOptions options)
    : options_(std::move(options)), next_(set_tape_observer(this)) {}

TraceRecorder::~TraceRecorder() { set_tape_observer(next_); }

double TraceRecorder::now_us() const {
  if (options_.device.type != DeviceType::cpu) kernels(options_.device).synchronize();
  return std::chrono::duration<double, std::micro>(Clock::now() - origin_).count();
}

void TraceRecorder::set_mark(double us, int64_t allocated) {
  mark_us_ = us;
  mark_allocated_ = allocated;
}

// ---- Steps and the schedule ---------------------------------------------------------------------

void TraceRecorder::begin_step(int64_t step) {
  step_ = step;
  phase_ = options_.schedule.phase(steps_begun_++);
  in_step_ = phase_ != StepPhase::wait && !truncated_;
  pending_.clear();
  if (!in_step_) return;
  step_start_us_ = now_us();
  step_start_allocated_ = allocator_stats(options_.device).allocated_bytes;
  set_mark(step_start_us_, step_start_allocated_);
}

void TraceRecorder::end_step() {
  ++steps_ended_;
  if (!in_step_) return;
  const AllocatorStats stats = allocator_stats(options_.device);
  keep({.name = "ProfilerStep#" + std::to_string(step_), .category = "step",
        .start_us = step_start_us_, .end_us = now_us(),
        .bytes_allocated = stats.allocated_bytes - step_start_allocated_,
        .current_bytes = stats.current_bytes, .input_shapes = std::nullopt, .step = step_});
  if (!in_step_) return;  // the step passed max_events: dropped
  in_step_ = false;
  if (phase_ == StepPhase::warmup) return pending_.clear();  // recorded, and thrown away
  std::move(pending_.begin(), pending_.end(), std::back_inserter(kept_));
  pending_.clear();
  ++steps_kept_;
}

// Two events a slice (the slice and its memory sample). Counting the step in progress with the
// kept ones bounds the memory too, also when no step ends for a long time.
void TraceRecorder::keep(Slice slice) {
  pending_.push_back(std::move(slice));
  const int64_t events = 2 * static_cast<int64_t>(kept_.size() + pending_.size());
  if (events > options_.max_events) stop_recording();
}

// A step is kept whole or not at all: the one in progress goes, and no later one is recorded.
void TraceRecorder::stop_recording() {
  truncated_ = true;
  truncated_at_step_ = step_;
  in_step_ = false;
  pending_.clear();
}

// ---- The seam: ops, backward nodes, regions -----------------------------------------------------

void TraceRecorder::op_recorded(const char* op, const std::vector<Tensor>& inputs) {
  const double now = now_us();
  const AllocatorStats stats = allocator_stats(options_.device);
  if (next_) next_->op_recorded(op, inputs);
  if (!in_step_) return;
  Shapes shapes;
  for (const Tensor& input : inputs) shapes.push_back(input.defined() ? std::optional(input.shape()) : std::nullopt);
  keep({.name = op, .category = "forward", .start_us = mark_us_, .end_us = now,
        .bytes_allocated = stats.allocated_bytes - mark_allocated_,
        .current_bytes = stats.current_bytes, .input_shapes = std::move(shapes), .step = step_});
  set_mark(now, stats.allocated_bytes);
}

void TraceRecorder::backward_started() {
  if (next_) next_->backward_started();
  open("backward()", "backward", std::nullopt);
}

void TraceRecorder::backward_finished() {
  close();
  if (next_) next_->backward_finished();
}

void TraceRecorder::node_started(const Node& node) {
  if (next_) next_->node_started(node);
  Shapes shapes;
  for (const Edge& input : node.inputs) shapes.push_back(input.shape);
  open(node.op + ".backward", "backward", std::move(shapes));
}

void TraceRecorder::node_finished(const Node& node) {
  close();
  if (next_) next_->node_finished(node);
}

void TraceRecorder::region_started(std::string_view name, const char* suffix) {
  if (next_) next_->region_started(name, suffix);
  open(std::string(name) + suffix, "region", std::nullopt);
}

void TraceRecorder::region_finished() {
  close();
  if (next_) next_->region_finished();
}

// Spans nest (a node inside the sweep, checkpoint's backward() inside a node): a stack. Spans are
// tracked in every phase, so that one open when a step ends cannot unbalance the stack.
void TraceRecorder::open(std::string name, const char* category, std::optional<Shapes> input_shapes) {
  const double now = now_us();
  const int64_t allocated = allocator_stats(options_.device).allocated_bytes;
  open_.push_back({std::move(name), category, now, allocated, std::move(input_shapes)});
  set_mark(now, allocated);
}

void TraceRecorder::close() {
  if (open_.empty()) return;  // opened before this recorder was installed
  const double now = now_us();
  const AllocatorStats stats = allocator_stats(options_.device);
  OpenSpan span = std::move(open_.back());
  open_.pop_back();
  if (in_step_ && span.start_us >= step_start_us_) {
    keep({.name = std::move(span.name), .category = span.category, .start_us = span.start_us,
          .end_us = now, .bytes_allocated = stats.allocated_bytes - span.start_allocated,
          .current_bytes = stats.current_bytes, .input_shapes = std::move(span.input_shapes),
          .step = step_});
  }
  set_mark(now, stats.allocated_bytes);
}

// ---- The file -----------------------------------------------------------------------------------

std::string TraceRecorder::trace_json() const {
  const int pid = static_cast<int>(getpid());
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"tid", kHostThread},
                    {"args", {{"name", options_.process_name}}}});
  events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", kHostThread},
                    {"args", {{"name", "host (" + device_name(options_.device) + ")"}}}});
  const bool on_device = options_.device.type != DeviceType::cpu;
  if (on_device) {
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", kDeviceThread},
                      {"args", {{"name", "kernels on " + device_name(options_.device)}}}});
  }
  // Slices in start order, an enclosing slice before what it contains (the longer one first).
  std::vector<const Slice*> slices;
  for (const Slice& slice : kept_) slices.push_back(&slice);
  std::stable_sort(slices.begin(), slices.end(), [](const Slice* a, const Slice* b) {
    return a->start_us != b->start_us ? a->start_us < b->start_us : a->end_us > b->end_us;
  });
  for (const Slice* slice : slices) {
    nlohmann::json args = {{"bytes allocated", slice->bytes_allocated}, {"step", slice->step}};
    if (slice->input_shapes) args["input shapes"] = shapes_json(*slice->input_shapes);
    const bool an_op = std::string_view(slice->category) == "forward" ||
                       (std::string_view(slice->category) == "backward" && slice->name != "backward()");
    if (on_device && an_op) {  // the same interval on the device's track: its kernels ran inside it
      events.push_back({{"name", slice->name}, {"cat", "kernel"}, {"ph", "X"},
                        {"ts", round_us(slice->start_us)}, {"dur", round_us(slice->end_us - slice->start_us)},
                        {"pid", pid}, {"tid", kDeviceThread}, {"args", {{"step", slice->step}}}});
    }
    events.push_back({{"name", slice->name}, {"cat", slice->category}, {"ph", "X"},
                      {"ts", round_us(slice->start_us)}, {"dur", round_us(slice->end_us - slice->start_us)},
                      {"pid", pid}, {"tid", kHostThread}, {"args", std::move(args)}});
  }
  // The memory track: one sample at the end of each slice, in time order.
  std::stable_sort(slices.begin(), slices.end(), [](const Slice* a, const Slice* b) { return a->end_us < b->end_us; });
  for (const Slice* slice : slices) {
    events.push_back({{"name", "memory"}, {"ph", "C"}, {"ts", round_us(slice->end_us)}, {"pid", pid},
                      {"tid", kHostThread}, {"args", {{"allocated bytes", slice->current_bytes}}}});
  }

  nlohmann::json metadata = nlohmann::json::object();
  for (const auto& [key, value] : options_.metadata) metadata[key] = value;
  metadata["device"] = device_name(options_.device);
  if (options_.device.type != DeviceType::cpu) {
    metadata["timing"] = "the device is synchronised at every hook: a slice is its op's launch and "
                         "its kernels' run (host and device serialised), drawn on the host and the "
                         "device tracks";
  }
  metadata["schedule"] = options_.schedule.describe();
  metadata["steps_seen"] = steps_ended_;
  metadata["steps_written"] = steps_kept_;
  metadata["max_events"] = options_.max_events;
  metadata["truncated"] = truncated_;
  if (truncated_) {
    metadata["note"] = "recording stopped at step " + std::to_string(truncated_at_step_) +
                       ": keeping it would pass max_events (" + std::to_string(options_.max_events) + ")";
  }
  metadata["forward_timing"] = "a forward op's slice is the gap since the previous op or span "
                               "boundary (runtime/profiler.h)";
  const nlohmann::json trace = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"},
                                {"metadata", std::move(metadata)}};
  return trace.dump() + "\n";
}

}  // namespace tg
