#include "tapegrad/plot/tape_layout.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "tapegrad/autograd/error.h"

namespace tg::plot {
namespace {

// The nodes each node reads from (preds) and is read by (succs), over `count` nodes.
struct LayoutAdjacency {
  std::vector<std::vector<size_t>> preds, succs;
};

LayoutAdjacency layout_adjacency(size_t count, const std::vector<LayoutEdge>& edges) {
  LayoutAdjacency adjacency{std::vector<std::vector<size_t>>(count),
                            std::vector<std::vector<size_t>>(count)};
  for (const LayoutEdge& edge : edges) {
    TG_CHECK(edge.from < count && edge.to < count, "layered drawing: an edge ", edge.from, " -> ",
             edge.to, " for a graph of ", count, " nodes");
    adjacency.succs[edge.from].push_back(edge.to);
    adjacency.preds[edge.to].push_back(edge.from);
  }
  return adjacency;
}

// The graph with a waypoint node in every layer an edge passes through: `segments` join adjacent
// layers only, and chains[e] is edge e's path (source, waypoints, target).
struct LayoutSegments {
  std::vector<int> layers;  // the boxes', then the waypoints'
  std::vector<LayoutEdge> segments;
  std::vector<std::vector<size_t>> chains;
};

LayoutSegments layout_segments(const std::vector<int>& layers,
                               const std::vector<LayoutEdge>& edges) {
  LayoutSegments split{layers, {}, {}};
  for (const LayoutEdge& edge : edges) {
    std::vector<size_t> chain{edge.from};
    for (int layer = layers[edge.from] + 1; layer < layers[edge.to]; ++layer) {
      split.layers.push_back(layer);
      chain.push_back(split.layers.size() - 1);
    }
    chain.push_back(edge.to);
    for (size_t i = 0; i + 1 < chain.size(); ++i)
      split.segments.push_back({chain[i], chain[i + 1]});
    split.chains.push_back(std::move(chain));
  }
  return split;
}

// Every node's row, in id order within a row.
LayerRows layout_rows(const std::vector<int>& layers) {
  const int deepest = layers.empty() ? -1 : *std::max_element(layers.begin(), layers.end());
  LayerRows rows(static_cast<size_t>(deepest + 1));
  for (size_t node = 0; node < layers.size(); ++node) rows[layers[node]].push_back(node);
  return rows;
}

// Each node's index within its row.
std::vector<size_t> layout_positions(const LayerRows& rows, size_t count) {
  std::vector<size_t> position(count, 0);
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) position[row[i]] = i;
  }
  return position;
}

// One barycentre pass over row `row`: each node keyed by the mean position of its neighbours
// (none: where it is), then sorted by key, ties kept in order.
void layout_sort_row(std::vector<size_t>& row, const std::vector<std::vector<size_t>>& neighbours,
                     std::vector<size_t>& position) {
  std::vector<std::pair<double, size_t>> keyed;
  for (const size_t node : row) {
    double key = static_cast<double>(position[node]);
    if (!neighbours[node].empty()) {
      double sum = 0;
      for (const size_t other : neighbours[node]) sum += static_cast<double>(position[other]);
      key = sum / static_cast<double>(neighbours[node].size());
    }
    keyed.emplace_back(key, node);
  }
  std::stable_sort(keyed.begin(), keyed.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 0; i < row.size(); ++i) {
    row[i] = keyed[i].second;
    position[row[i]] = i;
  }
}

// The least separation between the centres of neighbours a and b in a row.
double layout_separation(const std::vector<BoxSize>& sizes, size_t a, size_t b, double gap) {
  const bool both_boxes = sizes[a].width > 0 && sizes[b].width > 0;
  return (sizes[a].width + sizes[b].width) / 2 + (both_boxes ? gap : gap / 2);
}

// Centres as close to `wanted` as the least distances allow (separation[i]: between items i - 1
// and i), in order: the mean of the placement pushed rightwards and the one pushed leftwards
// (both keep the distances, so their mean does too).
std::vector<double> layout_spread(const std::vector<double>& wanted,
                                  const std::vector<double>& separation) {
  const size_t n = wanted.size();
  if (n == 0) return {};
  std::vector<double> right(n), left(n);
  right[0] = wanted[0];
  for (size_t i = 1; i < n; ++i) right[i] = std::max(wanted[i], right[i - 1] + separation[i]);
  left[n - 1] = wanted[n - 1];
  for (size_t i = n - 1; i-- > 0;) left[i] = std::min(wanted[i], left[i + 1] - separation[i + 1]);
  for (size_t i = 0; i < n; ++i) right[i] = (right[i] + left[i]) / 2;
  return right;
}

