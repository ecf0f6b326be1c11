// `tapegrad plot attention`: the attention of a checkpoint's model on one input. --out draws one
// layer as a PNG, one heatmap a head with the positions on both axes (a sparse layout -- local,
// band, bigbird -- adds a last panel: which keys each query may see at all); --html writes every
// layer and head as one interactive page (plot/attention_html.h). The input is --text for textcls
// and charlm, one window of a --data CSV for timeseries. Linformer, Performer and Reformer never
// form [S, S] weights: the ones their approximation implies are computed for the plot
// (nn/attention_weights.h) and the plot says so. --summary draws the head metrics of `analyze
// heads` over a data file instead (cli/head_summary_chart.h).
#include <boost/program_options.hpp>
#include <iostream>
#include <optional>
#include <set>

#include "tapegrad/analysis/attention_maps.h"
#include "tapegrad/analysis/head_analysis.h"
#include "tapegrad/autograd/error.h"
#include "tapegrad/cli/cli.h"
#include "tapegrad/cli/head_summary_chart.h"
#include "tapegrad/cli/options.h"
#include "tapegrad/io/file_io.h"
#include "tapegrad/nn/masks.h"
#include "tapegrad/ops/ops.h"
#include "tapegrad/plot/attention_html.h"
#include "tapegrad/plot/png.h"
#include "tapegrad/train/attention_flags.h"
#include "tapegrad/train/checkpoint_file.h"
#include "tapegrad/train/flag_scope.h"

