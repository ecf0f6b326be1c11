#include "tapegrad/nn/models.h"

#include "tapegrad/autograd/checkpoint.h"
#include "tapegrad/autograd/error.h"
#include "tapegrad/nn/masks.h"
#include "tapegrad/ops/ops.h"

namespace tg::nn {
namespace {

// T5's and Shaw's numbers, and attention with scores for them to act on (as MultiHeadAttention).
void check_relative_positions(const AttentionSpec& a, const char* model) {
  const bool t5 = a.position == PositionKind::t5, shaw = a.position == PositionKind::shaw;
  if (!t5 && !shaw) return;
  TG_CHECK(a.has_scores(), model, ": ", t5 ? "t5" : "shaw", " positions need attention with "
           "[Sq, Sk] scores (full, local, band or bigbird)");
  TG_CHECK(!t5 || (a.relative.buckets >= 4 && a.relative.max_distance >= a.relative.buckets), model,
           ": T5 needs buckets >= 4 and max_distance >= buckets, got ", a.relative.buckets, ", ",
           a.relative.max_distance);
  TG_CHECK(!shaw || (a.relative.clip >= 1 && a.relative.clip <= (int64_t{1} << 30)), model,
           ": Shaw's clipping distance must be in [1, 2^30], got ", a.relative.clip);
}

void check_config(const ModelConfig& c, const char* model) {
  TG_CHECK(c.dim > 0 && c.heads > 0 && c.dim % c.heads == 0, model, ": dim ", c.dim,
           " is not divisible by ", c.heads, " heads");
  TG_CHECK(c.layers >= 0, model, ": layers must be >= 0, got ", c.layers);
  TG_CHECK(c.max_len > 0, model, ": max_len must be positive, got ", c.max_len);
  const AttentionSpec& a = c.attention;
  TG_CHECK(a.kind != AttentionKind::linformer || a.rank > 0, model,
           ": Linformer needs a positive rank, got ", a.rank);
  TG_CHECK(a.kind != AttentionKind::performer || a.features > 0, model,
           ": Performer needs a positive number of features, got ", a.features);
  check_relative_positions(a, model);
  TG_CHECK(a.kind != AttentionKind::reformer ||
               (a.buckets >= 2 && a.buckets % 2 == 0 && a.rounds >= 1),
           model, ": Reformer needs an even number of buckets >= 2 and rounds >= 1, got ",
           a.buckets, " buckets, ", a.rounds, " rounds");
}

// The constructors' checks, shared with state_shapes() so that both reject the same configs.
void check_text_classifier(int64_t vocab, int64_t classes, const ModelConfig& c) {
  check_config(c, "TextClassifier");
  TG_CHECK(vocab > 0 && classes > 0, "TextClassifier: vocab and classes must be positive");
}

void check_time_series_model(int64_t inputs, int64_t horizon, const ModelConfig& c) {
  check_config(c, "TimeSeriesModel");
  TG_CHECK(inputs > 0 && horizon > 0, "TimeSeriesModel: inputs and horizon must be positive");
  TG_CHECK(c.layers >= 1, "TimeSeriesModel: layers must be >= 1, got ", c.layers);
}

void check_char_lm(int64_t vocab, const ModelConfig& c) {
  check_config(c, "CharLM");
  TG_CHECK(vocab > 0, "CharLM: vocab must be positive");
}

// The hidden size of an encoder layer's MLP: 4 * dim, as in "Attention Is All You Need".
int64_t mlp_hidden(const ModelConfig& c) { return checked_mul(4, c.dim, "MLP hidden size (4 * dim)"); }

// The spec every attention of the model gets: the config's, reading max_len from the config when
// the spec leaves it 0.
AttentionSpec attention_spec(const ModelConfig& c) {
  AttentionSpec spec = c.attention;
  if (spec.max_len == 0) spec.max_len = c.max_len;
  return spec;
}

std::shared_ptr<MultiHeadAttention> make_attention(const ModelConfig& c) {
  return std::make_shared<MultiHeadAttention>(c.dim, c.heads, c.dropout, c.dtype, attention_spec(c));
}

std::shared_ptr<TransformerEncoderLayer> make_encoder_layer(const ModelConfig& c) {
  return std::make_shared<TransformerEncoderLayer>(c.dim, c.heads, mlp_hidden(c), c.dropout,
                                                   Activation::gelu, c.dtype, attention_spec(c));
}

// The sinusoidal table, only when the config asks for it (the other kinds act inside attention).
// `tutorial_form`: the model is the tutorial's, whose table is in its state_dict (persistent).
std::shared_ptr<SinusoidalPositionalEncoding> make_positional_encoding(const ModelConfig& c,
                                                                       bool tutorial_form) {
  if (c.attention.position != PositionKind::sinusoidal) return nullptr;
  return std::make_shared<SinusoidalPositionalEncoding>(c.dim, c.max_len, c.dtype, tutorial_form);
}

// The tutorial's buffer "pos_encoding.pe" [1, max_len, dim], in the state_dict of the
// tutorial-form models that add the sinusoidal table.
void add_tutorial_positions(ModelStateShapes& out, const ModelConfig& c, bool tutorial_form) {
  if (!tutorial_form || c.attention.position != PositionKind::sinusoidal) return;
  out.buffers.emplace_back("pos_encoding.pe", Shape{1, c.max_len, c.dim});
}

Tensor add_positions(const std::shared_ptr<SinusoidalPositionalEncoding>& pos_enc, const Tensor& x) {
  return pos_enc ? pos_enc->forward(x) : x;
}

// The state_dict entries each layer adds under `prefix` (e.g. "layers.0."), in registration
// order. Mirrors the constructors in nn/layers.cpp, nn/attention.cpp and nn/transformer.cpp; the
// tests compare the result with state_dict() of built models. Positional encodings add their
// table only in the tutorial-form models (add_tutorial_positions): elsewhere it is not persistent.
void add_linear(ModelStateShapes& out, const std::string& prefix, int64_t in, int64_t out_features) {
  out.parameters.emplace_back(prefix + "weight", Shape{out_features, in});
  out.parameters.emplace_back(prefix + "bias", Shape{out_features});
  out.linears.push_back(prefix);
}

void add_embedding(StateShapes& out, const std::string& prefix, int64_t rows, int64_t dim) {
  out.emplace_back(prefix + "weight", Shape{rows, dim});
}

void add_layer_norm(StateShapes& out, const std::string& prefix, int64_t dim) {
  out.emplace_back(prefix + "weight", Shape{dim});
  out.emplace_back(prefix + "bias", Shape{dim});
}

// The learned relative positions' tables, after the projections (MultiHeadAttention registers
// them last): T5's relative_attention_bias.weight, Shaw's relative_key.weight.
void add_relative_positions(ModelStateShapes& out, const std::string& prefix,
                            const ModelConfig& c) {
  const RelativePositions& r = c.attention.relative;
  if (c.attention.position == PositionKind::t5) {
    out.parameters.emplace_back(prefix + "relative_attention_bias.weight",
                                Shape{r.buckets, c.heads});
  } else if (c.attention.position == PositionKind::shaw) {
    out.parameters.emplace_back(prefix + "relative_key.weight",
                                Shape{2 * r.clip + 1, c.dim / c.heads});
  }
}

// MultiHeadAttention: its own parameters first (Linformer's E and F), then its four projections
// (a reformer has no k_proj), as Module lists them; Performer's feature matrix and Reformer's
// rotations are persistent buffers.
void add_attention(ModelStateShapes& out, const std::string& prefix, const ModelConfig& c) {
  const AttentionSpec spec = attention_spec(c);
  if (spec.kind == AttentionKind::linformer) {
    out.parameters.emplace_back(prefix + "proj_k", Shape{spec.max_len, spec.rank});
    out.parameters.emplace_back(prefix + "proj_v", Shape{spec.max_len, spec.rank});
  }
  for (const char* projection : {"q_proj.", "k_proj.", "v_proj.", "o_proj."}) {
    const bool shared_qk = spec.kind == AttentionKind::reformer;  // keys are the queries
    if (shared_qk && std::string(projection) == "k_proj.") continue;
    add_linear(out, prefix + projection, c.dim, c.dim);
  }
  add_relative_positions(out, prefix, c);
  if (spec.kind == AttentionKind::performer) {
    out.buffers.emplace_back(prefix + "projection_matrix", Shape{spec.features, c.dim / c.heads});
  }
  if (spec.kind == AttentionKind::reformer) {
    out.buffers.emplace_back(prefix + "random_rotations",
                             Shape{spec.rounds, c.dim / c.heads, spec.buckets / 2});
  }
}

void add_encoder_layer(ModelStateShapes& out, const std::string& prefix, const ModelConfig& c) {
  add_layer_norm(out.parameters, prefix + "norm1.", c.dim);
  add_attention(out, prefix + "attn.", c);
  add_layer_norm(out.parameters, prefix + "norm2.", c.dim);
  add_linear(out, prefix + "mlp.linear1.", c.dim, mlp_hidden(c));
  add_linear(out, prefix + "mlp.linear2.", mlp_hidden(c), c.dim);
}

std::string layer_prefix(int64_t i) { return "layers." + std::to_string(i) + "."; }

}  // namespace

StateShapes ModelStateShapes::state_dict() const {
  StateShapes all = parameters;
  all.insert(all.end(), buffers.begin(), buffers.end());
  return all;
}

Tensor run_layer(const TransformerEncoderLayer& layer, const Tensor& x, const Tensor& mask,
                 bool is_causal, bool checkpointed) {
  if (!checkpointed) return layer.forward(x, mask, is_causal);
  return checkpoint([&layer, mask, is_causal](const std::vector<Tensor>& in) {
    return layer.forward(in[0], mask, is_causal);
  }, {x});
}

Tensor run_attention(const MultiHeadAttention& mha, const Tensor& x, const Tensor& mask, bool is_causal,
                     bool checkpointed) {
  if (!checkpointed) return mha.forward(x, mask, is_causal).output;
  return checkpoint([&mha, mask, is_causal](const std::vector<Tensor>& in) {
    return mha.forward(in[0], mask, is_causal).output;
  }, {x});
}

TextClassifier::TextClassifier(int64_t vocab, int64_t classes, const ModelConfig& c) {
  check_text_classifier(vocab, classes, c);
  embedding = register_module("embedding", std::make_shared<Embedding>(vocab, c.dim, c.dtype));
  if (auto table = make_positional_encoding(c, c.layers == 0)) {
    pos_enc = register_module("pos_encoding", table);
  }
  if (c.layers == 0) mha = register_module("mha", make_attention(c));
  for (int64_t i = 0; i < c.layers; ++i) {
    layers.push_back(register_module("layers." + std::to_string(i), make_encoder_layer(c)));
  }
  fc = register_module("fc", std::make_shared<Linear>(c.dim, classes, true, c.dtype));
}

ModelStateShapes TextClassifier::state_shapes(int64_t vocab, int64_t classes, const ModelConfig& c) {
  check_text_classifier(vocab, classes, c);
  ModelStateShapes out;
  add_embedding(out.parameters, "embedding.", vocab, c.dim);
  add_tutorial_positions(out, c, c.layers == 0);
  if (c.layers == 0) add_attention(out, "mha.", c);
  for (int64_t i = 0; i < c.layers; ++i) add_encoder_layer(out, layer_prefix(i), c);
  add_linear(out, "fc.", c.dim, classes);
  return out;
}

Tensor TextClassifier::embed(const Tensor& tokens) const {
  return add_positions(pos_enc, embedding->forward(tokens));
}

Tensor TextClassifier::forward(const Tensor& tokens, const std::vector<int64_t>& lengths) const {
  TG_CHECK(tokens.dim() == 2 && static_cast<int64_t>(lengths.size()) == tokens.size(0),
           "TextClassifier: tokens ", shape_str(tokens.shape()), " need shape [B, S] and ",
           "one length per sequence (got ", lengths.size(), ")");
  const int64_t batch = tokens.size(0), seq = tokens.size(1);
  const Tensor key_mask = padding_mask(lengths, seq, tokens.device());  // [B, 1, 1, S]
  Tensor h = embed(tokens);
  if (mha) h = run_attention(*mha, h, key_mask, false, checkpoint_layers);
  for (const auto& layer : layers) h = run_layer(*layer, h, key_mask, false, checkpoint_layers);
  // Mean over the real positions: weights 1/length there, 0 on padding.
  std::vector<double> pool(batch * seq, 0.0);
  for (int64_t b = 0; b < batch; ++b) {
    TG_CHECK(lengths[b] > 0, "TextClassifier: sequence ", b, " is empty");
    for (int64_t s = 0; s < lengths[b]; ++s) pool[b * seq + s] = 1.0 / static_cast<double>(lengths[b]);
  }
  const Tensor pooled = sum(h * from_values(pool, {batch, seq, 1}, h.dtype(), h.device()), {1});  // [B, dim]
  return fc->forward(pooled);
}

TimeSeriesModel::TimeSeriesModel(int64_t inputs, int64_t horizon, const ModelConfig& c) {
  check_time_series_model(inputs, horizon, c);
  input_proj = register_module("input_proj", std::make_shared<Linear>(inputs, c.dim, true, c.dtype));
  if (auto table = make_positional_encoding(c, c.layers == 1)) {
    pos_enc = register_module("pos_encoding", table);
  }
  if (c.layers == 1) {
    mha = register_module("mha", make_attention(c));
  } else {
    for (int64_t i = 0; i < c.layers; ++i) {
      layers.push_back(register_module("layers." + std::to_string(i), make_encoder_layer(c)));
    }
  }
  output = register_module("output", std::make_shared<Linear>(c.dim, horizon, true, c.dtype));
}

ModelStateShapes TimeSeriesModel::state_shapes(int64_t inputs, int64_t horizon, const ModelConfig& c) {
  check_time_series_model(inputs, horizon, c);
  ModelStateShapes out;
  add_linear(out, "input_proj.", inputs, c.dim);
  add_tutorial_positions(out, c, c.layers == 1);
  if (c.layers == 1) {
    add_attention(out, "mha.", c);
  } else {
    for (int64_t i = 0; i < c.layers; ++i) add_encoder_layer(out, layer_prefix(i), c);
  }
  add_linear(out, "output.", c.dim, horizon);
  return out;
}

Tensor TimeSeriesModel::forward(const Tensor& x) const {
  TG_CHECK(x.dim() == 3 && x.size(2) == input_proj->weight.size(1), "TimeSeriesModel: input ",
           shape_str(x.shape()), " needs shape [B, T, ", input_proj->weight.size(1), "]");
  Tensor h = add_positions(pos_enc, input_proj->forward(x));
  if (mha) h = run_attention(*mha, h, Tensor(), false, checkpoint_layers);
  for (const auto& layer : layers) h = run_layer(*layer, h, Tensor(), false, checkpoint_layers);
  const Tensor last = h.narrow(1, h.size(1) - 1, 1).squeeze(1);  // [B, H]
  return output->forward(last);
}

CharLM::CharLM(int64_t vocab, const ModelConfig& c) : max_len(c.max_len), attention(c.attention) {
  check_char_lm(vocab, c);
  embedding = register_module("embedding", std::make_shared<Embedding>(vocab, c.dim, c.dtype));
  if (auto table = make_positional_encoding(c, false)) {
    pos_enc = register_module("pos_encoding", table);
  }
  for (int64_t i = 0; i < c.layers; ++i) {
    layers.push_back(register_module("layers." + std::to_string(i), make_encoder_layer(c)));
  }
  norm = register_module("norm", std::make_shared<LayerNorm>(c.dim, 1e-5, c.dtype));
  head = register_module("head", std::make_shared<Linear>(c.dim, vocab, true, c.dtype));
}

ModelStateShapes CharLM::state_shapes(int64_t vocab, const ModelConfig& c) {
  check_char_lm(vocab, c);
  ModelStateShapes out;
  add_embedding(out.parameters, "embedding.", vocab, c.dim);
  for (int64_t i = 0; i < c.layers; ++i) add_encoder_layer(out, layer_prefix(i), c);
  add_layer_norm(out.parameters, "norm.", c.dim);
  add_linear(out, "head.", c.dim, vocab);
  return out;
}

Tensor CharLM::embed(const Tensor& tokens, int64_t offset) const {
  const Tensor embedded = embedding->forward(tokens);
  return pos_enc ? pos_enc->forward(embedded, offset) : embedded;
}

KVCache CharLM::make_cache(int64_t batch, int64_t capacity) const {
  TG_CHECK(!layers.empty(), "CharLM: a model without layers has no keys or values to cache");
  TG_CHECK(capacity >= 1 && capacity <= max_len, "CharLM: a cache of ", capacity,
           " positions; the model takes 1 to max_len ", max_len);
  const MultiHeadAttention& attn = *layers.front()->attn;
  KVCache cache(static_cast<int64_t>(layers.size()), batch, capacity, attn.heads, attn.head_dim,
                embedding->weight.dtype(), embedding->weight.device());
  cache.check_weights(state_dict(), "CharLM::make_cache");  // tied to this model
  return cache;
}

Tensor CharLM::forward_cached(const Tensor& tokens, KVCache& cache) const {
  TG_CHECK(tokens.dim() == 2 && cache.layers.size() == layers.size() &&
               tokens.size(0) == cache.batch(),
           "CharLM::forward_cached: tokens ", shape_str(tokens.shape()), " need shape [",
           cache.batch(), ", n], and a cache of ", layers.size(), " layers (it has ",
           cache.layers.size(), ")");
  const MultiHeadAttention& attn = *layers.front()->attn;
  const Tensor& cached_keys = cache.layers.front().keys;
  TG_CHECK(cached_keys.size(2) == attn.heads && cached_keys.size(3) == attn.head_dim &&
               cached_keys.dtype() == embedding->weight.dtype() &&
               cached_keys.device() == embedding->weight.device(),
           "CharLM::forward_cached: a cache of ", shape_str(cached_keys.shape()), " ",
           dtype_name(cached_keys.dtype()), " on ", device_name(cached_keys.device()),
           " for a model of ", attn.heads, " heads of ", attn.head_dim, ", ",
           dtype_name(embedding->weight.dtype()), " on ", device_name(embedding->weight.device()));
  cache.check_weights(state_dict(), "CharLM::forward_cached");
  // Strongly exception-safe: a layer that throws leaves every layer as it was (none half-filled).
  std::vector<int64_t> lengths_before;
  for (const KVCache::Layer& layer : cache.layers) lengths_before.push_back(layer.length);
  try {
    Tensor h = embed(tokens, cache.length());
    for (size_t i = 0; i < layers.size(); ++i) h = layers[i]->forward_cached(h, cache.layers[i]);
    return head->forward(norm->forward(h));
  } catch (...) {
    for (size_t i = 0; i < cache.layers.size(); ++i) cache.layers[i].length = lengths_before[i];
    throw;
  }
}

Tensor CharLM::forward(const Tensor& tokens) const {
  TG_CHECK(tokens.dim() == 2, "CharLM: tokens ", shape_str(tokens.shape()), " need shape [B, S]");
  Tensor h = embed(tokens);
  for (const auto& layer : layers) h = run_layer(*layer, h, Tensor(), /*is_causal=*/true, checkpoint_layers);
  return head->forward(norm->forward(h));
}

}  // namespace tg::nn
