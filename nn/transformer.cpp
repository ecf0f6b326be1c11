#include "tapegrad/nn/transformer.h"

#include "tapegrad/ops/ops.h"

namespace tg::nn {

TransformerEncoderLayer::TransformerEncoderLayer(int64_t dim, int64_t heads, int64_t mlp_hidden,
                                                 double dropout, Activation activation, DType dtype,
                                                 const AttentionSpec& attention) {
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(dim, 1e-5, dtype));
  attn = register_module("attn", std::make_shared<MultiHeadAttention>(dim, heads, dropout, dtype, attention));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(dim, 1e-5, dtype));
  mlp = register_module("mlp", std::make_shared<MLP>(dim, mlp_hidden, activation, dtype));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(dropout));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(dropout));
}

Tensor TransformerEncoderLayer::forward(const Tensor& x, const Tensor& mask, bool is_causal) const {
  const Tensor attended = x + dropout1->forward(attn->forward(norm1->forward(x), mask, is_causal).output);
  return attended + dropout2->forward(mlp->forward(norm2->forward(attended)));
}

Tensor TransformerEncoderLayer::forward_cached(const Tensor& x, KVCache::Layer& cache) const {
  const Tensor attended = x + dropout1->forward(attn->forward_cached(norm1->forward(x), cache));
  return attended + dropout2->forward(mlp->forward(norm2->forward(attended)));
}

}  // namespace tg::nn