namespace tg::cli {
namespace {

// The panel of a sparse layout over `length` positions: 1 where query i may see key j.
plot::Heatmap layout_panel(const nn::AttentionSpec& spec, int64_t length, bool causal,
                           const std::vector<std::string>& tokens) {
  Tensor visible = sparsity_mask(spec.sparsity(), length, length);
  if (causal) visible = nn::combine_masks(visible, nn::causal_mask(length, length));
  plot::Heatmap panel;
  panel.title = "layout " + train::format_attention(spec) + (causal ? ", causal" : "");
  panel.rows = panel.cols = length;
  panel.values = visible.to_host_f64();
  panel.row_labels = panel.col_labels = tokens;
  panel.x_label = "key";
  panel.y_label = "query";
  return panel;
}

// What `plot attention` was asked for.
struct AttentionPlotOptions {
  std::string load, text, out, html, data;
  int64_t layer = 0, samples = 64, index = -1;  // index -1: the last window
  int threads = 0;
  bool textbook = false;
  bool summary = false;
  std::set<std::string> given;  // the flags typed, checked against the checkpoint once loaded
};

// The options' help lines.
void describe_attention_plot_options(boost::program_options::options_description& options,
                      AttentionPlotOptions& o) {
  namespace po = boost::program_options;
  options.add_options()("help,h", "show this help")
      ("load", po::value(&o.load), "a textcls, charlm or timeseries checkpoint")
      ("text", po::value(&o.text), "textcls, charlm: the text to attend over")
      ("data", po::value(&o.data),
       "timeseries: the CSV whose window is plotted; --summary: the data file to sample")
      ("index", po::value(&o.index),
       "timeseries: which window of --data (window i is data rows i + 1 to i + T, the first "
       "row after the header being row 1; default: the last)")
      ("layer", po::value(&o.layer)->default_value(0),
       "--out: which attention layer (0 = the first); --html: the layer it opens on")
      ("out", po::value(&o.out), "the PNG to write: one heatmap a head of --layer")
      ("html", po::value(&o.html), "the HTML page to write: every layer and head, interactive "
                                   "(head view and model view), self-contained")
      ("summary", "instead of one input's weights: the metrics of `tapegrad analyze heads` over "
                  "--data, one heatmap a metric (layers x heads)")
      ("samples", po::value(&o.samples)->default_value(o.samples),
       "--summary: sequences to average over");
  add_threads_option(options, o.threads);
  add_textbook_option(options, o.textbook);
}

// Parses the command line; nothing (after printing the help) when --help was given.
std::optional<AttentionPlotOptions> parse_options(const Args& args) {
  namespace po = boost::program_options;
  AttentionPlotOptions o;
  po::options_description options(
      "tapegrad plot attention: a checkpoint's attention on one input, as a PNG of one layer or "
      "an interactive HTML page of every layer and head");
  describe_attention_plot_options(options, o);
  const po::variables_map vm = parse_command_line(args, options);
  if (vm.count("help")) {
    std::cout << options << "\nexamples:\n"
                 "  tapegrad plot attention --load cls.safetensors --text \"the cat sat\""
                 " --out attn.png\n"
                 "  tapegrad plot attention --load lm.safetensors --text \"to be or not\""
                 " --html attn.html\n"
                 "  tapegrad plot attention --load sunspots.safetensors --data data/sunspots.csv"
                 " --html attn.html\n"
                 "  tapegrad plot attention --summary --load lm.safetensors --data data/corpus.txt"
                 " --out heads.png\n";
    return std::nullopt;
  }
  o.summary = vm.count("summary") > 0;
  o.given = given_options(vm);
  // --summary measures every layer over --data; without it, one input, every layer.
  train::check_flags_apply(
      o.given, {{{"layer", "text", "index", "html"}, !o.summary, "--summary"},
                {{"samples"}, o.summary, "a plot of one --text (no --summary)"}});
  TG_CHECK(!vm.count("index") || o.index >= 0, "--index must be >= 0, got ", o.index);
  use_threads_option(o.threads);
  return o;
}

// --summary: the head metrics of `analyze heads` over --data, one heatmap a metric.
int plot_head_summary(const AttentionPlotOptions& o) {
  TG_CHECK(!o.load.empty() && !o.data.empty() && !o.out.empty(),
           "--summary needs --load, --data and --out");
  check_distinct_files({{"--load", o.load}, {"--data", o.data}, {"font", plot::font_path()}},
                       {{"--out", o.out}});
  check_output_path(o.out, "--out");
  const train::Checkpoint checkpoint = train::load_checkpoint(o.load);
  const analysis::HeadAnalysis analysis = analysis::analyze_heads(checkpoint, o.data, o.samples);
  const train::TrainConfig& config = checkpoint.config;
  head_summary_png(o.out, analysis,
                         config.task + " heads over " + std::to_string(analysis.sequences) +
                             " sequences (" + config.attention + ", " + config.position + ")");
  std::cout << "wrote " << o.out << "\n";
  return 0;
}

// The flags that apply to the checkpoint's task, then its input: --text for textcls and charlm,
// a window of --data for timeseries.
analysis::AttentionMaps input_maps(const train::Checkpoint& checkpoint,
                                   const AttentionPlotOptions& o) {
  const bool series = checkpoint.config.task == "timeseries";
  train::check_flags_apply(
      o.given, {{{"text"}, !series, "a timeseries checkpoint (it plots one window of --data)"},
                {{"data", "index"}, series, "a plot of one --text (no --summary)"}});
  if (series) {
    TG_CHECK(!o.data.empty(), "a timeseries checkpoint needs --data, the CSV to take a window of");
    return analysis::series_attention_maps(checkpoint, o.data, o.index);
  }
  TG_CHECK(!o.text.empty(), "a ", checkpoint.config.task, " checkpoint needs --text");
  return analysis::text_attention_maps(checkpoint, o.text);
}

// What the implied weights of an attention that forms none are (empty for the others).
std::string implied_note(const nn::AttentionSpec& spec) {
  switch (spec.kind) {
    case nn::AttentionKind::performer:
      return "Performer never forms these weights. Shown is the attention its random features "
             "imply, computed for this plot: A = \u03c6(Q)\u03c6(K)\u1d40 normalised per row "
             "(causal: over the keys up to the query), so that the output is exactly A\u00b7V. "
             "It approximates softmax attention; it is not softmax's weights.";
    case nn::AttentionKind::linformer:
      return "Linformer never forms these weights: its softmax runs over " +
             std::to_string(spec.rank) + " projected keys E\u1d40K. Shown is the S\u00d7S matrix "
             "this implies over the positions, computed for this plot: "
             "A = softmax(Q(E\u1d40K)\u1d40/\u221ad)\u00b7F\u1d40, so that the output is "
             "exactly A\u00b7V. Its entries can be negative and its rows need not sum to 1: a "
             "line's opacity is |A| over the head's largest |A|, and negative weights are dashed.";
    case nn::AttentionKind::reformer:
      return "Reformer never forms these weights. Shown is the matrix its LSH attention applies "
             "to the values for this input (each hash round's chunk softmax, the rounds combined "
             "with their log-sum-exp weights), computed for this plot: the output is exactly "
             "A\u00b7V, and a key that shares no chunk with a query gets 0.";
    default: return "";
  }
}

// The page's notes: what the input is and how to read the weights.
std::vector<std::string> page_notes(const train::Checkpoint& checkpoint,
                                    const analysis::AttentionMaps& maps,
                                    const AttentionPlotOptions& o) {
  const train::TrainConfig& config = checkpoint.config;
  const nn::AttentionSpec spec = config.model_config().attention;
  const std::string heads = std::to_string(maps.layers.front().size(0));
  std::vector<std::string> notes{std::to_string(maps.layers.size()) + " layer" +
                                 (maps.layers.size() == 1 ? "" : "s") + " \u00d7 " + heads +
                                 " heads, " + std::to_string(maps.labels.size()) + " positions."};
  if (config.task == "timeseries") {
    notes.push_back("Window " + std::to_string(maps.window_index) + " of " + o.data +
                    " (data rows " + std::to_string(maps.window_index + 1) + " to " +
                    std::to_string(maps.window_index + config.window) + "): t-0 is its last "
                    "step, the one the forecast is read from.");
  } else if (config.task == "charlm") {
    notes.push_back("Causal: a position attends to itself and the positions before it. A space "
                    "shows as \u2423.");
  }
  if (!spec.has_scores()) notes.push_back(implied_note(spec));
  if (spec.kind != nn::AttentionKind::full && spec.has_scores()) {
    notes.push_back("Sparse layout " + config.attention + ": keys outside it get weight 0.");
  }
  return notes;
}

// The page of every layer's weights.
plot::AttentionPage attention_page(const train::Checkpoint& checkpoint,
                                   const analysis::AttentionMaps& maps,
                                   const AttentionPlotOptions& o) {
  const train::TrainConfig& config = checkpoint.config;
  plot::AttentionPage page;
  page.title = config.task + " attention (" + config.attention + ", " + config.position + ")" +
               (maps.implied ? ", implied weights" : "");
  page.notes = page_notes(checkpoint, maps, o);
  page.query_labels = page.key_labels = maps.labels;
  page.layers = static_cast<int64_t>(maps.layers.size());
  page.heads = maps.layers.front().size(0);
  for (const Tensor& layer : maps.layers) {
    const std::vector<double> values = layer.to_host_f64();
    page.weights.insert(page.weights.end(), values.begin(), values.end());
  }
  page.signed_weights = config.model_config().attention.kind == nn::AttentionKind::linformer;
  page.first_layer = o.layer;
  return page;
}

// One panel a head of weights [heads, S, S], the labels on both axes.
std::vector<plot::Heatmap> head_panels(const Tensor& weights,
                                       const std::vector<std::string>& labels) {
  const int64_t heads = weights.size(0), length = weights.size(1);
  const auto values = weights.to_host_f64();
  std::vector<plot::Heatmap> panels;
  for (int64_t h = 0; h < heads; ++h) {
    plot::Heatmap panel;
    panel.title = "head " + std::to_string(h);
    panel.rows = panel.cols = length;
    const auto first = values.begin() + h * length * length;
    panel.values.assign(first, first + length * length);
    panel.row_labels = panel.col_labels = labels;
    panel.x_label = "key";
    panel.y_label = "query";
    panels.push_back(std::move(panel));
  }
  return panels;
}

// --out: one heatmap a head of --layer, and the layout's panel for a sparse one.
void attention_png(const train::Checkpoint& checkpoint, const analysis::AttentionMaps& maps,
                   const AttentionPlotOptions& o) {
  const train::TrainConfig& config = checkpoint.config;
  const nn::AttentionSpec spec = config.model_config().attention;
  std::vector<plot::Heatmap> panels = head_panels(maps.layers[o.layer], maps.labels);
  if (spec.kind != nn::AttentionKind::full && spec.has_scores()) {
    const auto length = static_cast<int64_t>(maps.labels.size());
    panels.push_back(layout_panel(spec, length, maps.causal, maps.labels));
  }
  // The implied weights say so, in ASCII (the PNG's font).
  const std::string implied = !maps.implied ? ""
                              : spec.kind == nn::AttentionKind::performer
                                  ? ", implied: phi(q) phi(k)^T per row"
                              : spec.kind == nn::AttentionKind::linformer
                                  ? ", implied: softmax over E^T k, times F^T"
                                  : ", implied: the LSH rounds combined";
  plot::heatmap_png(o.out, panels, config.task + " attention (" + config.attention + ", " +
                                       config.position + "), layer " + std::to_string(o.layer) +
                                       implied);
  std::cout << "wrote " << o.out << "\n";
}

}  // namespace

int plot_attention(const Args& args) {
  const std::optional<AttentionPlotOptions> options = parse_options(args);
  if (!options) return 0;
  const AttentionPlotOptions& o = *options;
  const std::unique_ptr<Textbook> textbook_scope = open_textbook(o.textbook);
  if (o.summary) return plot_head_summary(o);
  TG_CHECK(!o.load.empty() && (!o.out.empty() || !o.html.empty()),
           "--load and --out or --html (or both) are required");
  std::vector<NamedPath> inputs{{"--load", o.load}, {"--data", o.data}};
  if (!o.out.empty()) inputs.push_back({"font", plot::font_path()});
  check_distinct_files(inputs, {{"--out", o.out}, {"--html", o.html}});
  if (!o.out.empty()) check_output_path(o.out, "--out");
  if (!o.html.empty()) check_output_path(o.html, "--html");
  const train::Checkpoint checkpoint = train::load_checkpoint(o.load);
  const analysis::AttentionMaps maps = input_maps(checkpoint, o);
  const auto layers = static_cast<int64_t>(maps.layers.size());
  TG_CHECK(o.layer >= 0 && o.layer < layers, "--layer ", o.layer, " is outside the model's ",
           layers, " attention layer", layers == 1 ? "" : "s", " (0 to ", layers - 1, ")");
  if (!o.out.empty()) attention_png(checkpoint, maps, o);
  if (!o.html.empty()) {
    plot::attention_html(o.html, attention_page(checkpoint, maps, o), "--html");
    std::cout << "wrote " << o.html << "\n";
  }
  return 0;
}

}  // namespace tg::cli
