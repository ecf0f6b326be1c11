#include "tapegrad/nn/attention.h"

#include <cmath>
#include <limits>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/nn/linformer.h"
#include "tapegrad/nn/masks.h"
#include "tapegrad/nn/performer.h"
#include "tapegrad/nn/reformer.h"
#include "tapegrad/nn/relative_position.h"
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
  TG_CHECK(spec.position != PositionKind::alibi || spec.has_scores(),
           "MultiHeadAttention: ALiBi biases the scores of the fused kernel; linformer, performer "
           "and reformer form no such scores (use rope or sinusoidal positions)");
  TG_CHECK(spec.position != PositionKind::rope || head_dim % 2 == 0, "MultiHeadAttention: RoPE "
           "rotates pairs of channels and needs an even head_dim, got ", head_dim);
  switch (spec.kind) {
    case AttentionKind::local:
    case AttentionKind::band:
    case AttentionKind::bigbird:
      TG_CHECK(spec.window >= 1 && spec.dilation >= 1 && spec.random_blocks >= 0 && spec.global_tokens >= 0,
               "MultiHeadAttention: a sparse layout needs window >= 1, dilation >= 1, random blocks "
               "and global tokens >= 0; got window ", spec.window, ", dilation ", spec.dilation,
               ", random blocks ", spec.random_blocks, ", global tokens ", spec.global_tokens);
      break;
    case AttentionKind::linformer:
      TG_CHECK(spec.rank >= 1 && spec.max_len >= 1, "MultiHeadAttention: linformer needs rank >= 1 "
               "and max_len >= 1, got rank ", spec.rank, ", max_len ", spec.max_len);
      proj_k = register_parameter("proj_k", linformer_projection(spec.max_len, spec.rank, dtype));
      proj_v = register_parameter("proj_v", linformer_projection(spec.max_len, spec.rank, dtype));
      break;
    case AttentionKind::performer:
      TG_CHECK(spec.features >= 1, "MultiHeadAttention: performer needs features >= 1, got ", spec.features);
      projection_matrix = register_buffer(
          "projection_matrix", performer_features(spec.features, head_dim, spec.seed, dtype));
      break;
    case AttentionKind::reformer:
      TG_CHECK(spec.buckets >= 2 && spec.buckets % 2 == 0 && spec.rounds >= 1,
               "MultiHeadAttention: reformer needs an even number of buckets >= 2 and rounds >= 1, "
               "got buckets ", spec.buckets, ", rounds ", spec.rounds);
      random_rotations = register_buffer(
          "random_rotations",
          reformer_rotations(spec.rounds, head_dim, spec.buckets, spec.seed, dtype));
      break;
    case AttentionKind::full: break;
  }
  register_relative_positions(dtype);
}

// The learned relative positions' tables, drawn N(0, std^2) (Embedding draws N(0, 1)): T5's
// [buckets, heads] with std hidden^-1/2 as Hugging Face's T5 initialises it, Shaw's
// [2 clip + 1, head_dim] with head_dim^-1/2, the scale of a key's entries.
void MultiHeadAttention::register_relative_positions(DType dtype) {
  if (spec.position != PositionKind::t5 && spec.position != PositionKind::shaw) return;
  const bool t5 = spec.position == PositionKind::t5;
  const RelativePositions& r = spec.relative;
  TG_CHECK(spec.has_scores(), "MultiHeadAttention: ", t5 ? "T5's relative bias" : "Shaw's relative "
           "keys", " act on the [Sq, Sk] scores, which linformer, performer and reformer do not "
           "form (use full, local, band or bigbird, or rope or sinusoidal positions)");
  TG_CHECK(!t5 || (r.buckets >= 4 && r.max_distance >= r.buckets), "MultiHeadAttention: T5's "
           "relative bias needs buckets >= 4 and max_distance >= buckets, got ", r.buckets,
           " buckets, max_distance ", r.max_distance);
  TG_CHECK(t5 || r.clip >= 1, "MultiHeadAttention: Shaw's relative keys need a clipping distance "
           ">= 1, got ", r.clip);
  const int64_t rows = t5 ? r.buckets : checked_mul(2, r.clip, "Shaw's 2 clip") + 1;
  const int64_t width = t5 ? heads : head_dim;
  auto table = std::make_shared<Embedding>(rows, width, dtype);
  const double deviation = 1.0 / std::sqrt(static_cast<double>(t5 ? hidden : head_dim));
  {
    NoGrad no_grad;
    table->weight.copy_(table->weight * deviation);
  }
  if (t5) {
    relative_attention_bias = register_module("relative_attention_bias", table);
  } else {
    relative_key = register_module("relative_key", table);
  }
}