// The sources row[first, last) between placed neighbours (row[first - 1] when first > 0, row[last]
// when last < size): pushed right from their wanted places past the left neighbour, then pulled
// back left of the right one.
void layout_place_sources(const std::vector<size_t>& row, size_t first, size_t last,
                          const std::vector<double>& wanted, const std::vector<double>& separation,
                          std::vector<double>& x) {
  for (size_t i = first; i < last; ++i) {
    x[row[i]] = i == 0 ? wanted[i] : std::max(wanted[i], x[row[i - 1]] + separation[i]);
  }
  if (last == row.size()) return;
  for (size_t i = last; i-- > first;)
    x[row[i]] = std::min(x[row[i]], x[row[i + 1]] - separation[i + 1]);
}

// A row's centres as close to `wanted` as the separation allows, in the row's order. Computed
// nodes go first (with room for the sources between them), then the sources (parameters, data)
// take the places nearest theirs that are left: a parameter never pushes an op aside.
void layout_place_row(const std::vector<size_t>& row, const std::vector<double>& wanted,
                      const std::vector<BoxSize>& sizes, double gap,
                      const std::vector<bool>& is_source, std::vector<double>& x) {
  std::vector<double> separation(row.size(), 0);
  for (size_t i = 1; i < row.size(); ++i)
    separation[i] = layout_separation(sizes, row[i - 1], row[i], gap);
  std::vector<size_t> fixed;  // the computed nodes' places in the row
  for (size_t i = 0; i < row.size(); ++i) {
    if (!is_source[row[i]]) fixed.push_back(i);
  }
  if (fixed.empty()) {  // a row of sources alone
    fixed.resize(row.size());
    std::iota(fixed.begin(), fixed.end(), size_t{0});
  }
  std::vector<double> fixed_wanted, fixed_separation;
  for (size_t k = 0; k < fixed.size(); ++k) {
    fixed_wanted.push_back(wanted[fixed[k]]);
    double room = 0;  // from the previous computed node, the sources between them included
    for (size_t i = k == 0 ? 1 : fixed[k - 1] + 1; k > 0 && i <= fixed[k]; ++i)
      room += separation[i];
    fixed_separation.push_back(room);
  }
  const std::vector<double> placed = layout_spread(fixed_wanted, fixed_separation);
  for (size_t k = 0; k < fixed.size(); ++k) x[row[fixed[k]]] = placed[k];
  size_t first = 0;
  for (size_t k = 0; k <= fixed.size(); ++k) {
    const size_t last = k < fixed.size() ? fixed[k] : row.size();
    layout_place_sources(row, first, last, wanted, separation, x);
    first = last + 1;
  }
}

// The neighbours that place a node in step 4: its inputs that are computed (not sources such as
// parameters) when it has any, so that a chain of ops runs straight down with its parameters
// beside it instead of being pulled sideways by them; else all of them. Its readers going up.
LayoutAdjacency layout_anchors(const LayoutAdjacency& adjacency) {
  LayoutAdjacency anchors = adjacency;
  for (auto& preds : anchors.preds) {
    std::vector<size_t> computed;
    for (const size_t pred : preds) {
      if (!adjacency.preds[pred].empty()) computed.push_back(pred);
    }
    if (!computed.empty()) preds = std::move(computed);
  }
  return anchors;
}

// Step 4: x of every node, rows packed first, then pulled towards their neighbours a few times.
std::vector<double> layout_columns(const LayerRows& rows, const LayoutAdjacency& all_neighbours,
                                   const std::vector<BoxSize>& sizes, double gap) {
  const LayoutAdjacency adjacency = layout_anchors(all_neighbours);
  std::vector<bool> is_source(sizes.size());
  for (size_t node = 0; node < sizes.size(); ++node)
    is_source[node] = all_neighbours.preds[node].empty();
  std::vector<double> x(sizes.size(), 0);
  for (const auto& row : rows) {
    const std::vector<double> packed(row.size(), 0);
    layout_place_row(row, packed, sizes, gap, is_source, x);  // all wanted at 0: packed around it
  }
  for (int round = 0; round < 8; ++round) {
    const bool down = round % 2 == 0;
    const auto& neighbours = down ? adjacency.preds : adjacency.succs;
    for (size_t step = 0; step < rows.size(); ++step) {
      const auto& row = rows[down ? step : rows.size() - 1 - step];
      std::vector<double> wanted;
      for (const size_t node : row) {
        double sum = 0;
        for (const size_t other : neighbours[node]) sum += x[other];
        wanted.push_back(neighbours[node].empty()
                             ? x[node]
                             : sum / static_cast<double>(neighbours[node].size()));
      }
      layout_place_row(row, wanted, sizes, gap, is_source, x);
    }
  }
  return x;
}

