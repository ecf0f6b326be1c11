// The weights behind every kind of attention, composed from ordinary ops (matmul, exp, where,
// softmax), in the module's dtype and on its device.
#include "tapegrad/nn/attention_weights.h"

#include <cmath>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/nn/masks.h"
#include "tapegrad/nn/performer.h"
#include "tapegrad/nn/reformer.h"
#include "tapegrad/nn/rope.h"
#include "tapegrad/ops/ops.h"

namespace tg::nn {

Tensor performer_implied_weights(const Tensor& q, const Tensor& k, const Tensor& projection,
                                 bool is_causal) {
  TG_CHECK(q.dim() >= 2 && k.dim() == q.dim() && k.size(-1) == q.size(-1) &&
               projection.dim() == 2 && projection.size(1) == q.size(-1),
           "performer_implied_weights: q ", shape_str(q.shape()), ", k ", shape_str(k.shape()),
           ", projection ", shape_str(projection.shape()),
           " do not fit q [.., Sq, d], k [.., Sk, d], projection [M, d]");
  // The shifts performer_attention takes (one a query, one a head for its keys; causal: the
  // kernel's own, which read no later key) keep exp in range and cancel in the ratio below, as
  // 1 / sqrt(M) does.
  Tensor kernel;  // phi(q_i) . phi(k_j), each row scaled by its own constant
  if (is_causal) {
    kernel = performer_causal_kernel(q, k, projection);
  } else {
    const Tensor query_logs = performer_log_features(q, projection);  // [.., Sq, M]
    const Tensor key_logs = performer_log_features(k, projection);    // [.., Sk, M]
    const Tensor query_features = exp(query_logs - max(query_logs, -1, true).values);
    const Tensor key_shift = max(max(key_logs, -1, true).values, -2, true).values;
    const Tensor key_features = exp(key_logs - key_shift);
    kernel = matmul(query_features, key_features.transpose(-1, -2));
  }
  const Tensor row_sums = sum(kernel, {-1}, true);
  // A row without mass stays zero (divided by 1), as performer_attention's 0 / 0.
  return kernel / (row_sums + equal(row_sums, scalar(0.0, row_sums.dtype(), row_sums.device())));
}

Tensor linformer_implied_weights(const Tensor& q, const Tensor& k, const Tensor& proj_k,
                                 const Tensor& proj_v) {
  TG_CHECK(q.dim() >= 2 && k.dim() == q.dim() && k.size(-1) == q.size(-1) &&
               proj_k.dim() == 2 && proj_v.dim() == 2 && proj_k.size(1) == proj_v.size(1) &&
               proj_k.size(0) >= k.size(-2) && proj_v.size(0) >= k.size(-2),
           "linformer_implied_weights: q ", shape_str(q.shape()), ", k ", shape_str(k.shape()),
           ", proj_k ", shape_str(proj_k.shape()), ", proj_v ", shape_str(proj_v.shape()),
           " do not fit q [.., Sq, d], k [.., Sk, d], proj_k and proj_v [max_len >= Sk, rank]");
  const int64_t key_length = k.size(-2);
  const Tensor e = proj_k.narrow(0, 0, key_length), f = proj_v.narrow(0, 0, key_length);
  const Tensor projected_keys = matmul(e.transpose(0, 1), k);  // E^T k: [.., rank, d]
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  const Tensor weights =
      softmax(matmul(q, projected_keys.transpose(-1, -2)) * scale, -1);  // [.., Sq, rank]
  return matmul(weights, f.transpose(0, 1));                           // [.., Sq, Sk]
}

Tensor reformer_implied_weights(const Tensor& q, const Tensor& rotations, bool is_causal) {
  TG_CHECK(q.dim() == 4, "reformer_implied_weights: q ", shape_str(q.shape()),
           " does not fit [B, H, S, d]");
  const int64_t seq = q.size(2);
  // The [B, H, S, S] values as checked products: q may be a large expanded view, whose S x S
  // would wrap around.
  const int64_t per_head = checked_mul(seq, seq, "reformer_implied_weights: S x S");
  checked_mul(checked_mul(q.size(0), q.size(1), "reformer_implied_weights: B x H"), per_head,
              "reformer_implied_weights: B x H x S x S");
  Tensor identity = zeros({1, 1, seq, seq}, DType::f64, kCPU);
  double* diagonal = identity.data_as<double>();
  for (int64_t i = 0; i < seq; ++i) diagonal[i * seq + i] = 1.0;
  const Tensor values = identity.to(q.dtype())
                            .to(q.device())
                            .expand({q.size(0), q.size(1), seq, seq})
                            .contiguous();
  return reformer_attention(q, values, rotations, Tensor(), is_causal);
}

SelfAttentionWeights self_attention_weights(const MultiHeadAttention& mha, const Tensor& x,
                                            const Tensor& mask, bool is_causal) {
  const AttentionKind kind = mha.spec.kind;
  if (mha.spec.has_scores()) {  // full and the sparse layouts: forward's own weights
    const Tensor weights = mha.forward(x, x, x, mask, /*need_weights=*/true, is_causal,
                                           /*average_attn_weights=*/false).weights;
    TG_CHECK(weights.defined(), "self_attention_weights: this attention returned no weights");
    return {weights, false};
  }
  TG_CHECK(!mask.defined(), "self_attention_weights: no mask is supported for Linformer, "
           "Performer and Reformer");
  TG_CHECK(kind != AttentionKind::linformer || !is_causal,
           "self_attention_weights (linformer): causal attention is not supported");
  // The q and k forward attends with: projected, split into heads, rotated under RoPE (a
  // reformer has no k: its keys are its queries).
  Tensor q = mha.split_heads(mha.q_proj->forward(x)), k;
  if (mha.k_proj) k = mha.split_heads(mha.k_proj->forward(x));
  if (mha.spec.position == PositionKind::rope) {
    q = apply_rope(q);
    if (k.defined()) k = apply_rope(k);
  }
  switch (kind) {
    case AttentionKind::performer:
      return {performer_implied_weights(q, k, mha.projection_matrix, is_causal), true};
    case AttentionKind::linformer:
      return {linformer_implied_weights(q, k, mha.proj_k, mha.proj_v), true};
    case AttentionKind::reformer:
      return {reformer_implied_weights(q, mha.random_rotations, is_causal), true};
    default: fail("self_attention_weights: no weights for this kind of attention");
  }
}

}  // namespace tg::nn
