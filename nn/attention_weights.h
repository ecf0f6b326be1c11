#pragma once
// The attention weights a MultiHeadAttention applies to its values, one [Sq, Sk] matrix a head,
// for every kind of attention, including those that never form it: what `tapegrad plot
// attention` draws. Linformer, Performer and Reformer compute their output without the matrix;
// here the matrix their approximation implies is computed explicitly (O(S^2)), so that for every
// kind the output before o_proj is weights @ v, head by head (docs/attention.md, "Seeing the
// weights").
#include "tapegrad/nn/attention.h"

namespace tg::nn {

// Performer's implied attention (FAVOR+, nn/performer.h): A_ij = phi(q_i) . phi(k_j) / sum over
// j' of phi(q_i) . phi(k_j'), the sums over j <= i when causal. q [.., Sq, d], k [.., Sk, d],
// projection [M, d] -> [.., Sq, Sk]: rows sum to 1 (a query that sees no feature mass gets a row
// of zeros, as performer_attention gives it output 0), and A @ v is performer_attention's output.
Tensor performer_implied_weights(const Tensor& q, const Tensor& k, const Tensor& projection,
                                 bool is_causal);

// Linformer's implied attention over the positions (nn/linformer.h): with E = proj_k[:Sk] and
// F = proj_v[:Sk], out = softmax(q (E^T k)^T / sqrt(d)) (F^T v) = A v with
// A = softmax(q (E^T k)^T / sqrt(d)) F^T. q [.., Sq, d], k [.., Sk, d] -> A [.., Sq, Sk]. The
// softmax weights are over the rank projected keys; A spreads them back over the positions, so
// its entries may be negative and its rows need not sum to 1.
Tensor linformer_implied_weights(const Tensor& q, const Tensor& k, const Tensor& proj_k,
                                 const Tensor& proj_v);

// Reformer's implied attention (nn/reformer.h): once q has picked the buckets, LSH attention is
// linear in the values, out = A v, so A is its output with the identity matrix as the values:
// each round's chunk softmax spread back over the positions and the rounds combined with their
// log-sum-exp weights. q [B, H, S, d], rotations [R, d, B/2] -> [B, H, S, S]; rows sum to 1, and
// a key that shares no chunk with a query gets 0.
Tensor reformer_implied_weights(const Tensor& q, const Tensor& rotations, bool is_causal);

struct SelfAttentionWeights {
  Tensor weights;        // [B, heads, S, S]
  bool implied = false;  // Linformer, Performer, Reformer: computed here, never formed in forward
};

// The weights of `mha` attending from x [B, S, hidden] to itself, as forward(x, x, x, mask,
// need_weights, is_causal) would apply them: forward's own weights for full and sparse attention,
// the implied ones above for Linformer, Performer and Reformer (which take no mask here: a
// tg::Error).
SelfAttentionWeights self_attention_weights(const MultiHeadAttention& mha, const Tensor& x,
                                            const Tensor& mask, bool is_causal);

}  // namespace tg::nn