// The y of each row's top and its height (its tallest box).
struct LayoutRowBands {
  std::vector<double> top, height;
  double bottom = 0;
};

LayoutRowBands layout_row_bands(const LayerRows& rows, const std::vector<BoxSize>& sizes,
                                const LayoutSpacing& spacing) {
  LayoutRowBands bands;
  double y = spacing.margin;
  for (const auto& row : rows) {
    double tallest = 0;
    for (const size_t node : row) tallest = std::max(tallest, sizes[node].height);
    bands.top.push_back(y);
    bands.height.push_back(tallest);
    y += tallest + spacing.row_gap;
  }
  bands.bottom = y - spacing.row_gap + spacing.margin;
  return bands;
}

// Edge e's path: from the bottom of its source, down through each waypoint's row, to its slot
// on the top of its target.
std::vector<Point> layout_path(const std::vector<size_t>& chain, const std::vector<double>& x,
                               const std::vector<int>& layers, const LayoutRowBands& bands,
                               const std::vector<BoxSize>& sizes, double end_x) {
  const size_t source = chain.front(), target = chain.back();
  const double source_y = bands.top[layers[source]] + bands.height[layers[source]] / 2;
  std::vector<Point> path{{x[source], source_y + sizes[source].height / 2}};
  for (size_t i = 1; i + 1 < chain.size(); ++i) {
    const int row = layers[chain[i]];
    path.push_back({x[chain[i]], bands.top[row]});
    path.push_back({x[chain[i]], bands.top[row] + bands.height[row]});
  }
  const double target_y = bands.top[layers[target]] + bands.height[layers[target]] / 2;
  path.push_back({end_x, target_y - sizes[target].height / 2});
  return path;
}

// Where each edge ends on its target's top: the target's edges spread evenly along it, in the
// left-to-right order of the points they come from.
std::vector<double> layout_edge_ends(const LayoutSegments& split, const std::vector<double>& x,
                                     const std::vector<BoxSize>& sizes) {
  std::vector<std::vector<size_t>> into(sizes.size());
  for (size_t e = 0; e < split.chains.size(); ++e) into[split.chains[e].back()].push_back(e);
  std::vector<double> ends(split.chains.size(), 0);
  for (size_t target = 0; target < into.size(); ++target) {
    auto& edges = into[target];
    const auto from_x = [&](size_t e) { return x[split.chains[e][split.chains[e].size() - 2]]; };
    std::stable_sort(edges.begin(), edges.end(),
                     [&](size_t a, size_t b) { return from_x(a) < from_x(b); });
    const double left = x[target] - sizes[target].width / 2;
    for (size_t k = 0; k < edges.size(); ++k) {
      ends[edges[k]] = left + sizes[target].width * static_cast<double>(k + 1) /
                                  static_cast<double>(edges.size() + 1);
    }
  }
  return ends;
}

}  // namespace

std::vector<int> longest_path_layers(size_t count, const std::vector<LayoutEdge>& edges) {
  const LayoutAdjacency adjacency = layout_adjacency(count, edges);
  std::vector<size_t> waiting(count);  // inputs not yet placed
  std::vector<size_t> ready;
  for (size_t node = 0; node < count; ++node) {
    waiting[node] = adjacency.preds[node].size();
    if (waiting[node] == 0) ready.push_back(node);
  }
  std::vector<int> layers(count, 0);
  size_t placed = 0;
  while (!ready.empty()) {
    const size_t node = ready.back();
    ready.pop_back();
    ++placed;
    for (const size_t reader : adjacency.succs[node]) {
      layers[reader] = std::max(layers[reader], layers[node] + 1);
      if (--waiting[reader] == 0) ready.push_back(reader);
    }
  }
  TG_CHECK(placed == count, "layered drawing: the graph has a cycle");
  return layers;
}