namespace {

// Linformer, Performer and Reformer take a key padding mask [B, Sk]. A mask means what it means on
// the main path: bool, true = may attend, broadcast against [B, heads, Sq, Sk] from the right (so a
// 2-D mask is [Sq, Sk], never [B, Sk]). It is a key padding mask when it varies by batch row and
// key only: [B or 1, 1, 1, Sk] once right-aligned to 4 dims. Any other mask (by query, e.g. causal
// [Sq, Sk], or by head) is one error: these kinds form no [Sq, Sk] scores to mask.
Tensor key_padding_of(const Tensor& mask, int64_t batch, int64_t heads, int64_t sq, int64_t sk,
                      const char* kind) {
  if (!mask.defined()) return Tensor();
  TG_CHECK(mask.dim() >= 1 && mask.dim() <= 4, "MultiHeadAttention (", kind, "): a mask ",
           shape_str(mask.shape()), " does not broadcast to [B, heads, Sq, Sk] = [", batch, ", ",
           heads, ", ", sq, ", ", sk, "]");
  Shape aligned(4 - mask.dim(), 1);  // the shape right-aligned to 4 dims, as broadcasting reads it
  aligned.insert(aligned.end(), mask.shape().begin(), mask.shape().end());
  const bool per_batch_and_key = (aligned[0] == batch || aligned[0] == 1) && aligned[1] == 1 &&
                                 aligned[2] == 1 && aligned[3] == sk;
  TG_CHECK(per_batch_and_key, "MultiHeadAttention (", kind, "): only a key padding mask [B, 1, 1, "
           "Sk] (or [1, Sk] for every batch row) can be honoured, got ", shape_str(mask.shape()),
           " for [B, heads, Sq, Sk] = [", batch, ", ", heads, ", ", sq, ", ", sk, "]: ", kind,
           " forms no [Sq, Sk] scores that a mask by query or head could mask");
  TG_CHECK(mask.dtype() == DType::b8, "MultiHeadAttention (", kind, "): the mask must be bool "
           "(true = may attend), got ", dtype_name(mask.dtype()));
  return mask.reshape({aligned[0], sk}).expand({batch, sk}).contiguous();
}

// query [B, Sq, hidden], key and value [B, Sk, hidden], or one error naming all three shapes.
void check_query_key_value(const Tensor& query, const Tensor& key, const Tensor& value,
                           int64_t hidden) {
  TG_CHECK(query.dim() == 3 && key.dim() == 3 && value.dim() == 3 && query.size(-1) == hidden &&
               key.size(-1) == hidden && value.size(-1) == hidden && key.size(0) == query.size(0) &&
               value.size(0) == query.size(0) && key.size(1) == value.size(1),
           "MultiHeadAttention(hidden=", hidden, "): query ", shape_str(query.shape()), ", key ",
           shape_str(key.shape()), ", value ", shape_str(value.shape()),
           " do not fit [B, Sq, hidden], [B, Sk, hidden], [B, Sk, hidden]");
}

}  // namespace

void MultiHeadAttention::redraw_features(uint64_t seed) {
  TG_CHECK(spec.kind == AttentionKind::performer,
           "MultiHeadAttention::redraw_features: only a performer has random features");
  const Tensor fresh = performer_features(spec.features, head_dim, seed, projection_matrix.dtype());
  projection_matrix.copy_(fresh);  // an in-place write: raises the version
  spec.seed = seed;
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
                                            bool need_weights, bool is_causal) const {
  check_query_key_value(query, key, value, hidden);
  TG_CHECK(spec.kind != AttentionKind::reformer || key.same(query), "MultiHeadAttention "
           "(reformer): shared-QK attention is self-attention, its keys are its queries: key ",
           shape_str(key.shape()), " must be the query tensor ", shape_str(query.shape()));
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
  // 3. Merge the heads and project the output.
  return {o_proj->forward(merge_heads(context)), weights};  // [B, Sq, hidden]
}

// The fused kernel, the explicit path, or Linformer/Performer/Reformer on projected heads.
std::pair<Tensor, Tensor> MultiHeadAttention::attend(const Tensor& q, const Tensor& k,
                                                     const Tensor& v, const Tensor& head_mask,
                                                     bool is_causal, double dropout_p,
                                                     bool need_weights) const {
  if (!spec.has_scores()) {  // no weights
    return {approximate_attention(q, k, v, head_mask, is_causal, dropout_p), Tensor()};
  }
  if (use_fused && !need_weights && spec.position != PositionKind::shaw) {
    return {scaled_dot_product_attention(q, k, v, head_mask, is_causal, dropout_p, {},
                                         spec.sparsity(), spec.position == PositionKind::alibi,
                                         t5_bias(q.size(2), k.size(2), is_causal)),
            Tensor()};
  }
  // The same attention with the layout as a dense mask, ALiBi and T5 as dense biases; Shaw's
  // relative keys always come this way (their bias depends on q: not a kernel's).
  return explicit_heads(q, k, v, head_mask, is_causal, dropout_p);
}

