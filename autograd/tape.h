#pragma once
// The tape: a thread-local list of nodes in execution order. backward() walks it in reverse,
// which is a valid topological order for free (no recursion, no depth limit).
//
// A node holds its op name, where each input's gradient goes (the input's own node, or the
// leaf whose .grad accumulates it), the tensors its backward needs, and the backward itself.
// A tensor owns the node that produced it (grad_fn); the tape only remembers the order, so a
// graph nobody can reach any more is freed with its last tensor, as in PyTorch.
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tapegrad/autograd/op_registry.h"
#include "tapegrad/autograd/tensor.h"

namespace tg {

struct Node;
using Grads = std::vector<Tensor>;  // one per input; undefined = no gradient
using BackwardFn = std::function<Grads(const Tensor& grad_output, const Node& node)>;

// Where the gradient for one input goes.
struct Edge {
  std::shared_ptr<Node> node;          // the input was produced by this node, or
  std::shared_ptr<TensorImpl> leaf;    // the input is a leaf that requires grad, or neither
  Shape shape;                         // the input's shape (gradients are reduced to it)
  DType dtype = DType::f32;
};

struct Node {
  std::string op;
  uint64_t sequence = 0;        // position in execution order
  std::vector<Edge> inputs;
  std::vector<Tensor> saved;    // detached; freed after backward unless retain_graph
  // The storage version of each saved tensor when it was saved (0 for an undefined one):
  // backward() refuses to run the node once one has moved on (an in-place write since).
  std::vector<uint64_t> saved_versions;
  BackwardFn backward;
  Shape output_shape;
  DType output_dtype = DType::f32;
  int64_t saved_bytes = 0;
  bool released = false;        // backward already ran and freed what it saved

  Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  ~Node();  // frees a chain of nodes iteratively: a deep graph must not overflow the stack

  bool needs_grad(size_t input) const {
    return inputs[input].node != nullptr || inputs[input].leaf != nullptr;
  }
};

// Grad mode: ops record onto the tape only while it is on.
bool grad_enabled();
class NoGrad {  // RAII: records nothing inside its scope
 public:
  NoGrad();
  ~NoGrad();
  NoGrad(const NoGrad&) = delete;
  NoGrad& operator=(const NoGrad&) = delete;
 private:
  bool previous_;
};
class EnableGrad {  // RAII: records again, even inside NoGrad
 public:
  EnableGrad();
  ~EnableGrad();
  EnableGrad(const EnableGrad&) = delete;
  EnableGrad& operator=(const EnableGrad&) = delete;
 private:
  bool previous_;
};

// True when an op on these inputs must be recorded.
bool any_requires_grad(const std::vector<Tensor>& inputs);
bool any_requires_grad(std::initializer_list<Tensor> inputs);

// Records `output` as produced by `op` from `inputs` when grad mode is on and an input requires
// grad. `saved` are detached and kept for `backward`. `op` must be registered as differentiable
// (OpRegistration, autograd/op_registry.h), else a tg::Error and nothing is recorded.
void record(const char* op, const std::vector<Tensor>& inputs, Tensor& output,
            std::vector<Tensor> saved, BackwardFn backward);
// The same, as ops call it, with braced lists: when nothing is recorded (no_grad, or no input
// requires grad) it returns before building the node's vectors or its std::function, which
// would be three heap blocks an op for nothing.
template <typename Backward>
void record(const char* op, std::initializer_list<Tensor> inputs, Tensor& output,
            std::initializer_list<Tensor> saved, Backward&& backward) {
  if (!any_requires_grad(inputs)) return;
  record(op, std::vector<Tensor>(inputs), output, std::vector<Tensor>(saved),
         BackwardFn(std::forward<Backward>(backward)));
}

// Reverse-mode sweep from `root`. Without `grad`, root must be a scalar (grad = 1).
//
// In-place writes: before a node's backward runs, each tensor it saved must still be at the
// storage version it had when saved (Storage::version); else tg::Error "one of the variables
// needed for gradient computation has been modified by an in-place operation: '<op>' saved a
// tensor of shape [..] at version N, now version M", and no gradient of that node reaches a leaf.
// An optimizer step between forward and backward is such a write; after backward it is not.
//
// Threads: the tape, grad mode, autocast and the observer are per thread, so each thread records
// and back-propagates its own graphs. Several threads may run forward and backward at once on
// graphs that share leaves (parameters): adding a gradient into a leaf's .grad holds that
// leaf's lock (grad_lock, tensor.h), and no update is lost. Not safe at the same time: a backward
// through a graph recorded on another thread (tg::Error: its nodes are not on this tape); writing
// a leaf's values (an optimizer step, copy_, fill_) while another thread runs forward or
// backward with it; changing a leaf's requires_grad while another thread records ops on it.
void backward(const Tensor& root, const Tensor& grad = Tensor(), bool retain_graph = false);

// Tools (the profiler, the trace recorder) watch the engine through one seam, the TapeObserver
// of runtime/tape_observer.h: record() and backward() tell it what they do, and nothing else.

// The tape as text: one line per live node (op, output shape, dtype, saved bytes).
std::string format_tape();
size_t tape_size();   // live nodes on this thread's tape
void clear_tape();    // forget the order (nodes stay alive while tensors own them)

// A fresh tape for the scope (used by checkpoint's recomputation); the outer one comes back after.
class TapeScope {
 public:
  TapeScope();
  ~TapeScope();
  TapeScope(const TapeScope&) = delete;
  TapeScope& operator=(const TapeScope&) = delete;
 private:
  std::vector<std::weak_ptr<Node>> outer_;
};

}  // namespace tg
