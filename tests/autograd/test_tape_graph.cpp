// describe_tape and write_tape_dot (autograd/tape_graph.h) on a graph small enough to write down
// by hand: y = (a*b + c).sum() for a, b, c of 3 floats. The tape holds mul (which saves both
// factors: 2 x 3 x 4 = 24 bytes), add (saves nothing) and sum (saves nothing).
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/storage.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/autograd/tape_graph.h"
#include "tapegrad/ops/ops.h"
#include "tests/support/run_command.h"
#include "tests/support/skip.h"
#include "tests/support/temp_files.h"

using namespace tg;

namespace {

// a = [1, 2, 3], b = [4, 5, 6], c = [7, 8, 9], each a parameter, and their names.
struct TapeGraphFixture {
  Tensor a = from_values({1, 2, 3}, {3}).requires_grad_();
  Tensor b = from_values({4, 5, 6}, {3}).requires_grad_();
  Tensor c = from_values({7, 8, 9}, {3}).requires_grad_();
  TensorNames names{{a.impl(), "a"}, {b.impl(), "b"}, {c.impl(), "c"}};
};

// One node as the test writes it: kind, name, shape, dtype, saved bytes.
void require_tape_node(const TapeNode& node, TapeNodeKind kind, const std::string& name,
                       const Shape& shape, int64_t saved_bytes) {
  INFO("node " << name);
  REQUIRE(node.kind == kind);
  REQUIRE(node.name == name);
  REQUIRE(node.shape == shape);
  REQUIRE(node.dtype == DType::f32);
  REQUIRE(node.saved_bytes == saved_bytes);
}

// The lines of a text.
std::vector<std::string> tape_graph_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

TEST_CASE("describe_tape: (a*b + c).sum() as nodes, edges and saved bytes", "[tape][tape_graph]") {
  TapeGraphFixture f;
  const Tensor y = sum(f.a * f.b + f.c);
  const TapeGraph graph = describe_tape(y, f.names);
  // Each op after the inputs it reads first: a, b, mul, c, add, sum; the output last.
  REQUIRE(graph.nodes.size() == 6);
  require_tape_node(graph.nodes[0], TapeNodeKind::parameter, "a", {3}, 0);
  require_tape_node(graph.nodes[1], TapeNodeKind::parameter, "b", {3}, 0);
  require_tape_node(graph.nodes[2], TapeNodeKind::op, "mul", {3}, 24);  // a and b: 6 floats
  require_tape_node(graph.nodes[3], TapeNodeKind::parameter, "c", {3}, 0);
  require_tape_node(graph.nodes[4], TapeNodeKind::op, "add", {3}, 0);
  require_tape_node(graph.nodes[5], TapeNodeKind::op, "sum", {}, 0);
  REQUIRE(graph.nodes[2].saved_tensors == 2);
  REQUIRE(graph.nodes[2].sequence < graph.nodes[4].sequence);
  REQUIRE(graph.nodes[4].sequence < graph.nodes[5].sequence);
  REQUIRE(graph.output() == 5);
  REQUIRE(graph.saved_bytes() == 24);
  // a -> mul (input 0), b -> mul (1), mul -> add (0), c -> add (1), add -> sum (0).
  const std::vector<TapeEdge> expected = {{0, 2, 0}, {1, 2, 1}, {2, 4, 0}, {3, 4, 1}, {4, 5, 0}};
  REQUIRE(graph.edges == expected);
}

TEST_CASE("write_tape_dot: the DOT of (a*b + c).sum(), line by line", "[tape][tape_graph]") {
  TapeGraphFixture f;
  const Tensor y = sum(f.a * f.b + f.c);
  std::ostringstream dot;
  write_tape_dot(dot, y, f.names);
  const std::vector<std::string> expected = {
      "digraph tape {",
      "  rankdir=TB;",
      "  node [shape=box, style=\"rounded,filled\", fillcolor=\"white\", fontname=\"DejaVu Sans\", "
      "fontsize=10];",
      "  n0 [label=\"a\\n[3] f32\", fillcolor=\"#cfe2f3\"];",
      "  n1 [label=\"b\\n[3] f32\", fillcolor=\"#cfe2f3\"];",
      "  n2 [label=\"mul\\n[3] f32\\nsaved 24 B\"];",
      "  n3 [label=\"c\\n[3] f32\", fillcolor=\"#cfe2f3\"];",
      "  n4 [label=\"add\\n[3] f32\\nsaved 0 B\"];",
      "  n5 [label=\"sum (output)\\n[] f32\\nsaved 0 B\", fillcolor=\"#f9cb9c\"];",
      "  n0 -> n2;",
      "  n1 -> n2;",
      "  n2 -> n4;",
      "  n3 -> n4;",
      "  n4 -> n5;",
      "}"};
  REQUIRE(tape_graph_lines(dot.str()) == expected);
}

TEST_CASE("describe_tape changes nothing, and backward still works after it",
          "[tape][tape_graph]") {
  TapeGraphFixture f;
  const Tensor y = sum(f.a * f.b + f.c);
  const Node& mul_node = *y.grad_fn()->inputs[0].node->inputs[0].node;
  REQUIRE(mul_node.op == "mul");
  const std::string tape_before = format_tape();
  const long root_uses = y.grad_fn().use_count(), leaf_uses = f.a.impl_ptr().use_count();
  const long saved_uses = mul_node.saved[0].impl_ptr().use_count();
  const int64_t bytes_before = allocator_stats().current_bytes;

  std::ostringstream dot;
  write_tape_dot(dot, describe_tape(y, f.names));
  REQUIRE(format_tape() == tape_before);
  REQUIRE(y.grad_fn().use_count() == root_uses);
  REQUIRE(f.a.impl_ptr().use_count() == leaf_uses);
  REQUIRE(mul_node.saved.size() == 2);
  REQUIRE(mul_node.saved[0].impl_ptr().use_count() == saved_uses);
  REQUIRE(!mul_node.released);
  REQUIRE(allocator_stats().current_bytes == bytes_before);

  // dy/da = b, dy/db = a, dy/dc = 1.
  y.backward();
  REQUIRE(f.a.grad().to_host_f64() == std::vector<double>{4, 5, 6});
  REQUIRE(f.b.grad().to_host_f64() == std::vector<double>{1, 2, 3});
  REQUIRE(f.c.grad().to_host_f64() == std::vector<double>{1, 1, 1});
  // After backward the ops say they freed what they saved; what they saved is still counted.
  const TapeGraph after = describe_tape(y, f.names);
  REQUIRE(after.nodes[2].released);
  REQUIRE(after.nodes[2].saved_bytes == 24);
  REQUIRE(tape_node_lines(after.nodes[2]) ==
          std::vector<std::string>{"mul", "[3] f32", "saved 24 B, freed"});
}

TEST_CASE("a description keeps no tensor alive", "[tape][tape_graph]") {
  const int64_t bytes_before = allocator_stats().current_bytes;
  TapeGraph graph;
  {
    TapeGraphFixture f;
    graph = describe_tape(sum(f.a * f.b + f.c), f.names);
    REQUIRE(allocator_stats().current_bytes > bytes_before);
  }
  // The leaves, the saved factors and every output are gone; the description is still whole.
  REQUIRE(allocator_stats().current_bytes == bytes_before);
  REQUIRE(graph.nodes.size() == 6);
  REQUIRE(graph.nodes[2].name == "mul");
}

TEST_CASE("describe_tape: data inputs, unnamed leaves, a lone leaf, an undefined tensor",
          "[tape][tape_graph]") {
  // x [2, 3] needs no gradient: a data node. The 0-d factor 2 is left out (an absent input
  // looks the same on the tape).
  const Tensor x = from_values({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor w = from_values({1, 1, 1}, {3, 1}).requires_grad_();
  const Tensor y = matmul(x, w) * scalar(2.0);
  const TapeGraph graph = describe_tape(y);
  REQUIRE(graph.nodes.size() == 4);  // data, leaf, matmul, mul
  require_tape_node(graph.nodes[0], TapeNodeKind::data, "data", {2, 3}, 0);
  require_tape_node(graph.nodes[1], TapeNodeKind::parameter, "leaf", {3, 1}, 0);
  require_tape_node(graph.nodes[2], TapeNodeKind::op, "matmul", {2, 1}, 36);  // x and w: 9 floats
  require_tape_node(graph.nodes[3], TapeNodeKind::op, "mul", {2, 1}, 12);     // [2,1] and 0-d
  REQUIRE(graph.edges == std::vector<TapeEdge>{{0, 2, 0}, {1, 2, 1}, {2, 3, 0}});

  const TapeGraph lone = describe_tape(w, {{w.impl(), "w"}});
  REQUIRE(lone.nodes.size() == 1);
  require_tape_node(lone.nodes[0], TapeNodeKind::parameter, "w", {3, 1}, 0);
  REQUIRE(lone.edges.empty());
  REQUIRE_THROWS_WITH(describe_tape(Tensor()), "describe_tape: undefined tensor");
}

TEST_CASE("write_tape_dot escapes names; format_bytes", "[tape][tape_graph]") {
  REQUIRE(dot_escaped("a\"b\\c\nd\te") == "a\\\"b\\\\c\\nd e");
  const Tensor p = from_values({1, 2}, {2}).requires_grad_();
  std::ostringstream dot;
  write_tape_dot(dot, sum(p), {{p.impl(), "say \"hi\""}});
  REQUIRE_THAT(dot.str(), Catch::Contains("  n0 [label=\"say \\\"hi\\\"\\n[2] f32\""));
  REQUIRE(format_bytes(0) == "0 B");
  REQUIRE(format_bytes(1023) == "1023 B");
  REQUIRE(format_bytes(1536) == "1.5 KiB");
  REQUIRE(format_bytes(3 * 1024 * 1024) == "3.0 MiB");
}

TEST_CASE("write_tape_dot: Graphviz reads the output (where dot is installed)",
          "[tape][tape_graph]") {
  const bool has_dot = std::system("command -v dot > /dev/null 2>&1") == 0;
  if (tg::testing::skip_unless(has_dot, "Graphviz's dot is not installed")) return;
  TapeGraphFixture f;
  tg::testing::TempDir dir;
  {
    std::ofstream file(dir.file("tape.dot"));
    write_tape_dot(file, sum(f.a * f.b + f.c), f.names);
  }
  const auto [svg, status] = tg::testing::run_command("dot -Tsvg '" + dir.file("tape.dot") + "'");
  REQUIRE(status == 0);
  REQUIRE_THAT(svg, Catch::Contains("<svg") && Catch::Contains("mul"));
}
