// plot/plot.h: a program's tensors checked, copied to the host and handed to the renderers of
// plot/png.h (heatmap_png, line_chart_png) and plot/tape_plot.h (tape_png, tape_html).
#include "tapegrad/plot/plot.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/io/file_io.h"
#include "tapegrad/plot/tape_plot.h"

namespace tg::plot {

namespace {

// A tensor a plot may draw: defined, not empty, at most kMaxPlotValues values. Checked before the
// copy to the host, so that a huge tensor costs nothing but the message.
void check_drawable(const char* call, const char* what, const Tensor& tensor) {
  TG_CHECK(tensor.defined(), call, ": ", what, " is an undefined tensor");
  const Shape& shape = tensor.shape();
  TG_CHECK(tensor.numel() > 0, call, ": ", what, " ", shape_str(shape), " is empty: nothing to draw");
  TG_CHECK(tensor.numel() <= kMaxPlotValues, call, ": ", what, " ", shape_str(shape), " holds ",
           tensor.numel(), " values, more than the ", kMaxPlotValues,
           " a plot draws (a heatmap is at most 480 pixels a side): slice or pool it first");
}

// The values of `tensor`, row-major, as doubles on the host. Under NoGrad and detached: drawing
// records nothing on the tape.
std::vector<double> host_values(const Tensor& tensor) {
  const NoGrad no_grad;
  return tensor.detach().contiguous().to_host_f64();
}

// `labels` must be empty or one a position along an axis of `size`.
void check_labels(const char* call, const char* labels_name, const std::vector<std::string>& labels,
                  const char* axis, int64_t size, const char* what, const Shape& shape) {
  TG_CHECK(labels.empty() || static_cast<int64_t>(labels.size()) == size, call, ": ", labels.size(),
           " ", labels_name, " for ", what, " ", shape_str(shape), " (", size, " ", axis, ")");
}

// The colour range of vmin / vmax: either end not given is the values' finite min or max.
std::optional<ColorRange> color_range(const char* call, std::optional<double> vmin,
                                      std::optional<double> vmax, const std::vector<double>& values) {
  if (!vmin && !vmax) return std::nullopt;  // the renderer spans the finite values
  TG_CHECK((!vmin || std::isfinite(*vmin)) && (!vmax || std::isfinite(*vmax)), call,
           ": vmin and vmax must be finite numbers");
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const double v : values) {
    if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  }
  const ColorRange range{vmin.value_or(lo), vmax.value_or(hi)};
  TG_CHECK(range.lo < range.hi, call, ": the colour range runs from ", range.lo, " to ", range.hi,
           " (vmin must be below vmax, and a missing end is the values' finite min or max)");
  return range;
}

}  // namespace

void heatmap(const std::string& path, const Tensor& matrix, const HeatmapOptions& options) {
  TG_CHECK(!matrix.defined() || matrix.dim() == 2, "heatmap: expected a 2-D tensor [rows, cols], got ",
           shape_str(matrix.shape()));
  check_drawable("heatmap", "the tensor", matrix);
  const Shape& shape = matrix.shape();
  check_labels("heatmap", "row labels", options.row_labels, "rows", shape[0], "a tensor", shape);
  check_labels("heatmap", "column labels", options.col_labels, "columns", shape[1], "a tensor", shape);
  Heatmap map;
  map.rows = shape[0];
  map.cols = shape[1];
  map.values = host_values(matrix);
  map.row_labels = options.row_labels;
  map.col_labels = options.col_labels;
  map.x_label = options.x_label;
  map.y_label = options.y_label;
  const std::optional<ColorRange> range = color_range("heatmap", options.vmin, options.vmax, map.values);
  heatmap_png(path, {map}, options.title, range);
}

