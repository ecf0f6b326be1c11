#pragma once
// Pictures of a program's own tensors, the component tapegrad::plot of the installed package
// (find_package(tapegrad REQUIRED COMPONENTS plot); docs/cli.md's "Plots from C++"):
//
//   plot::heatmap("w.png", model.weight, {.title = "weight"});             // matplotlib's imshow
//   plot::attention_grid("attn.png", out.weights, {.tokens = words});      // one panel a head
//   plot::loss_curves("loss.png", plot::read_training_log("run/log.csv"));
//   plot::tape_picture("tape.html", loss, names);                           // the graph of a loss
//
// Each call writes one file, atomically (io/file_io.h: a failed write leaves an existing file as
// it was), and draws with the renderers of plot/png.h and plot/tape_plot.h; the labels are drawn
// in DejaVu Sans (plot::font_path(): Debian's fonts-dejavu-core, or $TAPEGRAD_FONT).
//
// What the calls accept, and what they refuse with a tg::Error naming the call and the shape:
//   - a tensor of any dtype on any device: it is copied to the host as doubles (under NoGrad:
//     nothing is recorded on the tape, and a tensor that requires grad is drawn as it is);
//   - NaN and infinite values are drawn in kNonFiniteCell grey (plot/png.h) and take no part in
//     the colour scale; a curve's NaN or infinite point is a gap in its line;
//   - a tensor of the wrong rank, an empty one, label counts that are not the sizes they label,
//     and a tensor of more than kMaxPlotValues values (refused, not downsampled: a heatmap is at
//     most 480 pixels a side, so slice or pool a larger one first, and say how).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tapegrad/autograd/tape_graph.h"
#include "tapegrad/autograd/tensor.h"
#include "tapegrad/plot/png.h"
#include "tapegrad/plot/training_log.h"

namespace tg::plot {

// The most values one call copies to the host and draws: 4096 x 4096.
inline constexpr int64_t kMaxPlotValues = int64_t{1} << 24;
// The most panels attention_grid draws: heads of one batch item.
inline constexpr int64_t kMaxAttentionPanels = 64;

struct HeatmapOptions {
  std::string title;
  std::vector<std::string> row_labels, col_labels;  // empty (numbered), or one a row / a column
  std::string x_label, y_label;                     // the axes' names, under and left of the cells
  // The colour range (matplotlib's vmin and vmax): vmin gets the colour map's first colour, vmax
  // its last, values beyond them the colour of their end. Unset: the finite values' min and max.
  std::optional<double> vmin, vmax;
};

// A 2-D tensor [rows, cols] as a heatmap PNG, row 0 at the top, with a colour bar.
void heatmap(const std::string& path, const Tensor& matrix, const HeatmapOptions& options = {});

struct AttentionGridOptions {
  std::string title;
  std::vector<std::string> tokens;      // the queries' labels (rows); the keys' too when Sq == Sk
  std::vector<std::string> key_tokens;  // the keys' labels (columns), for cross-attention
  int64_t batch = 0;                    // the batch item drawn from weights [B, heads, Sq, Sk]
  std::optional<double> vmin, vmax;     // as HeatmapOptions'; unset: the weights' min and max
};

// Attention weights as one heatmap panel a head, queries as rows and keys as columns, under one
// colour bar: [Sq, Sk] (one panel), [heads, Sq, Sk], or [B, heads, Sq, Sk], of which batch item
// `batch` is drawn (what MultiHeadAttention::forward returns with need_weights and
// average_attn_weights = false).
void attention_grid(const std::string& path, const Tensor& weights,
                    const AttentionGridOptions& options = {});

struct CurveOptions {
  std::string title = "loss";
  std::string x_label = "step", y_label = "loss";
  bool log_y = false;  // y on a log scale: points with y <= 0 are left out, like NaN
};

// Curves against step, each in its own colour with a legend: the series of read_training_log
// (plot/training_log.h), or a program's own, Series{name, steps, values}. Each series needs as
// many steps as values, at least one series has a finite point.
void loss_curves(const std::string& path, const std::vector<Series>& series,
                 const CurveOptions& options = {});

// The graph `output` was computed through (autograd/tape_graph.h's describe_tape): one box an op,
// parameters by the names `names` gives them, repeated layers ("layers.<n>." in those names)
// grouped. `path` ending in .png: every op drawn (tg::Error past 40 million pixels); in .html: one
// page in which each repeated layer is one box that a click expands. Call it before backward() to
// show what each op saved (afterwards the ops say they freed it). Parameter names of a module:
//   for (const auto& [name, p] : model.named_parameters()) names[p.impl()] = name;
void tape_picture(const std::string& path, const Tensor& output, const TensorNames& names = {},
                  const std::string& title = "");

}  // namespace tg::plot
