#include "tapegrad/nn/attention.h"

#include <cmath>
#include <limits>

#include "tapegrad/autograd/error.h"
#include "tapegrad/nn/masks.h"
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
  k_proj = register_module("k_proj", std::make_shared<Linear>(hidden, hidden, true, dtype));
  v_proj = register_module("v_proj", std::make_shared<Linear>(hidden, hidden, true, dtype));
  o_proj = register_module("o_proj", std::make_shared<Linear>(hidden, hidden, true, dtype));
}

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
    scores = where(allowed, scores, scalar(-std::numeric_limits<double>::infinity(), scores.dtype()));
  }
  const Tensor weights = dropout_p > 0 ? tg::dropout(softmax(scores, -1), dropout_p, true)
                                       : softmax(scores, -1);
  return {matmul(weights, v), weights};
}

AttentionOutput MultiHeadAttention::forward(const Tensor& query, const Tensor& key,
                                            const Tensor& value, const Tensor& mask,
                                            bool need_weights, bool is_causal) const {
  TG_CHECK(query.dim() == 3 && key.dim() == 3 && value.dim() == 3 && query.size(-1) == hidden &&
               key.size(-1) == hidden && value.size(-1) == hidden && key.size(0) == query.size(0) &&
               value.size(0) == query.size(0) && key.size(1) == value.size(1),
           "MultiHeadAttention(hidden=", hidden, "): query ", shape_str(query.shape()), ", key ",
           shape_str(key.shape()), ", value ", shape_str(value.shape()),
           " do not fit [B, Sq, hidden], [B, Sk, hidden], [B, Sk, hidden]");
  Tensor head_mask = mask;
  if (mask.defined() && mask.dim() == 3) head_mask = mask.unsqueeze(1);  // [B, 1, Sq, Sk]
  const double dropout_p = is_training() ? dropout : 0.0;

  const Tensor q = split_heads(q_proj->forward(query));  // [B, heads, Sq, head_dim]
  const Tensor k = split_heads(k_proj->forward(key));    // [B, heads, Sk, head_dim]
  const Tensor v = split_heads(v_proj->forward(value));  // [B, heads, Sk, head_dim]
  AttentionOutput result;
  Tensor context;  // [B, heads, Sq, head_dim]
  const SparsityLayout layout = spec.sparsity();
  const bool alibi = spec.position == PositionKind::alibi;
  if (use_fused && !need_weights) {
    context = scaled_dot_product_attention(q, k, v, head_mask, is_causal, dropout_p, {}, layout, alibi);
  } else {  // the same attention with the layout as a dense mask and ALiBi as a dense bias
    Tensor allowed = head_mask;
    if (layout.kind != SparsityKind::full) {
      const Tensor pattern = sparsity_mask(layout, q.size(2), k.size(2), q.device());
      allowed = allowed.defined() ? combine_masks(allowed, pattern) : pattern;
    }
    const Tensor bias = alibi ? alibi_bias(heads, q.size(2), k.size(2), q.dtype(), q.device()) : Tensor();
    std::tie(context, result.weights) =
        explicit_attention(q, k, v, allowed, is_causal, dropout_p, bias);
  }
  result.output = o_proj->forward(merge_heads(context));  // [B, Sq, hidden]
  return result;
}

}  // namespace tg::nn
