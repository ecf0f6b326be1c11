#include "tapegrad/autograd/tape.h"

#include <algorithm>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <utility>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/read_log.h"
#include "tapegrad/runtime/autocast.h"
#include "tapegrad/runtime/tape_observer.h"

// The engine: record() notes each op as it runs, backward() walks those notes in reverse.
//
// Who owns what, and why the tape holds weak references:
//   - A tensor owns the node that produced it (TensorImpl::grad_fn), and a node owns the nodes of
//     its inputs (Edge::node). So everything a tensor's gradient could flow through is kept alive
//     by that tensor, and nothing else is.
//   - The tape holds only std::weak_ptr<Node>: it remembers the ORDER in which ops ran, never
//     keeps a node alive. A graph that no tensor can reach any more (an evaluation run with grad
//     mode on, a loss that was printed and dropped) is freed at once with its last tensor, as in
//     PyTorch, instead of living on the tape until someone clears it. Dead entries are compacted
//     away as the tape grows (compact_tape).
//   - A node saves what its backward needs as detach()ed handles (same storage, no history).
//     Saving an op's own output (exp, tanh and sigmoid do) would otherwise make the output own
//     its node and the node own the output: a cycle that never frees. The price is no double
//     backward (create_graph), which nothing here needs.
//   - Leaves (parameters) are not nodes: an Edge points straight at the leaf's TensorImpl, whose
//     .grad is where its gradients add up.
//   - Dropping the last owner of a long chain would free it by recursive destructors, one stack
//     frame per node; Node::~Node frees the chain in a loop instead.
//
// Why walking the tape backwards is enough: a node's inputs existed before the op ran, so their
// nodes are earlier on the tape. Walked in reverse, every node comes after every node that
// consumed its output, so when a node's turn comes its output's gradient is complete. No graph
// search, no recursion, no depth limit.
namespace tg {
namespace {

thread_local bool grad_mode = true;
thread_local std::vector<std::weak_ptr<Node>> tape;
thread_local size_t compact_at = 1024;
thread_local uint64_t next_sequence = 0;

// Drops the entries of nodes that no tensor owns any more.
void compact_tape() {
  std::erase_if(tape, [](const std::weak_ptr<Node>& entry) { return entry.expired(); });
  compact_at = std::max<size_t>(1024, 2 * tape.size());
}

// ---- Pieces of backward() ---------------------------------------------------------------------

// Gradients waiting for their node's turn: node -> d(root)/d(node's output), summed so far.
using PendingGrads = std::unordered_map<Node*, Tensor>;

// The gradient the sweep starts from, d root / d root: `grad` when given (checked against root),
// else 1, which needs a scalar root.
Tensor seed_gradient(const Tensor& root, const Tensor& grad) {
  TG_CHECK(root.defined(), "backward: the tensor is undefined");
  TG_CHECK(root.requires_grad(), "backward: tensor of shape ", shape_str(root.shape()),
           " does not require grad and has no grad_fn");
  Tensor seed = grad;
  if (!seed.defined()) {
    TG_CHECK(root.numel() == 1, "backward: output of shape ", shape_str(root.shape()),
             " is not a scalar; pass a gradient of the same shape");
    seed = ones(root.shape(), root.dtype(), root.device());
  }
  TG_CHECK(seed.shape() == root.shape(), "backward: gradient of shape ", shape_str(seed.shape()),
           " does not match output shape ", shape_str(root.shape()));
  TG_CHECK(seed.dtype() == root.dtype(), "backward: gradient dtype ", dtype_name(seed.dtype()),
           " does not match output dtype ", dtype_name(root.dtype()));
  TG_CHECK(seed.device() == root.device(), "backward: gradient on ", device_name(seed.device()),
           " but output on ", device_name(root.device()));
  return seed;
}

// What backward() switches off while it runs, and why:
//   - grad mode: backward functions are written with ops (tanh's is mul(g, 1 - y*y)); recording
//     them would build a graph of the backward pass, which only double backward would use.
//   - autocast: each gradient must keep its input's dtype (an f32 weight cast to bf16 for the
//     forward still gets an f32 gradient); under autocast the backward's matmuls would run in half.
struct BackwardMode {
  NoGrad no_grad;
  AutocastStateScope no_autocast{std::nullopt};
};

// The next node to run: walking the tape down from `cursor`, the latest node with a gradient
// waiting. Dead entries and nodes recorded after the root (they cannot feed it) are skipped.
// Running off the start of the tape with gradients still waiting means a node is not on it.
std::shared_ptr<Node> next_node(size_t& cursor, const Node& root, const PendingGrads& pending) {
  while (cursor > 0) {
    std::shared_ptr<Node> node = tape[--cursor].lock();
    if (node && node->sequence <= root.sequence && pending.contains(node.get())) return node;
  }
  fail("backward: op '", pending.begin()->first->op,
       "' is not on this thread's tape (was it recorded on another thread or in a TapeScope?)");
}

// Removes and returns the gradient waiting for `node`: complete, since its consumers all ran.
Tensor take_pending(PendingGrads& pending, Node& node) {
  auto found = pending.find(&node);
  Tensor grad_output = std::move(found->second);
  pending.erase(found);
  return grad_output;
}

// The version check (PyTorch's): every tensor the node saved must be as it was when saved. An
// in-place write since (an optimizer step, copy_, fill_) would make its backward use new values
// with the old forward's, a wrong gradient without any error.
void check_saved_versions(const Node& node) {
  for (size_t i = 0; i < node.saved.size(); ++i) {
    const Tensor& saved = node.saved[i];
    if (!saved.defined() || i >= node.saved_versions.size()) continue;
    if (saved.version() == node.saved_versions[i]) continue;
    fail("backward: one of the variables needed for gradient computation has been modified by "
         "an in-place operation: '", node.op, "' saved a tensor of shape ",
         shape_str(saved.shape()), " at version ", node.saved_versions[i], ", now version ",
         saved.version());
  }
}

// Runs the node's backward: one gradient per input, each in the shape of the node's OUTPUT.
Grads run_node_backward(Node& node, const Tensor& grad_output) {
  TG_CHECK(!node.released, "backward: op '", node.op,
           "' was already back-propagated and its saved tensors freed; "
           "call backward(..., retain_graph=true) the first time to go through it again");
  check_saved_versions(node);
  Grads grads;
  {
    const ObservedSpan span(&node);  // the profiler's "<op>.backward" row
    grads = node.backward(grad_output, node);
  }
  TG_CHECK(grads.size() == node.inputs.size(), "backward of '", node.op, "' returned ",
           grads.size(), " gradients for ", node.inputs.size(), " inputs");
  return grads;
}

Tensor contiguous_copy(const Tensor& t) {
  Tensor copy = empty(t.shape(), t.dtype(), t.device());
  kernels(t.device()).copy(t, copy);
  return copy;
}

// tg::Error unless `grad` is `shape` broadcast: as many or more dims, each equal or from a 1.
void check_reducible(const Tensor& grad, const Shape& shape, const std::string& op) {
  const int64_t extra = grad.dim() - static_cast<int64_t>(shape.size());
  bool reducible = extra >= 0;
  for (int64_t d = std::max<int64_t>(extra, 0); reducible && d < grad.dim(); ++d) {
    reducible = grad.shape()[d] == shape[d - extra] || shape[d - extra] == 1;
  }
  TG_CHECK(reducible, "backward of '", op, "': gradient of shape ", shape_str(grad.shape()),
           " cannot be reduced to input shape ", shape_str(shape));
}

// Sums a gradient over the dimensions its input was broadcast along, giving it `shape`. Done here,
// once, for every op: a backward returns gradients in its output's shape and never repeats this
// (so expand's backward is the identity). Taken by value and handed back as it is when nothing is
// summed, so that a gradient nobody else holds stays that way (owned_gradient below).
Tensor reduce_to_shape(Tensor grad, const Shape& shape, const std::string& op) {
  if (grad.shape() == shape) return grad;
  check_reducible(grad, shape, op);
  const int64_t extra = grad.dim() - static_cast<int64_t>(shape.size());
  // A gradient without elements sums to zeros. Reducing it dim by dim would make partial sums as
  // large as 2^62 elements: [2^62, 0] summed over its last dim is [2^62, 1].
  if (grad.numel() == 0) return zeros(shape, grad.dtype(), grad.device());
  Tensor current = grad.is_contiguous() ? grad : contiguous_copy(grad);
  Shape current_shape = grad.shape();
  for (int64_t d = grad.dim() - 1; d >= 0; --d) {
    const int64_t target = d < extra ? 1 : shape[d - extra];
    if (current_shape[d] == target) continue;
    TG_CHECK(target == 1, "backward of '", op, "': gradient of shape ", shape_str(grad.shape()),
             " cannot be reduced to input shape ", shape_str(shape));
    DimSplit split;
    for (int64_t i = 0; i < d; ++i) split.outer *= current_shape[i];
    split.n = current_shape[d];
    for (int64_t i = d + 1; i < grad.dim(); ++i) split.inner *= current_shape[i];
    current_shape[d] = 1;
    Tensor summed = empty(current_shape, grad.dtype(), grad.device());
    kernels(grad.device()).sum_dim(current, split, summed);
    current = summed;
  }
  auto impl = std::make_shared<TensorImpl>(*current.impl());
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  return Tensor(impl);
}

// One input's gradient, as that input needs it: reduced to its shape, and checked to be in its
// dtype (a backward that returns another dtype is a bug in that op).
Tensor gradient_for_input(Tensor grad, const Edge& edge, const std::string& op) {
  Tensor g = reduce_to_shape(std::move(grad), edge.shape, op);
  TG_CHECK(g.dtype() == edge.dtype, "backward of '", op, "': gradient dtype ",
           dtype_name(g.dtype()), " for an input of dtype ", dtype_name(edge.dtype));
  return g;
}

// a + b for two gradients of one tensor. The kernel reads both over a's shape, so a mismatch
// would read past a buffer: refused (set_grad already keeps a leaf's .grad matching the leaf).
Tensor add_gradients(const Tensor& a, const Tensor& b) {
  TG_CHECK(a.shape() == b.shape() && a.dtype() == b.dtype() && a.device() == b.device(),
           "backward: cannot add a gradient of shape ", shape_str(b.shape()), " (",
           dtype_name(b.dtype()), ") to one of shape ", shape_str(a.shape()), " (",
           dtype_name(a.dtype()), ")");
  Tensor sum = empty(a.shape(), a.dtype(), a.device());
  kernels(a.device()).binary(BinaryOp::add, a, b, sum);
  return sum;
}

// The first gradient of a leaf becomes its .grad, which must own its storage (PyTorch's
// AccumulateGrad): a backward may hand the same tensor to several inputs (add's is {g, g}), return
// its incoming gradient (the caller's seed) or a view of it, so keeping what arrives would make
// two leaves share one .grad, or a later write to the seed change a gradient. A fresh result
// that nothing else holds -- no other handle, no view of its storage, moved here by backward() --
// is kept as it is: the common case costs no copy. Anything else is copied. (A sole owner cannot
// be shared by another thread meanwhile: it would need a handle to it.)
Tensor owned_gradient(Tensor grad) {
  const bool sole_owner = grad.impl_ptr().use_count() == 1 && grad.storage().use_count() == 1;
  if (sole_owner && grad.is_contiguous() && grad.is_leaf() && !grad.requires_grad()) return grad;
  return contiguous_copy(grad);
}

// A leaf's gradient adds up in its .grad, across inputs and across backward() calls (until
// zero_grad), as in PyTorch. The leaf's lock makes the read-add-store one step for threads that
// back-propagate into the same leaf at once (tape.h); one uncontended lock on one thread.
void accumulate_into_leaf(TensorImpl& leaf, Tensor grad) {
  // The leaf may have changed since the forward (Module::to converts parameters in place).
  TG_CHECK(grad.shape() == leaf.shape && grad.dtype() == leaf.dtype &&
               grad.device() == leaf.storage->device(),
           "backward: a gradient of shape ", shape_str(grad.shape()), " (",
           dtype_name(grad.dtype()), ") for a leaf now of shape ", shape_str(leaf.shape), " (",
           dtype_name(leaf.dtype), "): was the leaf converted after the forward?");
  if (!grad.is_contiguous()) grad = contiguous_copy(grad);
  const std::lock_guard<std::mutex> guard(grad_lock(leaf));
  // Gradients are never changed in place: a stored .grad may be shared with another tensor (the
  // caller's handle from grad(), or one given to set_grad), so the sum is a new tensor.
  leaf.grad = leaf.grad ? add_gradients(Tensor(leaf.grad), grad).impl_ptr()
                        : owned_gradient(std::move(grad)).impl_ptr();
}

// An op's output used several times (fan-out) gets one gradient per use: they add up here until
// the node's turn comes.
void accumulate_pending(PendingGrads& pending, Node& node, const Tensor& grad) {
  auto [slot, inserted] = pending.try_emplace(&node, grad);
  if (!inserted) slot->second = add_gradients(slot->second, grad);
}

// After its backward a node frees what it saved (the activations: most of training's memory).
// The node itself stays, owned by its output, marked so that a second backward fails clearly.
void release(Node& node) {
  node.saved.clear();
  node.saved_versions.clear();
  node.backward = nullptr;
  node.released = true;
}

}  // namespace

Node::~Node() {
  // Dropping the last owner of a node would drop its inputs' nodes recursively, one stack frame
  // per node. Instead, take over the inputs of every node about to die and free them in a loop.
  std::vector<std::shared_ptr<Node>> dying;
  for (Edge& edge : inputs) {
    if (edge.node) dying.push_back(std::move(edge.node));
  }
  while (!dying.empty()) {
    std::shared_ptr<Node> node = std::move(dying.back());
    dying.pop_back();
    if (node.use_count() == 1) {
      for (Edge& edge : node->inputs) {
        if (edge.node) dying.push_back(std::move(edge.node));
      }
    }
  }
}

bool grad_enabled() { return grad_mode; }
NoGrad::NoGrad() : previous_(grad_mode) { grad_mode = false; }
NoGrad::~NoGrad() { grad_mode = previous_; }
EnableGrad::EnableGrad() : previous_(grad_mode) { grad_mode = true; }
EnableGrad::~EnableGrad() { grad_mode = previous_; }

namespace {

// Every op asks this about its inputs, under no_grad too (record() does, before it returns), so it
// is also where an open ReadLog (autograd/read_log.h) learns what the op reads.
bool any_requires_grad(const Tensor* first, const Tensor* last) {
  note_reads(first, last);
  if (!grad_mode) return false;
  return std::any_of(first, last, [](const Tensor& t) { return t.defined() && t.requires_grad(); });
}

}  // namespace

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  return any_requires_grad(inputs.data(), inputs.data() + inputs.size());
}

