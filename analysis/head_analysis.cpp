#include "tapegrad/analysis/head_analysis.h"

#include <algorithm>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/nn/masks.h"
#include "tapegrad/nn/models.h"
#include "tapegrad/train/datasets.h"
#include "tapegrad/train/tasks.h"

namespace tg::analysis {
namespace {

constexpr int64_t kBatch = 32;

// `count` indices evenly spaced over [0, total).
std::vector<int64_t> evenly_spaced(int64_t total, int64_t count) {
  std::vector<int64_t> ids;
  count = std::min(count, total);
  for (int64_t k = 0; k < count; ++k) ids.push_back(k * total / count);
  return ids;
}

// What attention layer `layer` reads, checked finite: huge but finite weights overflow f32 before
// it (a LayerNorm's sum), and softmax turns a row of NaN scores into zeros, not NaN.
Tensor finite_attention_input(const Tensor& input, size_t layer,
                              const train::Checkpoint& checkpoint) {
  train::check_finite_results(input.to_host_f64(),
                              "the input of attention layer " + std::to_string(layer), checkpoint);
  return input;
}

// The attention weights [B, heads, S, S] of every layer of a model, on h [B, S, dim] as the first
// attention reads it, with the model's mask. Encoder layers are pre-norm: each attention reads
// norm1 of the layer's input.
std::vector<Tensor> all_layer_weights(const std::vector<std::shared_ptr<nn::TransformerEncoderLayer>>& layers,
                                      const std::shared_ptr<nn::MultiHeadAttention>& single, Tensor h,
                                      const Tensor& mask, bool causal,
                                      const train::Checkpoint& checkpoint) {
  if (single) {
    finite_attention_input(h, 0, checkpoint);
    return {single->forward(h, h, h, mask, /*need_weights=*/true, causal,
                            /*average_attn_weights=*/false).weights};
  }
  std::vector<Tensor> weights;
  for (const auto& layer : layers) {
    const Tensor normed =
        finite_attention_input(layer->norm1->forward(h), weights.size(), checkpoint);
    weights.push_back(layer->attn->forward(normed, normed, normed, mask, /*need_weights=*/true, causal,
                                           /*average_attn_weights=*/false).weights);
    h = layer->forward(h, mask, causal);
  }
  return weights;
}

// Adds batch b's weights of every layer to the per-layer, per-head totals.
void accumulate(std::vector<std::vector<HeadMetricTotals>>& totals, const std::vector<Tensor>& weights,
                const std::vector<int64_t>& lengths, bool causal) {
  if (totals.empty()) totals.resize(weights.size());
  for (size_t l = 0; l < weights.size(); ++l) {
    for (size_t b = 0; b < lengths.size(); ++b) {
      const Tensor one = weights[l].narrow(0, static_cast<int64_t>(b), 1).squeeze(0);  // [heads, S, S]
      const auto per_head = head_metric_totals(one, lengths[b], causal);
      if (totals[l].empty()) totals[l].resize(per_head.size());
      for (size_t h = 0; h < per_head.size(); ++h) totals[l][h] += per_head[h];
    }
  }
}

// The weights of every layer finite, or check_finite_result's error naming the layer: huge but
// finite weights overflow f32 and leave NaN attention, whose metrics would read as zeros.
const std::vector<Tensor>& finite_attention_weights(const std::vector<Tensor>& weights,
                                                    const train::Checkpoint& checkpoint) {
  for (size_t l = 0; l < weights.size(); ++l) {
    train::check_finite_results(weights[l].to_host_f64(),
                                "the attention weights of layer " + std::to_string(l), checkpoint);
  }
  return weights;
}

}  // namespace

HeadAnalysis analyze_heads(const train::Checkpoint& checkpoint, const std::string& data_path,
                           int64_t samples, int64_t layer) {
  const train::TrainConfig& config = checkpoint.config;
  TG_CHECK(config.task == "textcls" || config.task == "charlm",
           "head analysis needs a textcls or charlm checkpoint, not a ", config.task, " one");
  TG_CHECK(samples >= 1, "--samples must be >= 1, got ", samples);
  const nn::AttentionSpec spec = config.model_config().attention;
  TG_CHECK(spec.kind != nn::AttentionKind::linformer && spec.kind != nn::AttentionKind::performer &&
               spec.kind != nn::AttentionKind::reformer,
           "the checkpoint was trained with --attention ", config.attention,
           ", which never forms the [S, S] attention weights: there are no heads to measure");
  const train::DataState state = train::data_state_from_json(config, checkpoint.data_state);
  NoGrad no_grad;
  HeadAnalysis analysis;
  std::vector<std::vector<HeadMetricTotals>> totals;  // [layer][head]
  if (config.task == "textcls") {
    const train::TextClsData data =
        train::load_textcls(data_path, train::parse_tokenizer(config.tokenizer), config.max_len, 0.0,
                            &state.vocab, &state.labels,
                            config.truncate ? train::LongLines::truncate : train::LongLines::error);
    nn::TextClassifier model(state.vocab.size(), static_cast<int64_t>(state.labels.size()),
                             config.model_config());
    train::load_model(model, checkpoint);
    model.eval();
    const std::vector<int64_t> ids = evenly_spaced(static_cast<int64_t>(data.train.size()), samples);
    for (size_t start = 0; start < ids.size(); start += kBatch) {
      const std::vector<int64_t> batch_ids(ids.begin() + start,
                                           ids.begin() + std::min(ids.size(), start + kBatch));
      const train::TextBatch batch = train::make_text_batch(data.train, batch_ids);
      const Tensor mask = nn::padding_mask(batch.lengths, batch.tokens.size(1));  // true = a real key
      const std::vector<Tensor> weights = all_layer_weights(
          model.layers, model.mha, model.embed(batch.tokens), mask, false, checkpoint);
      accumulate(totals, finite_attention_weights(weights, checkpoint), batch.lengths, false);
    }
    analysis.sequences = static_cast<int64_t>(ids.size());
  } else {
    analysis.causal = true;
    const train::CharLMData data = train::load_charlm(data_path, 0.0, &state.vocab);
    const int64_t windows = train::charlm_examples(data.train, config.context);
    TG_CHECK(windows > 0, data_path, " is shorter than one window of ", config.context + 1, " characters");
    nn::CharLM model(state.vocab.size(), config.model_config());
    train::load_model(model, checkpoint);
    model.eval();
    const std::vector<int64_t> ids = evenly_spaced(windows, samples);
    for (size_t start = 0; start < ids.size(); start += kBatch) {
      const std::vector<int64_t> batch_ids(ids.begin() + start,
                                           ids.begin() + std::min(ids.size(), start + kBatch));
      const Tensor inputs = train::make_charlm_batch(data.train, config.context, batch_ids).first;
      const std::vector<int64_t> lengths(batch_ids.size(), config.context);
      const std::vector<Tensor> weights =
          all_layer_weights(model.layers, nullptr, model.embed(inputs), Tensor(), true, checkpoint);
      accumulate(totals, finite_attention_weights(weights, checkpoint), lengths, true);
    }
    analysis.sequences = static_cast<int64_t>(ids.size());
  }
  TG_CHECK(!totals.empty(), "the model has no attention layers (--layers 0)");
  TG_CHECK(layer >= -1 && layer < static_cast<int64_t>(totals.size()), "--layer ", layer,
           " is outside the model's ", totals.size(), " attention layer", totals.size() == 1 ? "" : "s",
           " (0 to ", totals.size() - 1, ")");
  for (size_t l = 0; l < totals.size(); ++l) {
    if (layer >= 0 && static_cast<int64_t>(l) != layer) continue;
    LayerHeadMetrics row;
    row.layer = static_cast<int64_t>(l);
    for (const HeadMetricTotals& head : totals[l]) row.heads.push_back(head.mean());
    analysis.layers.push_back(std::move(row));
  }
  analysis.queries = totals.empty() || totals[0].empty() ? 0 : totals[0][0].queries;
  return analysis;
}

}  // namespace tg::analysis