void move_sources_to_readers(std::vector<int>& layers, const std::vector<LayoutEdge>& edges) {
  const LayoutAdjacency adjacency = layout_adjacency(layers.size(), edges);
  for (size_t node = 0; node < layers.size(); ++node) {
    if (!adjacency.preds[node].empty() || adjacency.succs[node].empty()) continue;
    int highest = std::numeric_limits<int>::max();
    for (const size_t reader : adjacency.succs[node]) highest = std::min(highest, layers[reader]);
    layers[node] = highest - 1;
  }
}

int64_t count_crossings(const LayerRows& rows, const std::vector<LayoutEdge>& edges) {
  size_t count = 0;
  for (const auto& row : rows) {
    for (const size_t node : row) count = std::max(count, node + 1);
  }
  for (const LayoutEdge& edge : edges) count = std::max({count, edge.from + 1, edge.to + 1});
  const std::vector<size_t> position = layout_positions(rows, count);
  std::vector<int> row_of(count, -1);
  for (size_t r = 0; r < rows.size(); ++r) {
    for (const size_t node : rows[r]) row_of[node] = static_cast<int>(r);
  }
  std::vector<std::vector<LayoutEdge>> leaving(rows.size());  // the edges from each row
  for (const LayoutEdge& edge : edges) {
    if (row_of[edge.from] >= 0) leaving[row_of[edge.from]].push_back(edge);
  }
  int64_t crossings = 0;
  for (const auto& between : leaving) {
    for (size_t a = 0; a < between.size(); ++a) {
      for (size_t b = a + 1; b < between.size(); ++b) {
        const auto top_a = position[between[a].from], top_b = position[between[b].from];
        const auto low_a = position[between[a].to], low_b = position[between[b].to];
        crossings += (top_a < top_b && low_a > low_b) || (top_a > top_b && low_a < low_b);
      }
    }
  }
  return crossings;
}

LayerRows order_by_barycentre(LayerRows rows, const std::vector<LayoutEdge>& edges) {
  size_t count = 0;
  for (const auto& row : rows) {
    for (const size_t node : row) count = std::max(count, node + 1);
  }
  const LayoutAdjacency adjacency = layout_adjacency(count, edges);
  std::vector<size_t> position = layout_positions(rows, count);
  LayerRows best = rows;
  int64_t fewest = count_crossings(rows, edges);
  for (int sweep = 0; sweep < 8 && fewest > 0; ++sweep) {
    for (size_t r = 1; r < rows.size(); ++r) layout_sort_row(rows[r], adjacency.preds, position);
    for (size_t r = rows.size(); r-- > 1;) layout_sort_row(rows[r - 1], adjacency.succs, position);
    const int64_t crossings = count_crossings(rows, edges);
    if (crossings < fewest) {
      fewest = crossings;
      best = rows;
    }
  }
  return best;
}

LayeredDrawing layered_drawing(const std::vector<BoxSize>& boxes,
                               const std::vector<LayoutEdge>& edges, const LayoutSpacing& spacing) {
  std::vector<int> layers = longest_path_layers(boxes.size(), edges);
  move_sources_to_readers(layers, edges);
  const LayoutSegments split = layout_segments(layers, edges);
  std::vector<BoxSize> sizes = boxes;
  sizes.resize(split.layers.size());  // waypoints take no room
  const LayerRows rows = order_by_barycentre(layout_rows(split.layers), split.segments);
  const LayoutAdjacency adjacency = layout_adjacency(sizes.size(), split.segments);
  std::vector<double> x = layout_columns(rows, adjacency, sizes, spacing.column_gap);
  double left = std::numeric_limits<double>::max(), right = 0;
  for (size_t node = 0; node < sizes.size(); ++node)
    left = std::min(left, x[node] - sizes[node].width / 2);
  for (double& centre : x) centre += spacing.margin - (sizes.empty() ? 0 : left);
  for (size_t node = 0; node < sizes.size(); ++node)
    right = std::max(right, x[node] + sizes[node].width / 2);

  const LayoutRowBands bands = layout_row_bands(rows, sizes, spacing);
  LayeredDrawing drawing;
  drawing.layers = layers;
  for (size_t node = 0; node < boxes.size(); ++node) {
    drawing.centres.push_back({x[node], bands.top[layers[node]] + bands.height[layers[node]] / 2});
  }
  const std::vector<double> ends = layout_edge_ends(split, x, sizes);
  for (size_t e = 0; e < split.chains.size(); ++e) {
    drawing.paths.push_back(layout_path(split.chains[e], x, split.layers, bands, sizes, ends[e]));
  }
  drawing.width = right + spacing.margin;
  drawing.height = bands.bottom;
  return drawing;
}

}  // namespace tg::plot