bool any_requires_grad(std::initializer_list<Tensor> inputs) {
  return any_requires_grad(inputs.begin(), inputs.end());
}

// Called by every differentiable op right after computing `output`. The node it builds is owned
// by `output` (grad_fn); the tape gets a weak reference that only remembers the order.
void record(const char* op, const std::vector<Tensor>& inputs, Tensor& output,
            std::vector<Tensor> saved, BackwardFn backward) {
  if (!any_requires_grad(inputs)) return;
  check_recordable(op);  // a registered, differentiable name (autograd/op_registry.h)
  notify_op_recorded(op, inputs);  // the seam (runtime/tape_observer.h): the profiler's forward row
  auto node = std::make_shared<Node>();
  node->op = op;
  node->sequence = next_sequence++;
  for (const Tensor& input : inputs) {  // where each input's gradient will go
    Edge edge;
    if (input.defined()) {
      edge.shape = input.shape();
      edge.dtype = input.dtype();
      if (input.grad_fn()) edge.node = input.grad_fn();              // an op's output: its node
      else if (input.requires_grad()) edge.leaf = input.impl_ptr();  // a parameter: its .grad
    }
    node->inputs.push_back(std::move(edge));
  }
  node->saved_versions.assign(saved.size(), 0);
  for (size_t i = 0; i < saved.size(); ++i) {
    Tensor& t = saved[i];
    if (!t.defined()) continue;
    t = t.detach();  // a saved output must not own its own node
    node->saved_bytes += t.numel() * static_cast<int64_t>(dtype_size(t.dtype()));
    node->saved_versions[i] = t.version();
  }
  node->saved = std::move(saved);
  node->backward = std::move(backward);
  node->output_shape = output.shape();
  node->output_dtype = output.dtype();
  output.impl()->grad_fn = node;
  output.impl()->requires_grad = true;
  tape.push_back(node);
  if (tape.size() >= compact_at) compact_tape();
}