// Linformer, Performer or Reformer on projected heads: attention in O(S) that forms no [Sq, Sk]
// weights, so there are none to return, and the only mask it takes is a key padding mask.
// Performer has no weights to drop either: dropout in training is an error for it
// (docs/attention.md, Performer). A reformer takes no k (shared QK: its keys are q normalised).
Tensor MultiHeadAttention::approximate_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                                 const Tensor& head_mask, bool is_causal,
                                                 double dropout_p) const {
  const bool linformer = spec.kind == AttentionKind::linformer;
  const bool reformer = spec.kind == AttentionKind::reformer;
  TG_CHECK(linformer || reformer || dropout_p == 0, "MultiHeadAttention (performer): dropout ",
           dropout_p, " cannot be applied in training: FAVOR+ never forms the [Sq, Sk] attention "
           "weights that dropout drops (use dropout 0 with performer attention)");
  const char* kind = linformer ? "linformer" : reformer ? "reformer" : "performer";
  const Tensor padding = key_padding_of(head_mask, q.size(0), heads, q.size(2), v.size(2), kind);
  if (reformer) return reformer_attention(q, v, random_rotations, padding, is_causal, dropout_p);
  return linformer ? linformer_attention(q, k, v, proj_k, proj_v, padding, is_causal, dropout_p)
                   : performer_attention(q, k, v, projection_matrix, padding, is_causal);
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

Tensor MultiHeadAttention::t5_bias(int64_t sq, int64_t sk, bool is_causal) const {
  if (spec.position != PositionKind::t5) return Tensor();
  // T5 buckets bidirectionally in an encoder, causally (is_decoder) in a decoder's self-attention
  return t5_relative_bias(relative_attention_bias->weight, sq, sk, !is_causal,
                          spec.relative.max_distance);
}

Tensor MultiHeadAttention::explicit_bias(const Tensor& q, int64_t sk, bool is_causal) const {
  const int64_t sq = q.size(2);
  switch (spec.position) {
    case PositionKind::alibi: return alibi_bias(heads, sq, sk, q.dtype(), q.device());
    case PositionKind::t5:  // [heads, Sq, Sk]
      return relative_bias_dense(t5_bias(sq, sk, is_causal), sq, sk).to(q.dtype());
    case PositionKind::shaw: {  // q_i . a^K_{clip(j - i)} / sqrt(d), [B, heads, Sq, Sk]
      const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
      return shaw_relative_logits(q, relative_key->weight.to(q.dtype()), sk) * scale;
    }
    default: return Tensor();
  }
}

// Optimisation: self-attention on one packed projection. Where packs_projections allows it (one
// tensor as query, key and value, on the CPU, with nothing between the projections and the
// kernel), q, k and v come from one GEMM against [Wq; Wk; Wv] (stacked_linear, a [B, S, 3 hidden]
// tensor) and packed_self_attention reads them where that GEMM left them. It saves two of the
// three projection GEMMs forward, and in backward two GEMMs for dx, two for dW and the sum of
// three input gradients; memory is that of three linears. It computes the same attention as
// forward's four projections (tests/nn/test_attention.cpp holds the two to each other).
// Quantized (int8) projections take the one product against [Wq; Wk; Wv] that
// stack_quantized_projections set up (nn/attention_int8.cpp).
AttentionOutput MultiHeadAttention::forward_packed(const Tensor& x, const Tensor& head_mask,
                                                   bool is_causal, double dropout_p) const {
  Tensor qkv;
  if (q_proj->quantization() != QuantMode::none) {
    qkv = quantized_linear(x, stacked_weight, stacked_bias, *stacked_input_scale());
  } else {
    std::vector<Tensor> biases;  // none, or all three
    if (q_proj->bias.defined()) biases = {q_proj->bias, k_proj->bias, v_proj->bias};
    qkv = stacked_linear(x, {q_proj->weight, k_proj->weight, v_proj->weight}, biases);
  }
  const bool alibi = spec.position == PositionKind::alibi;
  const int64_t seq = x.size(1);
  const Tensor context = packed_self_attention(qkv, heads, head_mask, is_causal, dropout_p, {},
                                               spec.sparsity(), alibi,
                                               t5_bias(seq, seq, is_causal));
  return {o_proj->forward(merge_heads(context)), Tensor()};
}

// Whether forward may take forward_packed: self-attention (one tensor as query, key and value)
// on the CPU with the fused path, plain projections of one dtype with or without bias alike (no
// calibration observer) or int8 ones stacked as one (stacked_input_scale), and no rotation of q
// and k, Shaw's q-dependent bias or low-rank attention in between.
bool MultiHeadAttention::packs_projections(const Tensor& query, const Tensor& key,
                                           const Tensor& value, bool need_weights) const {
  if (!use_fused || need_weights || !query.same(key) || !key.same(value) ||
      query.device().type != DeviceType::cpu || spec.position == PositionKind::rope ||
      spec.position == PositionKind::shaw ||
      !spec.has_scores()) {  // linformer, performer, reformer
    return false;
  }
  if (q_proj->quantization() != QuantMode::none) return stacked_input_scale().has_value();
  for (const auto& projection : {q_proj, k_proj, v_proj}) {
    if (projection->quantization() != QuantMode::none || projection->input_observer ||
        projection->bias.defined() != q_proj->bias.defined() ||
        projection->weight.dtype() != q_proj->weight.dtype()) {
      return false;
    }
  }
  return true;
}

}  // namespace tg::nn
