#include "tapegrad/analysis/attention_maps.h"

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/nn/attention_weights.h"
#include "tapegrad/nn/models.h"
#include "tapegrad/train/datasets.h"
#include "tapegrad/train/tasks.h"

namespace tg::analysis {
namespace {

// The weights of one attention on its input h [1, S, dim], checked finite before and after:
// huge weights overflow f32 before it, and softmax turns a row of NaN scores into zeros.
Tensor finite_layer_weights(const nn::MultiHeadAttention& attention, const Tensor& h, bool causal,
                            size_t layer, const train::Checkpoint& checkpoint, bool& implied) {
  train::check_finite_results(h.to_host_f64(),
                              "the input of attention layer " + std::to_string(layer), checkpoint);
  const nn::SelfAttentionWeights result =
      nn::self_attention_weights(attention, h, Tensor(), causal);
  train::check_finite_results(result.weights.to_host_f64(),
                              "the attention weights of layer " + std::to_string(layer), checkpoint);
  implied = result.implied;
  return result.weights.squeeze(0);  // [heads, S, S]
}

// Every attention's weights of a model on h [1, S, dim] (what its first attention reads): the
// lone MHA of the tutorial-form models, or each pre-norm encoder layer's attention on norm1.
AttentionMaps model_maps(const std::vector<std::shared_ptr<nn::TransformerEncoderLayer>>& layers,
                         const std::shared_ptr<nn::MultiHeadAttention>& single, Tensor h,
                         bool causal, const train::Checkpoint& checkpoint) {
  AttentionMaps maps;
  maps.causal = causal;
  if (single) {
    maps.layers.push_back(finite_layer_weights(*single, h, causal, 0, checkpoint, maps.implied));
  }
  for (const auto& layer : layers) {
    const Tensor normed = layer->norm1->forward(h);
    maps.layers.push_back(finite_layer_weights(*layer->attn, normed, causal, maps.layers.size(),
                                               checkpoint, maps.implied));
    h = layer->forward(h, Tensor(), causal);
  }
  TG_CHECK(!maps.layers.empty(), "the model has no attention layers (--layers 0)");
  return maps;
}

// The tokens of `text` as the model reads them (characters for charlm), checked to fit in it:
// a textcls model trained with --truncate reads the first max_len.
std::vector<std::string> text_tokens(const std::string& text, const train::TrainConfig& config) {
  const auto tokenizer = config.task == "charlm" ? train::Tokenizer::chars
                                                 : train::parse_tokenizer(config.tokenizer);
  std::vector<std::string> tokens = train::tokenize(text, tokenizer);
  TG_CHECK(!tokens.empty(), "--text has no tokens");
  if (config.task == "textcls" && config.truncate && static_cast<int64_t>(tokens.size()) > config.max_len) {
    tokens.resize(config.max_len);
  }
  TG_CHECK(static_cast<int64_t>(tokens.size()) <= config.max_len, "--text has ", tokens.size(),
           " tokens, past the model's max_len ", config.max_len);
  return tokens;
}

// The input windows [N, T, D] of the CSV, read as the checkpoint's model was trained on it.
Tensor series_windows(const train::Checkpoint& checkpoint, const train::DataState& state,
                      const std::string& path, int64_t& inputs) {
  const train::TrainConfig& config = checkpoint.config;
  const train::TimeSeriesSpec spec = train::timeseries_spec(config, 0.0);  // every window
  const train::TimeSeriesData data = train::load_timeseries(path, spec, &state.norm);
  TG_CHECK(data.columns == state.columns, "load_timeseries: '", path,
           "' does not have the columns the model was trained on, in the same order");
  inputs = static_cast<int64_t>(data.input_columns.size());
  return data.train_x;
}

}  // namespace

AttentionMaps text_attention_maps(const train::Checkpoint& checkpoint, const std::string& text) {
  const train::TrainConfig& config = checkpoint.config;
  TG_CHECK(config.task == "textcls" || config.task == "charlm",
           "a plot of one --text needs a textcls or charlm checkpoint, not a ", config.task,
           " one");
  const train::DataState state = train::data_state_from_json(config, checkpoint.data_state);
  const std::vector<std::string> tokens = text_tokens(text, config);
  std::vector<int64_t> ids;
  for (const auto& token : tokens) ids.push_back(state.vocab.id(token));
  const Tensor input = from_indices(ids, {1, static_cast<int64_t>(ids.size())});

  NoGrad no_grad;
  AttentionMaps maps;
  if (config.task == "textcls") {
    nn::TextClassifier model(state.vocab.size(), static_cast<int64_t>(state.labels.size()),
                             config.model_config());
    train::load_model(model, checkpoint);
    model.eval();
    maps = model_maps(model.layers, model.mha, model.embed(input), false, checkpoint);
  } else {
    nn::CharLM model(state.vocab.size(), config.model_config());
    train::load_model(model, checkpoint);
    model.eval();
    maps = model_maps(model.layers, nullptr, model.embed(input), true, checkpoint);
  }
  for (const std::string& token : tokens) maps.labels.push_back(visible_token(token));
  return maps;
}

AttentionMaps series_attention_maps(const train::Checkpoint& checkpoint,
                                    const std::string& csv_path, int64_t index) {
  const train::TrainConfig& config = checkpoint.config;
  TG_CHECK(config.task == "timeseries", "a plot of one window of --data needs a timeseries "
           "checkpoint, not a ", config.task, " one");
  const train::DataState state = train::data_state_from_json(config, checkpoint.data_state);
  int64_t inputs = 0;
  const Tensor windows = series_windows(checkpoint, state, csv_path, inputs);
  const int64_t count = windows.size(0);
  if (index < 0) index = count - 1;
  TG_CHECK(index < count, "--index ", index, " is past the ", count, " windows of ", csv_path,
           " (0 to ", count - 1, ")");

  NoGrad no_grad;
  nn::TimeSeriesModel model(inputs, config.horizon, config.model_config());
  train::load_model(model, checkpoint);
  model.eval();
  const Tensor window = windows.narrow(0, index, 1);  // [1, T, D]
  const Tensor h = model.pos_enc ? model.pos_enc->forward(model.input_proj->forward(window))
                                 : model.input_proj->forward(window);
  AttentionMaps maps = model_maps(model.layers, model.mha, h, false, checkpoint);
  maps.window_index = index;
  for (int64_t t = config.window - 1; t >= 0; --t) maps.labels.push_back("t-" + std::to_string(t));
  return maps;
}

std::string visible_token(const std::string& token) {
  if (token == " ") return "\u2423";
  if (token.size() != 1) return token;
  const auto byte = static_cast<unsigned char>(token[0]);
  if (byte == 0x7f) return "\u2421";
  if (byte >= 0x20) return token;
  const int picture = 0x2400 + byte;  // U+2400 ... U+241F, three bytes in UTF-8
  return {static_cast<char>(0xe0 | (picture >> 12)),
          static_cast<char>(0x80 | ((picture >> 6) & 0x3f)),
          static_cast<char>(0x80 | (picture & 0x3f))};
}

}  // namespace tg::analysis
