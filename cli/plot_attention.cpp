// `tapegrad plot attention`: the attention weights of one layer of a textcls or charlm checkpoint
// on a text, one heatmap a head, with the text's tokens on both axes. A sparse layout (local,
// band, bigbird) adds a last panel: which keys each query may see at all. Linformer and Performer
// never form [S, S] weights, so there is nothing to draw for them (one clear error). --summary
// draws the head metrics of `analyze heads` over a data file instead (plot/head_summary_chart.h).
#include <boost/program_options.hpp>
#include <iostream>
#include <optional>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/cli/cli.h"
#include "tapegrad/cli/options.h"
#include "tapegrad/io/file_io.h"
#include "tapegrad/nn/masks.h"
#include "tapegrad/ops/ops.h"
#include "tapegrad/plot/head_summary_chart.h"
#include "tapegrad/plot/png.h"
#include "tapegrad/train/attention_flags.h"
#include "tapegrad/train/checkpoint_file.h"
#include "tapegrad/train/datasets.h"
#include "tapegrad/train/flag_scope.h"
#include "tapegrad/train/head_analysis.h"
#include "tapegrad/train/tasks.h"

namespace tg::cli {
namespace {

// The weights [heads, S, S] of layer `layer` (0 = the first attention) on input h [1, S, dim]
// after the embedding and positional encoding. The attention's input is checked finite first:
// huge weights overflow f32 before it, and softmax would turn NaN scores into a row of zeros.
Tensor layer_weights(const std::vector<std::shared_ptr<nn::TransformerEncoderLayer>>& layers,
                     const std::shared_ptr<nn::MultiHeadAttention>& single, Tensor h, int64_t layer,
                     bool causal, const train::Checkpoint& checkpoint) {
  const std::string input_name = "the input of attention layer " + std::to_string(layer);
  if (single) {
    TG_CHECK(layer == 0, "--layer ", layer, ": this model has a single attention layer (0)");
    train::check_finite_results(h.to_host_f64(), input_name, checkpoint);
    return single->forward(h, h, h, Tensor(), true, causal).weights;
  }
  TG_CHECK(layer >= 0 && layer < static_cast<int64_t>(layers.size()), "--layer ", layer,
           " is outside the model's ", layers.size(), " layers");
  for (int64_t i = 0; i < layer; ++i) h = layers[i]->forward(h, Tensor(), causal);
  const Tensor normed = layers[layer]->norm1->forward(h);
  train::check_finite_results(normed.to_host_f64(), input_name, checkpoint);
  return layers[layer]->attn->forward(normed, normed, normed, Tensor(), true, causal).weights;
}

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
  std::string load, text, out, data;
  int64_t layer = 0, samples = 64;
  int threads = 0;
  bool summary = false;
};

// Parses the command line; nothing (after printing the help) when --help was given.
std::optional<AttentionPlotOptions> parse_options(const Args& args) {
  namespace po = boost::program_options;
  AttentionPlotOptions o;
  po::options_description options(
      "tapegrad plot attention: one heatmap a head of a checkpoint's attention on a text");
  options.add_options()("help,h", "show this help")
      ("load", po::value(&o.load), "a textcls or charlm checkpoint")
      ("text", po::value(&o.text), "the text to attend over")
      ("layer", po::value(&o.layer)->default_value(0), "which attention layer (0 = the first)")
      ("out", po::value(&o.out), "the PNG to write")
      ("summary", "instead of one text's weights: the metrics of `tapegrad analyze heads` over "
                  "--data, one heatmap a metric (layers x heads)")
      ("data", po::value(&o.data), "--summary: the data file to sample")
      ("samples", po::value(&o.samples)->default_value(o.samples),
       "--summary: sequences to average over");
  add_threads_option(options, o.threads);
  const po::variables_map vm = parse_command_line(args, options);
  if (vm.count("help")) {
    std::cout << options << "\nexamples:\n"
                 "  tapegrad plot attention --load cls.safetensors --text \"the cat sat\""
                 " --out attn.png\n"
                 "  tapegrad plot attention --summary --load lm.safetensors --data data/corpus.txt"
                 " --out heads.png\n";
    return std::nullopt;
  }
  o.summary = vm.count("summary") > 0;
  // --summary measures every layer over --data; without it, one --layer on one --text.
  train::check_flags_apply(
      given_options(vm), {{{"layer", "text"}, !o.summary, "--summary"},
                          {{"data", "samples"}, o.summary, "a plot of one --text (no --summary)"}});
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
  const train::HeadAnalysis analysis = train::analyze_heads(checkpoint, o.data, o.samples);
  const train::TrainConfig& config = checkpoint.config;
  plot::head_summary_png(o.out, analysis,
                         config.task + " heads over " + std::to_string(analysis.sequences) +
                             " sequences (" + config.attention + ", " + config.position + ")");
  std::cout << "wrote " << o.out << "\n";
  return 0;
}

// The checkpoint's attention, checked to form [S, S] weights to plot: a textcls or charlm model,
// not Linformer or Performer.
nn::AttentionSpec plottable_attention(const train::TrainConfig& config, const std::string& load) {
  TG_CHECK(config.task == "textcls" || config.task == "charlm",
           "plot attention needs a textcls or charlm checkpoint; ", load, " is a ", config.task,
           " model");
  const nn::AttentionSpec spec = config.model_config().attention;
  const char* why = spec.kind == nn::AttentionKind::linformer
                        ? "keys are projected to K rows along the sequence"
                        : "softmax is approximated by random features";
  TG_CHECK(spec.kind != nn::AttentionKind::linformer && spec.kind != nn::AttentionKind::performer,
           load, " was trained with --attention ", config.attention,
           ", which never forms the [S, S] attention weights (", why,
           "): there is nothing to plot");
  return spec;
}

// The tokens of --text as the model reads them (characters for charlm), checked to fit in it.
std::vector<std::string> text_tokens(const std::string& text, const train::TrainConfig& config) {
  const auto tokenizer = config.task == "charlm" ? train::Tokenizer::chars
                                                 : train::parse_tokenizer(config.tokenizer);
  std::vector<std::string> tokens = train::tokenize(text, tokenizer);
  TG_CHECK(!tokens.empty(), "--text has no tokens");
  TG_CHECK(static_cast<int64_t>(tokens.size()) <= config.max_len, "--text has ", tokens.size(),
           " tokens, past the model's max_len ", config.max_len);
  return tokens;
}

// The weights [1, heads, S, S] of attention layer `layer` on the tokens: the checkpoint's model
// rebuilt, in eval mode, run without the tape.
Tensor attention_weights(const train::Checkpoint& checkpoint, const train::Vocabulary& vocab,
                         const std::vector<std::string>& tokens, int64_t layer) {
  const train::TrainConfig& config = checkpoint.config;
  std::vector<int64_t> ids;
  for (const auto& token : tokens) ids.push_back(vocab.id(token));
  const Tensor input = from_indices(ids, {1, static_cast<int64_t>(ids.size())});

  NoGrad no_grad;
  if (config.task == "textcls") {
    const auto labels = train::labels_from_json(checkpoint.data_state.at("labels"));
    nn::TextClassifier model(vocab.size(), static_cast<int64_t>(labels.size()),
                             config.model_config());
    train::load_model(model, checkpoint);
    model.eval();
    return layer_weights(model.layers, model.mha, model.embed(input), layer, false, checkpoint);
  }
  nn::CharLM model(vocab.size(), config.model_config());
  train::load_model(model, checkpoint);
  model.eval();
  return layer_weights(model.layers, nullptr, model.embed(input), layer, true, checkpoint);
}

// One panel a head of weights [1, heads, S, S], the tokens on both axes.
std::vector<plot::Heatmap> head_panels(const Tensor& weights,
                                       const std::vector<std::string>& tokens) {
  const int64_t heads = weights.size(1), length = weights.size(2);
  const auto values = weights.to_host_f64();
  std::vector<plot::Heatmap> panels;
  for (int64_t h = 0; h < heads; ++h) {
    plot::Heatmap panel;
    panel.title = "head " + std::to_string(h);
    panel.rows = panel.cols = length;
    const auto first = values.begin() + h * length * length;
    panel.values.assign(first, first + length * length);
    panel.row_labels = panel.col_labels = tokens;
    panel.x_label = "key";
    panel.y_label = "query";
    panels.push_back(std::move(panel));
  }
  return panels;
}

}  // namespace

