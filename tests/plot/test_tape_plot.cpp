// The tape as a picture (plot/tape_layout.h, plot/tape_plot.h): the layered layout on graphs
// small enough to lay out by hand, the layer groups of a real two-layer model, the views with
// groups collapsed, and the PNG and HTML they make.
#include <stb/stb_image.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/tape_graph.h"
#include "tapegrad/nn/models.h"
#include "tapegrad/ops/ops.h"
#include "tapegrad/plot/tape_layout.h"
#include "tapegrad/plot/tape_plot.h"
#include "tests/support/temp_files.h"

using namespace tg;

namespace {

// How many times `part` occurs in `text`.
size_t tape_plot_count(const std::string& text, const std::string& part) {
  size_t count = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++count;
  return count;
}

// The graph of one training-mode forward and loss of a CharLM with `layers` layers (dim 8, 2
// heads) on a batch of 2 x 6 tokens, with the parameters' names.
TapeGraph tape_plot_charlm_graph(int64_t layers = 2) {
  nn::ModelConfig config;
  config.dim = 8;
  config.heads = 2;
  config.layers = layers;
  config.max_len = 16;
  nn::CharLM model(10, config);
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 12; ++i) ids.push_back(2 + i % 8);
  const Tensor tokens = from_indices(ids, {2, 6});
  const Tensor loss = cross_entropy(model.forward(tokens), tokens);
  TensorNames names;
  for (const auto& [name, parameter] : model.named_parameters()) names[parameter.impl()] = name;
  return describe_tape(loss, names);
}

// The op names of a group's ops, in tape order.
std::vector<std::string> tape_plot_group_ops(const TapeGraph& graph, const plot::TapeGroups& groups,
                                             int group) {
  std::vector<std::string> ops;
  for (size_t node = 0; node < graph.nodes.size(); ++node) {
    if (groups.group_of[node] == group && graph.nodes[node].kind == TapeNodeKind::op) {
      ops.push_back(graph.nodes[node].name);
    }
  }
  return ops;
}

}  // namespace

TEST_CASE("longest_path_layers and move_sources_to_readers on a small DAG", "[plot][tape_plot]") {
  // 0 -> 2, 1 -> 2, 2 -> 3, 0 -> 3, 3 -> 5, 4 -> 5. Longest paths from the sources: 0, 1, 4 at 0;
  // 2 at 1; 3 at 2 (through 2, not straight from 0); 5 at 3.
  const std::vector<plot::LayoutEdge> edges = {{0, 2}, {1, 2}, {2, 3}, {0, 3}, {3, 5}, {4, 5}};
  std::vector<int> layers = plot::longest_path_layers(6, edges);
  REQUIRE(layers == std::vector<int>{0, 0, 1, 2, 0, 3});
  // Source 4 is read only by 5 (layer 3): it moves to 2. Sources 0 and 1 are read in layer 1.
  plot::move_sources_to_readers(layers, edges);
  REQUIRE(layers == std::vector<int>{0, 0, 1, 2, 2, 3});
  REQUIRE_THROWS_WITH(plot::longest_path_layers(2, {{0, 1}, {1, 0}}), Catch::Contains("cycle"));
  REQUIRE_THROWS_WITH(plot::longest_path_layers(2, {{0, 2}}), Catch::Contains("0 -> 2"));
}

TEST_CASE("order_by_barycentre removes the crossing of two swapped pairs", "[plot][tape_plot]") {
  // Row 0: 0 1; row 1: 2 3 with 0 -> 3 and 1 -> 2: one crossing, none once 2 and 3 swap.
  const std::vector<plot::LayoutEdge> edges = {{0, 3}, {1, 2}};
  const plot::LayerRows rows = {{0, 1}, {2, 3}};
  REQUIRE(plot::count_crossings(rows, edges) == 1);
  const plot::LayerRows ordered = plot::order_by_barycentre(rows, edges);
  REQUIRE(plot::count_crossings(ordered, edges) == 0);
  REQUIRE(ordered == plot::LayerRows{{0, 1}, {3, 2}});
}

