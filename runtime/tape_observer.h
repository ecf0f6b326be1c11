#pragma once
// The seam: the one way a tool watches the engine (the profiler, runtime/profiler.h, and the
// trace recorder, runtime/trace.h, are the tools that do). An observer installed on a thread hears
// of every op recorded there, of every backward() sweep and node backward run there, and of every
// ProfileRegion (runtime/profiler.h) opened there; the engine has no other hook. A span's end goes
// to the observer that saw its start, also when a backward throws. With no observer installed, an
// event costs the engine one call and a thread_local pointer test.
//
// The engine's side is one line per event in autograd/tape.cpp: notify_op_recorded() in record(),
// an ObservedSpan around the sweep and around each node's backward.
#include <string_view>
#include <vector>

#include "tapegrad/autograd/tape.h"

namespace tg {

class TapeObserver {
 public:
  virtual ~TapeObserver() = default;
  // record(): `op` just computed its output from `inputs` (an undefined entry: an absent input).
  virtual void op_recorded(const char* op, const std::vector<Tensor>& inputs) = 0;
  virtual void backward_started() = 0;  // backward(): the sweep, seed checked
  virtual void backward_finished() = 0;
  virtual void node_started(const Node& node) = 0;  // node.backward(...) is about to run
  virtual void node_finished(const Node& node) = 0;
  // A region the caller names (ProfileRegion: "AdamW.step" is name "AdamW" + suffix ".step").
  virtual void region_started(std::string_view name, const char* suffix) = 0;
  virtual void region_finished() = 0;
};
// Installs `observer` on this thread (nullptr: none) and returns the one it replaces. The
// observer must outlive every span it has seen start.
TapeObserver* set_tape_observer(TapeObserver* observer);
TapeObserver* tape_observer();  // this thread's observer, or nullptr

// The engine's side, for autograd/tape.cpp. Tells this thread's observer, if any, that `op` was
// recorded (the profiler times the forward op here).
void notify_op_recorded(const char* op, const std::vector<Tensor>& inputs);

// RAII: reports a span to this thread's observer, if one is installed: the whole sweep
// (node == nullptr; the profiler's "backward()" row) or one node's backward ("<op>.backward").
// The end goes, from the destructor, to the observer that saw the start, so a backward that
// throws still closes its span.
class ObservedSpan {
 public:
  explicit ObservedSpan(const Node* node);
  ~ObservedSpan();
  ObservedSpan(const ObservedSpan&) = delete;
  ObservedSpan& operator=(const ObservedSpan&) = delete;

 private:
  TapeObserver* observer_;
  const Node* node_;
};

}  // namespace tg