int plot_attention(const Args& args) {
  const std::optional<AttentionPlotOptions> options = parse_options(args);
  if (!options) return 0;
  const AttentionPlotOptions& o = *options;
  if (o.summary) return plot_head_summary(o);
  TG_CHECK(!o.load.empty() && !o.text.empty() && !o.out.empty(),
           "--load, --text and --out are required");
  check_distinct_files({{"--load", o.load}, {"font", plot::font_path()}}, {{"--out", o.out}});
  check_output_path(o.out, "--out");
  const train::Checkpoint checkpoint = train::load_checkpoint(o.load);
  const train::TrainConfig& config = checkpoint.config;
  const nn::AttentionSpec spec = plottable_attention(config, o.load);
  const train::Vocabulary vocab = train::vocabulary_from_json(checkpoint.data_state.at("vocab"));
  std::vector<std::string> tokens = text_tokens(o.text, config);
  const Tensor weights = attention_weights(checkpoint, vocab, tokens, o.layer);
  const std::string weights_name = "the attention weights of layer " + std::to_string(o.layer);
  // NaN weights would draw grey panels: refused instead, naming the largest weight.
  train::check_finite_results(weights.to_host_f64(), weights_name, checkpoint);

  for (std::string& token : tokens) if (token == " ") token = "␣";  // a space shown as ␣
  std::vector<plot::Heatmap> panels = head_panels(weights, tokens);
  const bool sparse = spec.kind == nn::AttentionKind::local ||
                      spec.kind == nn::AttentionKind::band ||
                      spec.kind == nn::AttentionKind::bigbird;
  const int64_t length = weights.size(2);
  if (sparse) panels.push_back(layout_panel(spec, length, config.task == "charlm", tokens));
  plot::heatmap_png(o.out, panels, config.task + " attention (" + config.attention + ", " +
                                       config.position + "), layer " + std::to_string(o.layer));
  std::cout << "wrote " << o.out << "\n";
  return 0;
}

}  // namespace tg::cli
