#include "tapegrad/runtime/tape_observer.h"

#include <utility>

namespace tg {
namespace {
thread_local constinit TapeObserver* observer = nullptr;  // null when nobody watches
}  // namespace

TapeObserver* set_tape_observer(TapeObserver* new_observer) {
  return std::exchange(observer, new_observer);
}

TapeObserver* tape_observer() { return observer; }

void notify_op_recorded(const char* op, const std::vector<Tensor>& inputs) {
  if (observer) observer->op_recorded(op, inputs);
}

ObservedSpan::ObservedSpan(const Node* node) : observer_(observer), node_(node) {
  if (!observer_) return;
  if (node_) observer_->node_started(*node_);
  else observer_->backward_started();
}

ObservedSpan::~ObservedSpan() {
  if (!observer_) return;
  if (node_) observer_->node_finished(*node_);
  else observer_->backward_finished();
}

}  // namespace tg
