#pragma once
// Multi-head attention with four separate projections (q_proj, k_proj, v_proj, o_proj), as the
// classic tutorials write it. See docs/attention.md for the walk-through with shapes.
#include <optional>

#include "tapegrad/nn/attention_spec.h"
#include "tapegrad/nn/kv_cache.h"
#include "tapegrad/nn/layers.h"
#include "tapegrad/ops/quantize.h"

namespace tg::nn {

struct AttentionOutput {
  Tensor output;   // [B, Sq, hidden]
  // Only when need_weights (after dropout, as PyTorch): averaged over the heads, [B, Sq, Sk]
  // (average_attn_weights, the default), or each head's, [B, heads, Sq, Sk].
  Tensor weights;
};

class MultiHeadAttention : public ModuleOf<MultiHeadAttention> {
 public:
  // `spec` picks the attention (full, a sparse layout, Linformer, Performer) and the position
  // handling inside it (RoPE, ALiBi); its parameters and buffers are registered here:
  // linformer: proj_k, proj_v [max_len, rank]; performer: projection_matrix [features, head_dim];
  // reformer: random_rotations [rounds, head_dim, buckets / 2], and no k_proj (shared QK: its
  // keys are its queries normalised, so forward takes self-attention only, key = query);
  // t5: relative_attention_bias.weight [buckets, heads] ~ N(0, hidden^-1/2), T5's init; shaw:
  // relative_key.weight [2 clip + 1, head_dim] ~ N(0, head_dim^-1/2) (nn/relative_position.h).
  // dropout drops attention weights in training; a performer has none, and forward in training
  // refuses dropout > 0 for it (a tg::Error; in eval mode dropout plays no part).
  MultiHeadAttention(int64_t hidden, int64_t heads, double dropout = 0.0, DType dtype = DType::f32,
                     const AttentionSpec& spec = {});

  // query [B, Sq, hidden], key and value [B, Sk, hidden] (Sk may differ from Sq: cross-attention).
  // mask: bool, true = may attend, broadcastable to [B, heads, Sq, Sk] ([B, Sq, Sk] is read as
  // [B, 1, Sq, Sk]). is_causal adds the causal mask. need_weights also returns the attention
  // weights; it is off by default (torch.nn.MultiheadAttention's is on) because the weights come
  // from the explicit path only: asking for them turns the fused kernel off. average_attn_weights
  // (on, as PyTorch's) returns their mean over the heads, [B, Sq, Sk], differentiable; off, each
  // head's [B, heads, Sq, Sk] (what a plot of the heads reads).
  AttentionOutput forward(const Tensor& query, const Tensor& key, const Tensor& value,
                          const Tensor& mask = Tensor(), bool need_weights = false,
                          bool is_causal = false, bool average_attn_weights = true) const;
  AttentionOutput forward(const Tensor& x, const Tensor& mask = Tensor(), bool is_causal = false) const {
    return forward(x, x, x, mask, false, is_causal);
  }

  // Incremental decoding (nn/kv_cache.h), causal self-attention: x [B, n, hidden] holds positions
  // cache.length .. cache.length + n - 1; their keys and values are appended to the cache and
  // their queries attend over every cached position, as forward(x, mask, is_causal = true) on the
  // whole sequence computes them. Either the cache is empty (the prompt, any n) or n is 1 (one new
  // token). Needs decodes_incrementally(spec) (else a tg::Error naming the kind) and records
  // nothing on the tape (a tg::Error with grad mode on: generation runs under NoGrad).
  Tensor forward_cached(const Tensor& x, KVCache::Layer& cache) const;

  // Performer: draws projection_matrix afresh from `seed` (the tensor keeps its identity, so an
  // optimizer or a saved reference still sees it); an error for any other kind.
  void redraw_features(uint64_t seed);

  // int8 (nn/attention_int8.cpp): once q_proj, k_proj and v_proj are quantized alike (what
  // nn::quantize_dynamic, quantize_static and quantize_structure call), their int8 weights,
  // scales and biases move into one tensor each, [q; k; v] by rows, of which each Linear keeps a
  // view: the same names and shapes in the state dict, and loads write through. A quantized
  // self-attention then quantizes x once and runs one int8 product (forward_packed), as the f32
  // one runs one GEMM. Nothing happens where the three differ (or for a reformer: no k_proj).
  void stack_quantized_projections();
  // Whether self-attention runs that one product: the input scale the three share (0: dynamic)
  // while their tensors are still the stacked rows and their modes and input scales agree; none
  // otherwise (then each projects on its own, as an f32 copy of it would).
  std::optional<double> stacked_input_scale() const;

  // [B, S, hidden] -> [B, heads, S, head_dim] (a view) and back (a copy).
  Tensor split_heads(const Tensor& x) const;
  Tensor merge_heads(const Tensor& x) const;

