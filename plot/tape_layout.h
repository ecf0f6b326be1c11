#pragma once
// A layered drawing of a directed acyclic graph (Sugiyama's method, in its simplest form), for
// `tapegrad plot tape`: data flows down the page, one row (layer) after another.
//
//   1. Layers: longest path from the sources (a node sits one layer below its latest input), then
//      every source (a parameter, a data input) moved down to just above its first reader, so
//      that a weight used at the end is not drawn at the top with an arrow across the page.
//   2. An edge that spans several layers gets a waypoint in each layer it crosses: it bends
//      around the boxes instead of running through them.
//   3. Order within a layer: barycentre sweeps, down then up (each node goes where its neighbours
//      in the layer above, then below, are on average), keeping the order with fewest crossings.
//   4. Positions: each node pulled towards its neighbours' average, boxes never overlapping.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace tg::plot {

struct LayoutEdge {
  size_t from = 0, to = 0;
};

// Step 1 without its second half: a source is in layer 0, any other node one below the deepest
// of its inputs. tg::Error for an edge to a node past `count`, or a cycle.
std::vector<int> longest_path_layers(size_t count, const std::vector<LayoutEdge>& edges);
// Step 1, second half: each node without inputs moved to one layer above its highest reader.
void move_sources_to_readers(std::vector<int>& layers, const std::vector<LayoutEdge>& edges);

// Rows of node ids, top to bottom, each row left to right.
using LayerRows = std::vector<std::vector<size_t>>;
// How many pairs of edges cross between adjacent rows (every edge must join adjacent rows).
int64_t count_crossings(const LayerRows& rows, const std::vector<LayoutEdge>& edges);
// Step 3: `rows` reordered to fewer crossings (never more than it had).
LayerRows order_by_barycentre(LayerRows rows, const std::vector<LayoutEdge>& edges);

struct Point {
  double x = 0, y = 0;
};
struct BoxSize {
  double width = 0, height = 0;
};

// The whole drawing: every box's centre, and each edge's path from the bottom of its source to the
// top of its target through its waypoints, in a width x height area with `margin` all round.
struct LayeredDrawing {
  std::vector<Point> centres;             // one a box
  std::vector<std::vector<Point>> paths;  // one an edge, in the edges' order
  std::vector<int> layers;                // one a box
  double width = 0, height = 0;
};

struct LayoutSpacing {
  double margin = 20, column_gap = 18, row_gap = 30;
};

// Steps 1 to 4 for boxes of the given sizes. Edges into one box end at points spread along its
// top edge, in the left-to-right order of where they come from.
LayeredDrawing layered_drawing(const std::vector<BoxSize>& boxes,
                               const std::vector<LayoutEdge>& edges,
                               const LayoutSpacing& spacing = {});

}  // namespace tg::plot
