#include "nn/models.h"

#include "autograd/checkpoint.h"
#include "autograd/error.h"
#include "nn/masks.h"
#include "ops/ops.h"

namespace tg::nn {
namespace {

void check_config(const ModelConfig& c, const char* model) {
  TG_CHECK(c.dim > 0 && c.heads > 0 && c.dim % c.heads == 0, model, ": dim ", c.dim,
           " is not divisible by ", c.heads, " heads");
  TG_CHECK(c.layers >= 0, model, ": layers must be >= 0, got ", c.layers);
  TG_CHECK(c.max_len > 0, model, ": max_len must be positive, got ", c.max_len);
}

}  // namespace

Tensor run_layer(const TransformerEncoderLayer& layer, const Tensor& x, const Tensor& mask,
                 bool is_causal, bool checkpointed) {
  if (!checkpointed) return layer.forward(x, mask, is_causal);
  return checkpoint([&layer, mask, is_causal](const std::vector<Tensor>& in) {
    return layer.forward(in[0], mask, is_causal);
  }, {x});
}

TextClassifier::TextClassifier(int64_t vocab, int64_t classes, const ModelConfig& c) {
  check_config(c, "TextClassifier");
  TG_CHECK(vocab > 0 && classes > 0, "TextClassifier: vocab and classes must be positive");
  embedding = register_module("embedding", std::make_shared<Embedding>(vocab, c.dim, c.dtype));
  pos_enc = register_module("pos_enc", std::make_shared<SinusoidalPositionalEncoding>(c.dim, c.max_len, c.dtype));
  if (c.layers == 0) {
    mha = register_module("mha", std::make_shared<MultiHeadAttention>(c.dim, c.heads, c.dropout, c.dtype));
  }
  for (int64_t i = 0; i < c.layers; ++i) {
    layers.push_back(register_module("layers." + std::to_string(i),
        std::make_shared<TransformerEncoderLayer>(c.dim, c.heads, 4 * c.dim, c.dropout, Activation::gelu, c.dtype)));
  }
  classifier = register_module("classifier", std::make_shared<Linear>(c.dim, classes, true, c.dtype));
}

Tensor TextClassifier::forward(const Tensor& tokens, const std::vector<int64_t>& lengths) const {
  TG_CHECK(tokens.dim() == 2 && static_cast<int64_t>(lengths.size()) == tokens.size(0),
           "TextClassifier: tokens ", shape_str(tokens.shape()), " need shape [B, S] and ",
           "one length per sequence (got ", lengths.size(), ")");
  const int64_t batch = tokens.size(0), seq = tokens.size(1);
  const Tensor key_mask = padding_mask(lengths, seq, tokens.device());  // [B, 1, 1, S]
  Tensor h = pos_enc->forward(embedding->forward(tokens));
  if (mha) h = mha->forward(h, key_mask).output;
  for (const auto& layer : layers) h = run_layer(*layer, h, key_mask, false, checkpoint_layers);
  // Mean over the real positions: weights 1/length there, 0 on padding.
  std::vector<double> pool(batch * seq, 0.0);
  for (int64_t b = 0; b < batch; ++b) {
    TG_CHECK(lengths[b] > 0, "TextClassifier: sequence ", b, " is empty");
    for (int64_t s = 0; s < lengths[b]; ++s) pool[b * seq + s] = 1.0 / static_cast<double>(lengths[b]);
  }
  const Tensor pooled = sum(h * from_values(pool, {batch, seq, 1}, h.dtype(), h.device()), {1});  // [B, dim]
  return classifier->forward(pooled);
}

TimeSeriesModel::TimeSeriesModel(int64_t inputs, int64_t horizon, const ModelConfig& c) {
  check_config(c, "TimeSeriesModel");
  TG_CHECK(inputs > 0 && horizon > 0, "TimeSeriesModel: inputs and horizon must be positive");
  TG_CHECK(c.layers >= 1, "TimeSeriesModel: layers must be >= 1, got ", c.layers);
  input_proj = register_module("input_proj", std::make_shared<Linear>(inputs, c.dim, true, c.dtype));
  pos_enc = register_module("pos_enc", std::make_shared<SinusoidalPositionalEncoding>(c.dim, c.max_len, c.dtype));
  if (c.layers == 1) {
    mha = register_module("mha", std::make_shared<MultiHeadAttention>(c.dim, c.heads, c.dropout, c.dtype));
  } else {
    for (int64_t i = 0; i < c.layers; ++i) {
      layers.push_back(register_module("layers." + std::to_string(i),
          std::make_shared<TransformerEncoderLayer>(c.dim, c.heads, 4 * c.dim, c.dropout, Activation::gelu, c.dtype)));
    }
  }
  output = register_module("output", std::make_shared<Linear>(c.dim, horizon, true, c.dtype));
}

Tensor TimeSeriesModel::forward(const Tensor& x) const {
  TG_CHECK(x.dim() == 3 && x.size(2) == input_proj->weight.size(1), "TimeSeriesModel: input ",
           shape_str(x.shape()), " needs shape [B, T, ", input_proj->weight.size(1), "]");
  Tensor h = pos_enc->forward(input_proj->forward(x));
  if (mha) h = mha->forward(h).output;
  for (const auto& layer : layers) h = run_layer(*layer, h, Tensor(), false, checkpoint_layers);
  const Tensor last = h.narrow(1, h.size(1) - 1, 1).squeeze(1);  // [B, H]
  return output->forward(last);
}

CharLM::CharLM(int64_t vocab, const ModelConfig& c) {
  check_config(c, "CharLM");
  TG_CHECK(vocab > 0, "CharLM: vocab must be positive");
  embedding = register_module("embedding", std::make_shared<Embedding>(vocab, c.dim, c.dtype));
  pos_enc = register_module("pos_enc", std::make_shared<SinusoidalPositionalEncoding>(c.dim, c.max_len, c.dtype));
  for (int64_t i = 0; i < c.layers; ++i) {
    layers.push_back(register_module("layers." + std::to_string(i),
        std::make_shared<TransformerEncoderLayer>(c.dim, c.heads, 4 * c.dim, c.dropout, Activation::gelu, c.dtype)));
  }
  norm = register_module("norm", std::make_shared<LayerNorm>(c.dim, 1e-5, c.dtype));
  head = register_module("head", std::make_shared<Linear>(c.dim, vocab, true, c.dtype));
}

Tensor CharLM::forward(const Tensor& tokens) const {
  TG_CHECK(tokens.dim() == 2, "CharLM: tokens ", shape_str(tokens.shape()), " need shape [B, S]");
  Tensor h = pos_enc->forward(embedding->forward(tokens));
  for (const auto& layer : layers) h = run_layer(*layer, h, Tensor(), /*is_causal=*/true, checkpoint_layers);
  return head->forward(norm->forward(h));
}

}  // namespace tg::nn
