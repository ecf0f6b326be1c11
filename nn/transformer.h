#pragma once
// A pre-norm transformer encoder layer:  x = x + Dropout(MHA(LN1(x)));  x = x + Dropout(MLP(LN2(x))).
#include "tapegrad/nn/attention.h"

namespace tg::nn {

class TransformerEncoderLayer : public ModuleOf<TransformerEncoderLayer> {
 public:
  // `attention` is the spec of its MultiHeadAttention (nn/attention_spec.h).
  TransformerEncoderLayer(int64_t dim, int64_t heads, int64_t mlp_hidden, double dropout = 0.0,
                          Activation activation = Activation::gelu, DType dtype = DType::f32,
                          const AttentionSpec& attention = {});
  // x [B, S, dim]; mask as MultiHeadAttention::forward.
  Tensor forward(const Tensor& x, const Tensor& mask = Tensor(), bool is_causal = false) const;
  // Causal incremental decoding: the same layer on new positions x [B, n, dim], attention over
  // the cache (MultiHeadAttention::forward_cached, whose rules apply).
  Tensor forward_cached(const Tensor& x, KVCache::Layer& cache) const;

  std::shared_ptr<LayerNorm> norm1, norm2;
  std::shared_ptr<MultiHeadAttention> attn;
  std::shared_ptr<MLP> mlp;
  std::shared_ptr<Dropout> dropout1, dropout2;
};

}  // namespace tg::nn
