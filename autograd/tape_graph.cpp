#include "tapegrad/autograd/tape_graph.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/tape.h"

// Describing walks the graph by raw pointers: the tensor the caller passes keeps every node,
// saved tensor and leaf alive for the whole walk, so no shared_ptr is copied (none is kept, and
// no use count moves even for a moment).
namespace tg {
namespace {

// Every node `root` reaches through its inputs, in tape order (an input's node ran earlier, so
// its sequence number is smaller: tape order is a topological order).
std::vector<const Node*> tape_graph_reachable(const Node* root) {
  std::vector<const Node*> found, stack{root};
  std::unordered_set<const Node*> seen{root};
  while (!stack.empty()) {
    const Node* node = stack.back();
    stack.pop_back();
    found.push_back(node);
    for (const Edge& edge : node->inputs) {
      const Node* input = edge.node.get();
      if (input && seen.insert(input).second) stack.push_back(input);
    }
  }
  std::sort(found.begin(), found.end(),
            [](const Node* a, const Node* b) { return a->sequence < b->sequence; });
  return found;
}

// The description of one op of the tape.
TapeNode tape_graph_op(const Node& node) {
  TapeNode op;
  op.kind = TapeNodeKind::op;
  op.name = node.op;
  op.shape = node.output_shape;
  op.dtype = node.output_dtype;
  op.saved_bytes = node.saved_bytes;
  op.saved_tensors = static_cast<int64_t>(node.saved.size());
  op.sequence = node.sequence;
  op.released = node.released;
  return op;
}

// A leaf or data input, described from the edge that reads it.
TapeNode tape_graph_input(TapeNodeKind kind, std::string name, const Edge& edge) {
  TapeNode input;
  input.kind = kind;
  input.name = std::move(name);
  input.shape = edge.shape;
  input.dtype = edge.dtype;
  return input;
}

// Builds the description op by op: each op's inputs that are not ops are added before it.
class TapeGraphBuilder {
 public:
  explicit TapeGraphBuilder(const TensorNames& names) : names_(names) {}

  // Adds the op (after its new inputs) and an edge from each of its inputs that is drawn.
  void add_op(const Node& node) {
    std::vector<std::pair<size_t, size_t>> inputs;  // (node, slot): new inputs are added first
    for (size_t slot = 0; slot < node.inputs.size(); ++slot) {
      const std::optional<size_t> from = input_node(node.inputs[slot]);
      if (from) inputs.emplace_back(*from, slot);
    }
    const size_t index = graph_.nodes.size();
    for (const auto& [from, slot] : inputs) graph_.edges.push_back({from, index, slot});
    op_index_[&node] = index;
    graph_.nodes.push_back(tape_graph_op(node));
  }

  TapeGraph take() { return std::move(graph_); }  // the description, once every op is added

 private:
  // The node an input comes from, added now if it is a new leaf or a data input; none for an
  // input left out (no gradient, 0 dims).
  std::optional<size_t> input_node(const Edge& edge) {
    if (edge.node) {
      const auto found = op_index_.find(edge.node.get());
      TG_CHECK(found != op_index_.end(), "describe_tape: op '", edge.node->op,
               "' is used before it ran (a graph recorded on several threads?)");
      return found->second;
    }
    if (edge.leaf) {
      const auto [slot, added] = leaf_index_.try_emplace(edge.leaf.get(), graph_.nodes.size());
      if (added) {
        const std::string name = leaf_name(edge.leaf.get());
        graph_.nodes.push_back(tape_graph_input(TapeNodeKind::parameter, name, edge));
      }
      return slot->second;
    }
    if (edge.shape.empty()) return std::nullopt;
    graph_.nodes.push_back(tape_graph_input(TapeNodeKind::data, "data", edge));
    return graph_.nodes.size() - 1;
  }

  // The caller's name for a leaf, or "leaf".
  std::string leaf_name(const TensorImpl* leaf) const {
    const auto found = names_.find(leaf);
    return found == names_.end() ? "leaf" : found->second;
  }

  const TensorNames& names_;
  TapeGraph graph_;
  std::unordered_map<const Node*, size_t> op_index_;
  std::unordered_map<const TensorImpl*, size_t> leaf_index_;
};

// One DOT statement line for a node: its id, label and the attributes of its kind.
std::string dot_node_line(const TapeNode& node, size_t index, bool output) {
  std::vector<std::string> lines = tape_node_lines(node);
  if (output) lines.front() += " (output)";
  std::string label;
  for (const std::string& line : lines) label += (label.empty() ? "" : "\\n") + dot_escaped(line);
  std::string line = "  n" + std::to_string(index) + " [label=\"" + label;
  if (output) return line + "\", fillcolor=\"#f9cb9c\"];";
  if (node.kind == TapeNodeKind::parameter) return line + "\", fillcolor=\"#cfe2f3\"];";
  if (node.kind == TapeNodeKind::data) return line + "\", shape=ellipse, fillcolor=\"#eeeeee\"];";
  return line + "\"];";
}

}  // namespace

int64_t TapeGraph::saved_bytes() const {
  int64_t total = 0;
  for (const TapeNode& node : nodes) total += node.saved_bytes;
  return total;
}

TapeGraph describe_tape(const Tensor& output, const TensorNames& names) {
  TG_CHECK(output.defined(), "describe_tape: undefined tensor");
  TapeGraph graph;
  const Node* root = output.grad_fn().get();
  if (!root) {  // a leaf: the whole graph is the tensor itself
    TapeNode alone;
    alone.kind = output.requires_grad() ? TapeNodeKind::parameter : TapeNodeKind::data;
    const auto found = names.find(output.impl());
    alone.name = found != names.end() ? found->second : output.requires_grad() ? "leaf" : "data";
    alone.shape = output.shape();
    alone.dtype = output.dtype();
    graph.nodes.push_back(std::move(alone));
    return graph;
  }
  TapeGraphBuilder builder(names);
  for (const Node* node : tape_graph_reachable(root)) builder.add_op(*node);
  return builder.take();
}

std::vector<std::string> tape_node_lines(const TapeNode& node) {
  std::vector<std::string> lines = {node.name,
                                    shape_str(node.shape) + " " + dtype_name(node.dtype)};
  if (node.kind == TapeNodeKind::op) {
    lines.push_back("saved " + format_bytes(node.saved_bytes) + (node.released ? ", freed" : ""));
  }
  return lines;
}

std::string format_bytes(int64_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " B";
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes) / 1024.0;
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < std::size(kUnits)) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f %s", value, kUnits[unit]);
  return text;
}

std::string dot_escaped(const std::string& text) {
  std::string escaped;
  for (const char c : text) {
    if (c == '\\' || c == '"')
      escaped += {'\\', c};
    else if (c == '\n')
      escaped += "\\n";
    else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F)
      escaped += ' ';
    else
      escaped += c;
  }
  return escaped;
}

void write_tape_dot(std::ostream& out, const TapeGraph& graph) {
  out << "digraph tape {\n"
         "  rankdir=TB;\n"
         "  node [shape=box, style=\"rounded,filled\", fillcolor=\"white\", "
         "fontname=\"DejaVu Sans\", fontsize=10];\n";
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    out << dot_node_line(graph.nodes[i], i, i == graph.output()) << "\n";
  }
  for (const TapeEdge& edge : graph.edges) out << "  n" << edge.from << " -> n" << edge.to << ";\n";
  out << "}\n";
}

void write_tape_dot(std::ostream& out, const Tensor& output, const TensorNames& names) {
  write_tape_dot(out, describe_tape(output, names));
}

}  // namespace tg
