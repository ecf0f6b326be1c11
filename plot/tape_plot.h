#pragma once
// The tape of a training step as a picture (`tapegrad plot tape`): the graph describe_tape gives
// (autograd/tape_graph.h) drawn layered, top to bottom (plot/tape_layout.h), one box per op
// (op, output shape and dtype, bytes saved for backward), parameters and data as boxes of their
// own colours, arrows for the data, the loss last. As a PNG (every op drawn, each repeated layer
// on a tinted band) or as one self-contained HTML page (inline SVG and a little script, nothing
// fetched) in which each repeated layer starts collapsed into one box that a click expands.
#include <string>
#include <vector>

#include "tapegrad/autograd/tape_graph.h"
#include "tapegrad/plot/tape_layout.h"

namespace tg::plot {

// The layer a parameter belongs to: "layers.3" for "layers.3.attn.q_proj.weight", the prefix
// kept for "encoder.layers.3.norm1.weight" ("encoder.layers.3"); "" for a name with no
// "layers.<number>." part.
std::string layer_group_name(const std::string& parameter);

// The repeated layers of a model, found from its parameters' names:
//   - a parameter belongs to the layer its name gives (layer_group_name);
//   - an op belongs to layer g when g is the latest layer it depends on and it leads, within
//     that layer, to an op that reads one of g's parameters (a layer's norms, projections,
//     attention and MLP), or when it comes after those and only from them, on the way to an op
//     that joins two of the layer's values (the residual add that ends a layer, and the dropout
//     before it); what follows the last layer (pooling, the head, the loss) belongs to none;
//   - a data input belongs to the layer of the op that reads it.
struct TapeGroups {
  std::vector<int> group_of;       // one a node of the graph: its group, or -1 for none
  std::vector<std::string> names;  // one a group, in tape order ("layers.0", "layers.1", ...)
};
TapeGroups layer_groups(const TapeGraph& graph);

enum class TapeBoxKind { op, parameter, data, output, group };

struct TapeBox {
  TapeBoxKind kind = TapeBoxKind::op;
  std::vector<std::string> lines;  // the label, one line each
  std::string details;             // the HTML's tooltip: the label and the op's tape position
  int group = -1;                  // a collapsed group's box, or a member of an expanded group
};

// What one drawing shows: every node of the graph, except that the members of each group not
// `expanded` are one box together ("layers.1", its op and parameter count, its saved bytes);
// arrows into and out of a collapsed group are merged, one per pair of boxes.
struct TapeView {
  std::vector<TapeBox> boxes;
  std::vector<LayoutEdge> edges;
};
TapeView tape_view(const TapeGraph& graph, const TapeGroups& groups,
                   const std::vector<bool>& expanded);

// The PNG of the whole graph, every group expanded, under `title`. tg::Error when the drawing
// would pass 40 million pixels (the HTML has no such limit); the file is written atomically.
void tape_png(const std::string& path, const TapeGraph& graph, const TapeGroups& groups,
              const std::string& title);

// The HTML page: views with every group collapsed, with each group expanded alone (up to 16
// groups), and with all expanded; a click on a collapsed group shows it expanded, a click on an
// expanded group's band collapses it. Every box's tooltip says what it holds.
std::string tape_html(const TapeGraph& graph, const TapeGroups& groups, const std::string& title);

}  // namespace tg::plot