TEST_CASE("layered_drawing: rows go down, boxes never overlap, arrows join the boxes",
          "[plot][tape_plot]") {
  // A diamond, 0 -> 1 -> 3 and 0 -> 2 -> 3, and a long edge 0 -> 3 past layer 1.
  const std::vector<plot::LayoutEdge> edges = {{0, 1}, {0, 2}, {1, 3}, {2, 3}, {0, 3}};
  const std::vector<plot::BoxSize> boxes(4, {60, 30});
  const plot::LayeredDrawing drawing = plot::layered_drawing(boxes, edges);
  REQUIRE(drawing.layers == std::vector<int>{0, 1, 1, 2});
  REQUIRE(drawing.centres[0].y < drawing.centres[1].y);
  REQUIRE(drawing.centres[1].y == drawing.centres[2].y);
  REQUIRE(drawing.centres[2].y < drawing.centres[3].y);
  REQUIRE(std::abs(drawing.centres[1].x - drawing.centres[2].x) >= 60 + 18 - 1e-9);  // width, gap
  for (size_t e = 0; e < edges.size(); ++e) {
    const std::vector<plot::Point>& path = drawing.paths[e];
    const plot::Point from = drawing.centres[edges[e].from], to = drawing.centres[edges[e].to];
    REQUIRE(path.front().x == Approx(from.x));
    REQUIRE(path.front().y == Approx(from.y + 15));  // the source's bottom
    REQUIRE(path.back().y == Approx(to.y - 15));     // the target's top
    REQUIRE(std::abs(path.back().x - to.x) < 30);
  }
  REQUIRE(drawing.paths[4].size() == 4);  // 0 -> 3 passes layer 1 through a waypoint
  for (const plot::Point& centre : drawing.centres) {
    REQUIRE(centre.x - 30 >= 20 - 1e-9);  // the margin
    REQUIRE(centre.x + 30 <= drawing.width - 20 + 1e-9);
  }
}

TEST_CASE("layer_group_name", "[plot][tape_plot]") {
  REQUIRE(plot::layer_group_name("layers.3.attn.q_proj.weight") == "layers.3");
  REQUIRE(plot::layer_group_name("encoder.layers.12.norm1.bias") == "encoder.layers.12");
  REQUIRE(plot::layer_group_name("mylayers.3.weight").empty());
  REQUIRE(plot::layer_group_name("layers.x.weight").empty());
  REQUIRE(plot::layer_group_name("layers.3").empty());
  REQUIRE(plot::layer_group_name("head.weight").empty());
}

TEST_CASE("layer_groups: the two layers of a CharLM hold the same ops", "[plot][tape_plot]") {
  const TapeGraph graph = tape_plot_charlm_graph();
  const plot::TapeGroups groups = plot::layer_groups(graph);
  REQUIRE(groups.names == std::vector<std::string>{"layers.0", "layers.1"});
  // Every parameter in the group its name says, and only those.
  for (size_t node = 0; node < graph.nodes.size(); ++node) {
    if (graph.nodes[node].kind != TapeNodeKind::parameter) continue;
    const std::string& name = graph.nodes[node].name;
    const int expected = name.starts_with("layers.0.") ? 0 : name.starts_with("layers.1.") ? 1 : -1;
    INFO(name);
    REQUIRE(groups.group_of[node] == expected);
  }
  // The layers repeat: the same ops in the same order, starting with norm1, ending with the
  // residual add; the embedding before them and the final norm, head and loss after are in none.
  const std::vector<std::string> first = tape_plot_group_ops(graph, groups, 0);
  REQUIRE(first == tape_plot_group_ops(graph, groups, 1));
  REQUIRE(first.front() == "layer_norm");
  REQUIRE(first.back() == "add");
  REQUIRE(groups.group_of[graph.output()] == -1);
  for (size_t node = 0; node < graph.nodes.size(); ++node) {
    if (graph.nodes[node].name == "embedding") REQUIRE(groups.group_of[node] == -1);
  }
  int64_t outside = 0;  // embedding, the final layer_norm, the head and the loss's ops
  for (size_t node = 0; node < graph.nodes.size(); ++node) {
    outside += graph.nodes[node].kind == TapeNodeKind::op && groups.group_of[node] < 0;
  }
  REQUIRE(outside >= 4);
}