void attention_grid(const std::string& path, const Tensor& weights,
                    const AttentionGridOptions& options) {
  const char* call = "attention_grid";
  TG_CHECK(weights.defined(), call, ": the weights are an undefined tensor (forward with need_weights "
           "returns them)");
  const Shape& shape = weights.shape();
  TG_CHECK(weights.dim() >= 2 && weights.dim() <= 4, call,
           ": expected weights [Sq, Sk], [heads, Sq, Sk] or [B, heads, Sq, Sk], got ", shape_str(shape));
  // The batch item drawn, as [heads, Sq, Sk].
  Tensor item = weights;
  if (weights.dim() == 4) {
    TG_CHECK(options.batch >= 0 && options.batch < shape[0], call, ": batch ", options.batch,
             " is outside the ", shape[0], " items of weights ", shape_str(shape));
    const NoGrad no_grad;
    item = weights.detach().narrow(0, options.batch, 1).reshape({shape[1], shape[2], shape[3]});
  } else {
    TG_CHECK(options.batch == 0, call, ": batch ", options.batch, " given for weights ",
             shape_str(shape), ", which have no batch dimension");
    if (weights.dim() == 2) item = weights.detach().reshape({1, shape[0], shape[1]});
  }
  const int64_t heads = item.size(0), queries = item.size(1), keys = item.size(2);
  TG_CHECK(heads <= kMaxAttentionPanels, call, ": weights ", shape_str(shape), " have ", heads,
           " heads, more than the ", kMaxAttentionPanels, " panels it draws");
  check_drawable(call, "the batch item of weights", item);
  check_labels(call, "tokens", options.tokens, "queries", queries, "weights", shape);
  const std::vector<std::string>& key_tokens =
      options.key_tokens.empty() && queries == keys ? options.tokens : options.key_tokens;
  check_labels(call, "key tokens", key_tokens, "keys", keys, "weights", shape);

  const std::vector<double> values = host_values(item);
  std::vector<Heatmap> panels;
  for (int64_t h = 0; h < heads; ++h) {
    Heatmap panel;
    panel.title = heads == 1 ? "" : "head " + std::to_string(h);
    panel.rows = queries;
    panel.cols = keys;
    const auto first = values.begin() + h * queries * keys;
    panel.values.assign(first, first + queries * keys);
    panel.row_labels = options.tokens;
    panel.col_labels = key_tokens;
    panel.x_label = "key";
    panel.y_label = "query";
    panels.push_back(std::move(panel));
  }
  const std::optional<ColorRange> range = color_range(call, options.vmin, options.vmax, values);
  heatmap_png(path, panels, options.title, range);
}

void loss_curves(const std::string& path, const std::vector<Series>& series,
                 const CurveOptions& options) {
  TG_CHECK(!series.empty(), "loss_curves: no series to draw");
  bool any_point = false;
  for (const Series& s : series) {
    TG_CHECK(s.x.size() == s.y.size(), "loss_curves: series '", s.name, "' has ", s.x.size(),
             " steps but ", s.y.size(), " values");
    for (size_t i = 0; i < s.x.size(); ++i) {
      any_point = any_point || (std::isfinite(s.x[i]) && std::isfinite(s.y[i]) &&
                                (!options.log_y || s.y[i] > 0));
    }
  }
  TG_CHECK(any_point, "loss_curves: no series has a finite", options.log_y ? ", positive" : "",
           " point to draw");
  line_chart_png(path, series, options.title, options.x_label, options.y_label,
                 options.log_y ? YScale::log : YScale::linear);
}

void tape_picture(const std::string& path, const Tensor& output, const TensorNames& names,
                  const std::string& title) {
  const auto ends_with = [&](const std::string& end) {
    return path.size() > end.size() && path.compare(path.size() - end.size(), end.size(), end) == 0;
  };
  TG_CHECK(ends_with(".png") || ends_with(".html"), "tape_picture: '", path,
           "': the name must end in .png or .html (the format is taken from it)");
  TG_CHECK(output.defined(), "tape_picture: the output is an undefined tensor");
  const TapeGraph graph = describe_tape(output, names);
  const TapeGroups groups = layer_groups(graph);
  int64_t ops = 0;
  for (const TapeNode& node : graph.nodes) ops += node.kind == TapeNodeKind::op;
  const std::string heading =
      !title.empty() ? title
                     : "the tape of " + shape_str(output.shape()) + ": " + std::to_string(ops) +
                           (ops == 1 ? " op, " : " ops, ") + format_bytes(graph.saved_bytes()) +
                           " saved for backward";
  if (ends_with(".html")) {
    write_file_atomically(path, tape_html(graph, groups, heading), "tape_picture");
  } else {
    tape_png(path, graph, groups, heading);
  }
}

}  // namespace tg::plot