  std::shared_ptr<Linear> q_proj, k_proj, v_proj, o_proj;
  // T5's bias table [buckets, heads], as Hugging Face's T5Attention names it (there only the
  // first layer has one, shared by all; here every attention learns its own).
  std::shared_ptr<Embedding> relative_attention_bias;
  std::shared_ptr<Embedding> relative_key;  // shaw: a^K [2 clip + 1, head_dim]
  Tensor proj_k, proj_v;      // linformer
  Tensor projection_matrix;   // performer
  Tensor random_rotations;    // reformer (k_proj is null: shared QK)
  int64_t hidden, heads, head_dim;
  double dropout;
  AttentionSpec spec;
  bool use_fused = true;  // false: always the explicit path (the readable reference)

 private:
  // The steps of forward's attention on projected heads [B, heads, S, head_dim]: attend picks the
  // path and returns (context, weights: defined on the explicit path only).
  std::pair<Tensor, Tensor> attend(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& head_mask, bool is_causal, double dropout_p,
                                   bool need_weights) const;
  std::pair<Tensor, Tensor> explicit_heads(const Tensor& q, const Tensor& k, const Tensor& v,
                                           const Tensor& head_mask, bool is_causal,
                                           double dropout_p) const;

  // The variants (nn/attention_variants.cpp). register_variant checks the spec's kind and position
  // against the sizes and registers their tensors; register_relative_positions those of t5, shaw.
  void register_variant(DType dtype);
  void register_relative_positions(DType dtype);
  Tensor approximate_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& head_mask, bool is_causal, double dropout_p) const;
  // T5's [heads, Sq + Sk - 1] bias for the fused kernel (causal buckets when is_causal), or
  // undefined for any other position.
  Tensor t5_bias(int64_t sq, int64_t sk, bool is_causal) const;
  // Every bias the explicit path adds to the scores, [.., Sq, Sk] (ALiBi, T5, Shaw), or undefined.
  Tensor explicit_bias(const Tensor& q, int64_t sk, bool is_causal) const;

  // Optimisation (nn/attention_packed.cpp; self-attention on the CPU): q, k, v from one GEMM,
  // attended where it left them; the same attention as forward's four projections.
  // packs_projections says when.
  AttentionOutput forward_packed(const Tensor& x, const Tensor& head_mask, bool is_causal,
                                 double dropout_p) const;
  bool packs_projections(const Tensor& query, const Tensor& key, const Tensor& value,
                         bool need_weights) const;
  // int8: [q; k; v] (stack_quantized_projections, nn/attention_int8.cpp).
  QuantizedRows stacked_weight;
  Tensor stacked_bias;

  // Incremental decoding (nn/attention_cached.cpp). forward_cached's attention of the newest
  // position p = Sk - 1 (q [B, heads, 1, head_dim]) over the cached k, v [B, heads, Sk, head_dim]:
  // the layout's row p as a mask, the position biases of row p.
  Tensor attend_newest(const Tensor& q, const Tensor& k, const Tensor& v) const;
  // The bias row p = sk - 1 adds to its scores by relative position, [heads, sk] (ALiBi's
  // slope (j - p), T5's buckets of j - p), or undefined for any other position.
  Tensor newest_row_bias(int64_t sk, DType dtype, Device device) const;
};

// The variants as modules of their own, named as the papers' reference code names them: each is
// a MultiHeadAttention with its spec (the CLI's models build that spec from --attention).
class LinformerAttention : public MultiHeadAttention {
 public:
  // proj_k, proj_v [max_len, rank]: sequences up to max_len.
  LinformerAttention(int64_t hidden, int64_t heads, int64_t max_len, int64_t rank,
                     double dropout = 0.0, DType dtype = DType::f32)
      : MultiHeadAttention(hidden, heads, dropout, dtype,
                           {.kind = AttentionKind::linformer, .rank = rank, .max_len = max_len}) {}
};

class PerformerAttention : public MultiHeadAttention {
 public:
  // projection_matrix [features, head_dim], drawn from `seed` (redraw_features draws again).
  // dropout > 0 is an error in training (FAVOR+ forms no attention weights to drop).
  PerformerAttention(int64_t hidden, int64_t heads, int64_t features, uint64_t seed,
                     double dropout = 0.0, DType dtype = DType::f32)
      : MultiHeadAttention(hidden, heads, dropout, dtype,
                           {.kind = AttentionKind::performer, .features = features, .seed = seed}) {}
};

class ReformerAttention : public MultiHeadAttention {
 public:
  // random_rotations [rounds, head_dim, buckets / 2], drawn from `seed`; self-attention only.
  ReformerAttention(int64_t hidden, int64_t heads, int64_t buckets, int64_t rounds, uint64_t seed,
                    double dropout = 0.0, DType dtype = DType::f32)
      : MultiHeadAttention(hidden, heads, dropout, dtype,
                           {.kind = AttentionKind::reformer, .buckets = buckets, .rounds = rounds,
                            .seed = seed}) {}
};

// The explicit path on already projected heads: softmax(q k^T * scale + bias, masked) -> dropout
// -> @ v. bias (may be undefined) broadcasts to the scores. Returns (context [.., Sq, d],
// weights [.., Sq, Sk]).
std::pair<Tensor, Tensor> explicit_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const Tensor& mask, bool is_causal, double dropout_p,
                                             const Tensor& bias = Tensor());

}  // namespace tg::nn
