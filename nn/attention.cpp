// Multi-head attention as the tutorials write it (nn/attention.h): project q, k and v, split them
// into heads, attend, merge the heads, project the output. What the variants add lives beside it:
// nn/attention_variants.cpp (Linformer, Performer, Reformer, and the ALiBi, T5 and Shaw biases),
// nn/attention_packed.cpp (self-attention on one packed projection), nn/attention_int8.cpp (int8
// projections stacked as one), nn/attention_cached.cpp (incremental decoding).
#include "tapegrad/nn/attention.h"

#include <cmath>
#include <limits>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/textbook.h"
#include "tapegrad/nn/masks.h"
#include "tapegrad/nn/rope.h"
#include "tapegrad/ops/ops.h"

namespace tg::nn {

MultiHeadAttention::MultiHeadAttention(int64_t hidden, int64_t heads, double dropout, DType dtype,
                                       const AttentionSpec& spec)
    : hidden(hidden), heads(heads), head_dim(heads > 0 ? hidden / heads : 0), dropout(dropout),
      spec(spec) {
  TG_CHECK(heads > 0 && hidden > 0 && hidden % heads == 0, "MultiHeadAttention: hidden size ", hidden,
           " is not divisible by ", heads, " heads");
  TG_CHECK(dropout >= 0 && dropout < 1, "MultiHeadAttention: dropout must be in [0, 1), got ", dropout);
  q_proj = register_module("q_proj", std::make_shared<Linear>(hidden, hidden, true, dtype));
  if (spec.kind != AttentionKind::reformer) {  // a reformer's keys are its queries (shared QK)
    k_proj = register_module("k_proj", std::make_shared<Linear>(hidden, hidden, true, dtype));
  }
  v_proj = register_module("v_proj", std::make_shared<Linear>(hidden, hidden, true, dtype));
  o_proj = register_module("o_proj", std::make_shared<Linear>(hidden, hidden, true, dtype));
  register_variant(dtype);  // the spec's checks and tensors (nn/attention_variants.cpp)
}

namespace {

// query [B, Sq, hidden], key and value [B, Sk, hidden], or one error naming all three shapes; a
// reformer's key must be the query tensor itself.
void check_query_key_value(const Tensor& query, const Tensor& key, const Tensor& value,
                           int64_t hidden, AttentionKind kind) {
  TG_CHECK(query.dim() == 3 && key.dim() == 3 && value.dim() == 3 && query.size(-1) == hidden &&
               key.size(-1) == hidden && value.size(-1) == hidden && key.size(0) == query.size(0) &&
               value.size(0) == query.size(0) && key.size(1) == value.size(1),
           "MultiHeadAttention(hidden=", hidden, "): query ", shape_str(query.shape()), ", key ",
           shape_str(key.shape()), ", value ", shape_str(value.shape()),
           " do not fit [B, Sq, hidden], [B, Sk, hidden], [B, Sk, hidden]");
  TG_CHECK(kind != AttentionKind::reformer || key.same(query), "MultiHeadAttention "
           "(reformer): shared-QK attention is self-attention, its keys are its queries: key ",
           shape_str(key.shape()), " must be the query tensor ", shape_str(query.shape()));
}

}  // namespace

Tensor MultiHeadAttention::split_heads(const Tensor& x) const {
  return x.view({x.size(0), x.size(1), heads, head_dim}).transpose(1, 2);
}

Tensor MultiHeadAttention::merge_heads(const Tensor& x) const {
  return x.transpose(1, 2).reshape({x.size(0), x.size(2), hidden});
}

std::pair<Tensor, Tensor> explicit_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const Tensor& mask, bool is_causal, double dropout_p,
                                             const Tensor& bias) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  Tensor scores = matmul(q, k.transpose(-1, -2)) * scale;
  if (bias.defined()) scores = scores + bias;
  Tensor allowed = mask;
  if (is_causal) {
    const Tensor causal = causal_mask(q.size(-2), k.size(-2), q.device());
    allowed = allowed.defined() ? combine_masks(allowed, causal) : causal;
  }
  if (allowed.defined()) {
    scores = where(allowed, scores, scalar(-std::numeric_limits<double>::infinity(), scores.dtype(), scores.device()));
  }
  const Tensor weights = dropout_p > 0 ? tg::dropout(softmax(scores, -1), dropout_p, true)
                                       : softmax(scores, -1);
  return {matmul(weights, v), weights};
}

