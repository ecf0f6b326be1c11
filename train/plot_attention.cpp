// `tapegrad plot attention`: the attention weights of one layer of a textcls or charlm checkpoint
// on a text, one heatmap a head, with the text's tokens on both axes. A sparse layout (local,
// band, bigbird) adds a last panel: which keys each query may see at all. Linformer and Performer
// never form [S, S] weights, so there is nothing to draw for them (one clear error). --summary
// draws the head metrics of `analyze heads` over a data file instead (train/head_summary_chart.h).
#include <boost/program_options.hpp>
#include <iostream>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/nn/file_io.h"
#include "tapegrad/nn/masks.h"
#include "tapegrad/ops/ops.h"
#include "tapegrad/train/attention_flags.h"
#include "tapegrad/train/checkpoint_file.h"
#include "tapegrad/train/cli.h"
#include "tapegrad/train/datasets.h"
#include "tapegrad/train/head_analysis.h"
#include "tapegrad/train/head_summary_chart.h"
#include "tapegrad/train/tasks.h"
#include "tapegrad/train/png.h"

namespace tg::cli {
namespace {

// The weights [heads, S, S] of layer `layer` (0 = the first attention) on input h [1, S, dim]
// after the embedding and positional encoding.
Tensor layer_weights(const std::vector<std::shared_ptr<nn::TransformerEncoderLayer>>& layers,
                     const std::shared_ptr<nn::MultiHeadAttention>& single, Tensor h, int64_t layer,
                     bool causal) {
  if (single) {
    TG_CHECK(layer == 0, "--layer ", layer, ": this model has a single attention layer (0)");
    return single->forward(h, h, h, Tensor(), true, causal).weights;
  }
  TG_CHECK(layer >= 0 && layer < static_cast<int64_t>(layers.size()), "--layer ", layer,
           " is outside the model's ", layers.size(), " layers");
  for (int64_t i = 0; i < layer; ++i) h = layers[i]->forward(h, Tensor(), causal);
  const Tensor normed = layers[layer]->norm1->forward(h);
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

}  // namespace

int plot_attention(const Args& args) {
  namespace po = boost::program_options;
  std::string load, text, out, data;
  int64_t layer = 0, samples = 64;
  po::options_description options("tapegrad plot attention: one heatmap a head of a checkpoint's attention on a text");
  options.add_options()("help,h", "show this help")
      ("load", po::value(&load), "a textcls or charlm checkpoint")
      ("text", po::value(&text), "the text to attend over")
      ("layer", po::value(&layer)->default_value(0), "which attention layer (0 = the first)")
      ("out", po::value(&out), "the PNG to write")
      ("summary", "instead of one text's weights: the metrics of `tapegrad analyze heads` over --data, "
                  "one heatmap a metric (layers x heads)")
      ("data", po::value(&data), "--summary: the data file to sample")
      ("samples", po::value(&samples)->default_value(samples), "--summary: sequences to average over");
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(options).run(), vm);
  po::notify(vm);
  if (vm.count("help")) {
    std::cout << options << "\nexamples:\n  tapegrad plot attention --load cls.safetensors --text \"the cat sat\" --out attn.png\n"
                            "  tapegrad plot attention --summary --load lm.safetensors --data data/corpus.txt --out heads.png\n";
    return 0;
  }
  if (vm.count("summary")) {
    TG_CHECK(!load.empty() && !data.empty() && !out.empty(), "--summary needs --load, --data and --out");
    check_output_path(out, "--out");
    const train::Checkpoint checkpoint = train::load_checkpoint(load);
    const train::HeadAnalysis analysis = train::analyze_heads(checkpoint, data, samples);
    plot::head_summary_png(out, analysis, checkpoint.config.task + " heads over " + std::to_string(analysis.sequences) +
                                              " sequences (" + checkpoint.config.attention + ", " +
                                              checkpoint.config.position + ")");
    std::cout << "wrote " << out << "\n";
    return 0;
  }
  TG_CHECK(!load.empty() && !text.empty() && !out.empty(), "--load, --text and --out are required");
  check_output_path(out, "--out");
  const train::Checkpoint checkpoint = train::load_checkpoint(load);
  const train::TrainConfig& config = checkpoint.config;
  TG_CHECK(config.task == "textcls" || config.task == "charlm", "plot attention needs a textcls or charlm checkpoint; ",
           load, " is a ", config.task, " model");
  const nn::AttentionSpec spec = config.model_config().attention;
  TG_CHECK(spec.kind != nn::AttentionKind::linformer && spec.kind != nn::AttentionKind::performer,
           load, " was trained with --attention ", config.attention, ", which never forms the [S, S] ",
           "attention weights (", spec.kind == nn::AttentionKind::linformer
               ? "keys are projected to K rows along the sequence"
               : "softmax is approximated by random features",
           "): there is nothing to plot");
  const train::Vocabulary vocab = train::vocabulary_from_json(checkpoint.data_state.at("vocab"));
  const auto tokenizer = config.task == "charlm" ? train::Tokenizer::chars : train::parse_tokenizer(config.tokenizer);
  std::vector<std::string> tokens = train::tokenize(text, tokenizer);
  TG_CHECK(!tokens.empty(), "--text has no tokens");
  TG_CHECK(static_cast<int64_t>(tokens.size()) <= config.max_len, "--text has ", tokens.size(),
           " tokens, past the model's max_len ", config.max_len);
  std::vector<int64_t> ids;
  for (const auto& token : tokens) ids.push_back(vocab.id(token));
  const Tensor input = from_indices(ids, {1, static_cast<int64_t>(ids.size())});

  NoGrad no_grad;
  Tensor weights;  // [1, heads, S, S]
  if (config.task == "textcls") {
    const auto labels = train::labels_from_json(checkpoint.data_state.at("labels"));
    nn::TextClassifier model(vocab.size(), static_cast<int64_t>(labels.size()), config.model_config());
    train::load_model(model, checkpoint);
    model.eval();
    weights = layer_weights(model.layers, model.mha, model.embed(input), layer, false);
  } else {
    nn::CharLM model(vocab.size(), config.model_config());
    train::load_model(model, checkpoint);
    model.eval();
    weights = layer_weights(model.layers, nullptr, model.embed(input), layer, true);
  }
  const int64_t heads = weights.size(1), length = weights.size(2);
  const auto values = weights.to_host_f64();
  for (std::string& token : tokens) if (token == " ") token = "␣";
  std::vector<plot::Heatmap> panels;
  for (int64_t h = 0; h < heads; ++h) {
    plot::Heatmap panel;
    panel.title = "head " + std::to_string(h);
    panel.rows = panel.cols = length;
    panel.values.assign(values.begin() + h * length * length, values.begin() + (h + 1) * length * length);
    panel.row_labels = panel.col_labels = tokens;
    panel.x_label = "key";
    panel.y_label = "query";
    panels.push_back(std::move(panel));
  }
  const bool sparse = spec.kind == nn::AttentionKind::local || spec.kind == nn::AttentionKind::band ||
                      spec.kind == nn::AttentionKind::bigbird;
  if (sparse) panels.push_back(layout_panel(spec, length, config.task == "charlm", tokens));
  plot::heatmap_png(out, panels, config.task + " attention (" + config.attention + ", " +
                                     config.position + "), layer " + std::to_string(layer));
  std::cout << "wrote " << out << "\n";
  return 0;
}

}  // namespace tg::cli