// Reverse-mode sweep: every leaf that `root` depends on gets d(root)/d(leaf) added to its .grad.
void backward(const Tensor& root, const Tensor& grad, bool retain_graph) {
  Tensor seed = seed_gradient(root, grad);
  const ObservedSpan sweep(nullptr);  // the seam: the profiler's "backward()" row
  const BackwardMode mode;            // nothing recorded, autocast off
  if (root.is_leaf()) return accumulate_into_leaf(*root.impl(), std::move(seed));  // no graph

  // Order: the tape, walked backwards from the root (a topological order, see the top).
  Node& root_node = *root.grad_fn();
  PendingGrads pending{{&root_node, seed}};
  for (size_t cursor = tape.size(); !pending.empty();) {
    const std::shared_ptr<Node> node = next_node(cursor, root_node, pending);
    const Tensor grad_output = take_pending(pending, *node);
    Grads grads = run_node_backward(*node, grad_output);
    // Send each input its gradient: to a leaf's .grad, or to the input's node, to wait its turn.
    // Each is moved along, so that a leaf can tell a gradient nobody else holds (owned_gradient).
    for (size_t j = 0; j < grads.size(); ++j) {
      if (!grads[j].defined() || !node->needs_grad(j)) continue;
      const Edge& edge = node->inputs[j];
      Tensor g = gradient_for_input(std::move(grads[j]), edge, node->op);  // broadcast undone
      if (edge.leaf) accumulate_into_leaf(*edge.leaf, std::move(g));
      else accumulate_pending(pending, *edge.node, g);
    }
    if (!retain_graph) release(*node);  // free the saved activations now, not at the step's end
  }
}

std::string format_tape() {
  std::ostringstream out;
  out << "  #  op                 output            dtype  saved bytes\n";
  for (const auto& entry : tape) {
    auto node = entry.lock();
    if (!node) continue;
    std::string shape = shape_str(node->output_shape);
    out << (node->sequence < 10 ? "  " : node->sequence < 100 ? " " : "") << node->sequence << "  "
        << node->op << std::string(node->op.size() < 19 ? 19 - node->op.size() : 1, ' ') << shape
        << std::string(shape.size() < 18 ? 18 - shape.size() : 1, ' ')
        << dtype_name(node->output_dtype) << std::string(7 - std::string(dtype_name(node->output_dtype)).size(), ' ')
        << node->saved_bytes << (node->released ? " (released)" : "") << "\n";
  }
  return out.str();
}

size_t tape_size() {
  compact_tape();
  return tape.size();
}

void clear_tape() { tape.clear(); }

TapeScope::TapeScope() : outer_(std::move(tape)) { tape.clear(); }
TapeScope::~TapeScope() { tape = std::move(outer_); }

}  // namespace tg
