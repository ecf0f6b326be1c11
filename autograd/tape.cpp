#include "tapegrad/autograd/tape.h"

#include <algorithm>
#include <sstream>
#include <unordered_map>

#include "tapegrad/autograd/autocast.h"
#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/profiler.h"

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

Tensor contiguous_copy(const Tensor& t) {
  Tensor copy = empty(t.shape(), t.dtype(), t.device());
  kernels(t.device()).copy(t, copy);
  return copy;
}

// Sums a gradient over the dimensions its input was broadcast along, giving it `shape`.
Tensor reduce_to_shape(const Tensor& grad, const Shape& shape, const std::string& op) {
  if (grad.shape() == shape) return grad;
  const int64_t extra = grad.dim() - static_cast<int64_t>(shape.size());
  TG_CHECK(extra >= 0, "backward of '", op, "': gradient of shape ", shape_str(grad.shape()),
           " cannot be reduced to input shape ", shape_str(shape));
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

Tensor add_gradients(const Tensor& a, const Tensor& b) {
  Tensor sum = empty(a.shape(), a.dtype(), a.device());
  kernels(a.device()).binary(BinaryOp::add, a, b, sum);
  return sum;
}

void accumulate_into_leaf(TensorImpl& leaf, const Tensor& grad) {
  Tensor contiguous = grad.is_contiguous() ? grad : contiguous_copy(grad);
  // Gradients are never changed in place: a stored .grad may be shared with another tensor.
  leaf.grad = leaf.grad ? add_gradients(Tensor(leaf.grad), contiguous).impl_ptr()
                        : contiguous.detach().impl_ptr();
}

void release(Node& node) {
  node.saved.clear();
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

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  if (!grad_mode) return false;
  return std::any_of(inputs.begin(), inputs.end(),
                     [](const Tensor& t) { return t.defined() && t.requires_grad(); });
}

void record(const char* op, const std::vector<Tensor>& inputs, Tensor& output,
            std::vector<Tensor> saved, BackwardFn backward) {
  if (!any_requires_grad(inputs)) return;
  // Profiler: the op's forward compute just happened (its time is the gap since the last hook).
  if (profiler_detail::enabled) profiler_detail::op_recorded(op);
  auto node = std::make_shared<Node>();
  node->op = op;
  node->sequence = next_sequence++;
  for (const Tensor& input : inputs) {
    Edge edge;
    if (input.defined()) {
      edge.shape = input.shape();
      edge.dtype = input.dtype();
      if (input.grad_fn()) edge.node = input.grad_fn();
      else if (input.requires_grad()) edge.leaf = input.impl_ptr();
    }
    node->inputs.push_back(std::move(edge));
  }
  for (Tensor& t : saved) {
    if (!t.defined()) continue;
    t = t.detach();  // a saved output must not own its own node
    node->saved_bytes += t.numel() * static_cast<int64_t>(dtype_size(t.dtype()));
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

void backward(const Tensor& root, const Tensor& grad, bool retain_graph) {
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

  const ProfileRegion profile_sweep("backward()");  // profiler: the whole sweep, when on
  NoGrad no_grad;  // backward itself is not recorded
  AutocastStateScope no_autocast(std::nullopt);  // gradients keep their inputs' dtypes
  if (root.is_leaf()) {
    accumulate_into_leaf(*root.impl(), seed);
    return;
  }
  Node* root_node = root.grad_fn().get();
  std::unordered_map<Node*, Tensor> pending{{root_node, seed}};
  for (size_t i = tape.size(); i-- > 0 && !pending.empty();) {
    std::shared_ptr<Node> node = tape[i].lock();
    if (!node || node->sequence > root_node->sequence) continue;
    auto found = pending.find(node.get());
    if (found == pending.end()) continue;
    Tensor grad_output = std::move(found->second);
    pending.erase(found);
    TG_CHECK(!node->released, "backward: op '", node->op,
             "' was already back-propagated and its saved tensors freed; "
             "call backward(..., retain_graph=true) the first time to go through it again");

    Grads grads;
    {
      const ProfileRegion profile_node(node->op, ".backward");  // profiler: exact time, bytes
      grads = node->backward(grad_output, *node);
    }
    TG_CHECK(grads.size() == node->inputs.size(), "backward of '", node->op, "' returned ",
             grads.size(), " gradients for ", node->inputs.size(), " inputs");
    for (size_t j = 0; j < grads.size(); ++j) {
      const Edge& edge = node->inputs[j];
      if (!grads[j].defined() || !node->needs_grad(j)) continue;
      Tensor g = reduce_to_shape(grads[j], edge.shape, node->op);
      TG_CHECK(g.dtype() == edge.dtype, "backward of '", node->op, "': gradient dtype ",
               dtype_name(g.dtype()), " for an input of dtype ", dtype_name(edge.dtype));
      if (edge.leaf) {
        accumulate_into_leaf(*edge.leaf, g);
      } else {
        auto [slot, inserted] = pending.try_emplace(edge.node.get(), g);
        if (!inserted) slot->second = add_gradients(slot->second, g);
      }
    }
    if (!retain_graph) release(*node);
  }
  if (!pending.empty()) {
    fail("backward: op '", pending.begin()->first->op,
         "' is not on this thread's tape (was it recorded on another thread or in a TapeScope?)");
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
