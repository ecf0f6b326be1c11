// The attention variants' own parts of MultiHeadAttention (nn/attention.h, nn/attention_spec.h):
// checking the spec and registering what its kind and position learn or draw; Linformer, Performer
// and Reformer on the projected heads (attend's first branch); the position biases, ALiBi, T5 and
// Shaw, for the fused kernel and the explicit path.
#include <cmath>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/nn/attention.h"
#include "tapegrad/nn/linformer.h"
#include "tapegrad/nn/performer.h"
#include "tapegrad/nn/reformer.h"
#include "tapegrad/nn/relative_position.h"
#include "tapegrad/ops/ops.h"

namespace tg::nn {

// The kind's sizes and the position's fit to it checked, and their tensors registered.
void MultiHeadAttention::register_variant(DType dtype) {
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

}  // namespace

void MultiHeadAttention::redraw_features(uint64_t seed) {
  TG_CHECK(spec.kind == AttentionKind::performer,
           "MultiHeadAttention::redraw_features: only a performer has random features");
  const Tensor fresh = performer_features(spec.features, head_dim, seed, projection_matrix.dtype());
  projection_matrix.copy_(fresh);  // an in-place write: raises the version
  spec.seed = seed;
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

}  // namespace tg::nn