TEST_CASE("tape_view: a collapsed group is one box, arrows at it merged", "[plot][tape_plot]") {
  const TapeGraph graph = tape_plot_charlm_graph();
  const plot::TapeGroups groups = plot::layer_groups(graph);
  const plot::TapeView open = plot::tape_view(graph, groups, {true, true});
  REQUIRE(open.boxes.size() == graph.nodes.size());
  REQUIRE(open.edges.size() == graph.edges.size());
  const plot::TapeView folded = plot::tape_view(graph, groups, {false, true});
  size_t members = 0;
  for (const int group : groups.group_of) members += group == 0;
  REQUIRE(folded.boxes.size() == graph.nodes.size() - members + 1);
  std::set<std::pair<size_t, size_t>> seen;
  size_t group_box = folded.boxes.size();
  for (size_t box = 0; box < folded.boxes.size(); ++box) {
    if (folded.boxes[box].kind == plot::TapeBoxKind::group) group_box = box;
  }
  REQUIRE(group_box < folded.boxes.size());
  REQUIRE(folded.boxes[group_box].lines.front() == "layers.0");
  for (const plot::LayoutEdge& edge : folded.edges) {
    REQUIRE(edge.from != edge.to);
    if (edge.from == group_box || edge.to == group_box) {
      REQUIRE(seen.insert({edge.from, edge.to}).second);
    }
  }
  REQUIRE(!seen.empty());
}

TEST_CASE("tape_html: one page, a view per state, nothing fetched", "[plot][tape_plot]") {
  const TapeGraph graph = tape_plot_charlm_graph();
  const std::string html = plot::tape_html(graph, plot::layer_groups(graph), "a <title> & more");
  // All folded, each layer open alone, all open.
  REQUIRE(tape_plot_count(html, "<svg class=\"tape\"") == 4);
  REQUIRE(tape_plot_count(html, "click to expand") == 2 + 2);  // two in view 0, one in 1 and 2
  REQUIRE_THAT(html, Catch::Contains("a &lt;title&gt; &amp; more"));
  REQUIRE_THAT(html, Catch::Contains("data-show=\"1\"") && Catch::Contains("data-show=\"2\""));
  REQUIRE(html.find("http") == std::string::npos);
  REQUIRE(html.find(" src=") == std::string::npos);
}

TEST_CASE("tape_png: the whole tape, parameters in their colour", "[plot][tape_plot]") {
  tg::testing::TempDir dir;
  const TapeGraph graph = tape_plot_charlm_graph();
  plot::tape_png(dir.file("tape.png"), graph, plot::layer_groups(graph), "charlm tape");
  const std::string bytes = tg::testing::read_bytes(dir.file("tape.png"));
  int width = 0, height = 0, channels = 0;
  unsigned char* pixels =
      stbi_load_from_memory(reinterpret_cast<const unsigned char*>(bytes.data()),
                            static_cast<int>(bytes.size()), &width, &height, &channels, 3);
  REQUIRE(pixels != nullptr);
  size_t parameter_blue = 0, loss_orange = 0;
  for (int64_t i = 0; i < static_cast<int64_t>(width) * height; ++i) {
    const unsigned char* p = pixels + 3 * i;
    parameter_blue += p[0] == 207 && p[1] == 226 && p[2] == 243;
    loss_orange += p[0] == 249 && p[1] == 203 && p[2] == 156;
  }
  stbi_image_free(pixels);
  REQUIRE(width > 200);
  REQUIRE(height > 1000);  // tens of rows of boxes
  REQUIRE(parameter_blue > 1000);
  REQUIRE(loss_orange > 100);
}

TEST_CASE("a tape too tall for a PNG: one clear error; its HTML folds it", "[plot][tape_plot]") {
  tg::testing::TempDir dir;
  const TapeGraph graph = tape_plot_charlm_graph(24);
  const plot::TapeGroups groups = plot::layer_groups(graph);
  REQUIRE(groups.names.size() == 24);
  REQUIRE_THROWS_WITH(plot::tape_png(dir.file("tape.png"), graph, groups, "24 layers"),
                      Catch::Contains("boxes would make a PNG of") &&
                          Catch::Contains("past the limit (16384 a side") &&
                          Catch::Contains("write .html instead"));
  REQUIRE_FALSE(std::filesystem::exists(dir.file("tape.png")));
  // Past 16 groups: all folded and all open, no view of one group alone.
  const std::string html = plot::tape_html(graph, groups, "24 layers");
  REQUIRE(tape_plot_count(html, "<svg class=\"tape\"") == 2);
  REQUIRE(tape_plot_count(html, "click to expand") == 24);
  REQUIRE(tape_plot_count(html, "data-show=\"1\"") == 24 + 1);  // the groups and a button
}
