#pragma once
// The tape as a picture: the graph a tensor's grad_fn reaches, written down as plain data (one
// entry per op, per parameter and per data input, and the arrows between them), and as Graphviz
// DOT, micrograd's draw_dot for tapegrad:
//
//   TensorNames names = {{w.impl(), "w"}, {b.impl(), "b"}};
//   write_tape_dot(std::cout, loss, names);   // then: dot -Tsvg tape.dot > tape.svg
//
// Describing only reads the graph: it copies no shared_ptr (no node, saved tensor or leaf is
// kept alive by it or by what it returns), changes no node and runs no backward. A graph that
// backward() already went through is described too; its ops say that they freed what they saved.
#include <cstddef>
#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "tapegrad/autograd/tensor.h"

namespace tg {

// What a leaf is called in the description: parameters by their TensorImpl (names[w.impl()]).
using TensorNames = std::map<const TensorImpl*, std::string>;

enum class TapeNodeKind {
  op,         // a node of the tape: an op's output
  parameter,  // a leaf that requires grad: backward accumulates into its .grad
  data,       // an input of an op that needs no gradient (tokens, targets, masks)
};

struct TapeNode {
  TapeNodeKind kind = TapeNodeKind::op;
  // op: the op ("matmul"); parameter: its name in TensorNames, or "leaf"; data: "data".
  std::string name;
  Shape shape;  // op: its output's; others: the input's, as the op that read it saw it
  DType dtype = DType::f32;
  int64_t saved_bytes = 0;    // op: the bytes its backward keeps (Node::saved_bytes)
  int64_t saved_tensors = 0;  // op: how many tensors it saved
  uint64_t sequence = 0;      // op: its position on the tape (execution order)
  bool released = false;      // op: backward already ran and freed what it saved
};

// Node `from` is input number `input` of op `to`.
struct TapeEdge {
  size_t from = 0, to = 0, input = 0;
  bool operator==(const TapeEdge&) const = default;
};

struct TapeGraph {
  // Ops in tape order, each preceded by its inputs that are not ops (parameters at their first
  // use, one data node per data input). The described tensor is the last node.
  std::vector<TapeNode> nodes;
  std::vector<TapeEdge> edges;  // in the order of `nodes`' ops, then of their inputs
  size_t output() const { return nodes.size() - 1; }
  // The ops' saved bytes added up (a tensor that two ops save counts twice).
  int64_t saved_bytes() const;
};

// The graph `output` was computed through. A leaf `output` is a graph of one node. An input that
// needs no gradient is recorded on the tape by its shape and dtype alone, and an absent optional
// input (a Linear without bias) looks there like a 0-d one: data inputs of 0 dims are left out.
// tg::Error for an undefined tensor.
TapeGraph describe_tape(const Tensor& output, const TensorNames& names = {});

// The lines of a node's label: op, "[2, 3] f32", "saved 36 B" (", freed" once released) for an
// op; name and shape for the others.
std::vector<std::string> tape_node_lines(const TapeNode& node);
// 24 -> "24 B", 1536 -> "1.5 KiB", up to GiB.
std::string format_bytes(int64_t bytes);
// `text` as the inside of a DOT string: backslash and quote escaped, a newline as \n, other
// control bytes as spaces.
std::string dot_escaped(const std::string& text);

// Graphviz DOT of the graph: one box per op (the output's box marked "(output)" and filled
// orange), parameters blue, data grey ellipses, an arrow from each input to the op reading it,
// top to bottom. `dot -Tpng` draws it.
void write_tape_dot(std::ostream& out, const TapeGraph& graph);
void write_tape_dot(std::ostream& out, const Tensor& output, const TensorNames& names = {});

}  // namespace tg