// The tutorial's multi-head attention: project q, k, v and split heads, attend, merge heads,
// project the output. Self-attention on the CPU may take forward_packed instead (same result).
AttentionOutput MultiHeadAttention::forward(const Tensor& query, const Tensor& key,
                                            const Tensor& value, const Tensor& mask,
                                            bool need_weights, bool is_causal,
                                            bool average_attn_weights) const {
  check_query_key_value(query, key, value, hidden, spec.kind);
  Tensor head_mask = mask;
  if (mask.defined() && mask.dim() == 3) head_mask = mask.unsqueeze(1);  // [B, 1, Sq, Sk]
  const double dropout_p = is_training() ? dropout : 0.0;
  if (packs_projections(query, key, value, need_weights)) {  // the optimisation: forward_packed
    return forward_packed(query, head_mask, is_causal, dropout_p);
  }

  // 1. Project query, key and value, and split each into heads.
  Tensor q = split_heads(q_proj->forward(query));  // [B, heads, Sq, head_dim]
  Tensor k;  // [B, heads, Sk, head_dim]; none for a reformer (its keys are its queries)
  if (k_proj) k = split_heads(k_proj->forward(key));
  const Tensor v = split_heads(v_proj->forward(value));  // [B, heads, Sk, head_dim]
  if (spec.position == PositionKind::rope) {  // rotate q and k by their positions
    q = apply_rope(q);
    if (k.defined()) k = apply_rope(k);
  }
  // 2. Attention, every head at once -> context [B, heads, Sq, head_dim] (and the weights).
  auto [context, weights] = attend(q, k, v, head_mask, is_causal, dropout_p, need_weights);
  // PyTorch's average_attn_weights: one [B, Sq, Sk] map, the heads' mean.
  if (weights.defined() && average_attn_weights) weights = mean(weights, {1});
  // 3. Merge the heads and project the output.
  return {o_proj->forward(merge_heads(context)), weights};  // [B, Sq, hidden]
}

// The fused kernel, the explicit path, or Linformer/Performer/Reformer on projected heads.
std::pair<Tensor, Tensor> MultiHeadAttention::attend(const Tensor& q, const Tensor& k,
                                                     const Tensor& v, const Tensor& head_mask,
                                                     bool is_causal, double dropout_p,
                                                     bool need_weights) const {
  if (!spec.has_scores()) {  // Linformer, Performer, Reformer: no weights (attention_variants.cpp)
    return {approximate_attention(q, k, v, head_mask, is_causal, dropout_p), Tensor()};
  }
  // (Under tg::Textbook, autograd/textbook.h, always the explicit path: the ops the tutorial reads.)
  if (use_fused && !textbook_mode() && !need_weights && spec.position != PositionKind::shaw) {
    return {scaled_dot_product_attention(q, k, v, head_mask, is_causal, dropout_p, {},
                                         spec.sparsity(), spec.position == PositionKind::alibi,
                                         t5_bias(q.size(2), k.size(2), is_causal)),
            Tensor()};
  }
  // The same attention with the layout as a dense mask, ALiBi and T5 as dense biases; Shaw's
  // relative keys always come this way (their bias depends on q: not a kernel's).
  return explicit_heads(q, k, v, head_mask, is_causal, dropout_p);
}

// The explicit path with everything the fused kernel does inside itself made dense: the sparsity
// layout as a mask [Sq, Sk] and ALiBi or T5 as a bias [heads, Sq, Sk]; and Shaw's relative keys,
// which only this path computes. Returns (context, weights).
std::pair<Tensor, Tensor> MultiHeadAttention::explicit_heads(
    const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& head_mask, bool is_causal,
    double dropout_p) const {
  const SparsityLayout layout = spec.sparsity();
  Tensor allowed = head_mask;
  if (layout.kind != SparsityKind::full) {
    const Tensor pattern = sparsity_mask(layout, q.size(2), k.size(2), q.device());
    allowed = allowed.defined() ? combine_masks(allowed, pattern) : pattern;
  }
  return explicit_attention(q, k, v, allowed, is_causal, dropout_p,
                            explicit_bias(q, k.size(2), is_causal));
}

}  // namespace tg::nn
