#pragma once
// Performer (Choromanski et al. 2021), FAVOR+: softmax attention approximated with M positive
// random features, phi(x) = exp(w_m . x' - |x'|^2 / 2) / sqrt(M) with x' = x / d^(1/4), so that
//   out_i = phi(q_i)^T (sum_j phi(k_j) v_j^T) / phi(q_i)^T (sum_j phi(k_j))   in O(S M d).
// MultiHeadAttention owns projection_matrix (the reference implementation's name), a buffer kept in
// the state_dict, redrawn only by performer_features with a new seed.
#include <cstdint>

#include "tapegrad/autograd/tensor.h"

namespace tg::nn {

// M x d orthogonal Gaussian features (blocks of d orthogonal rows, each scaled to a chi(d) norm),
// drawn from Philox(seed): the same seed gives the same matrix on every machine. The global
// generator is not used; block b does not depend on M (fewer features are a prefix of more).
Tensor performer_features(int64_t features, int64_t head_dim, uint64_t seed, DType dtype = DType::f32);

// log phi(x) + log sqrt(M) = x' W^T - |x'|^2 / 2 with x' = x d^(-1/4): x [.., S, d] and
// projection [M, d] -> [.., S, M] (the exponents of the features, before any shift).
Tensor performer_log_features(const Tensor& x, const Tensor& projection);

// Causal FAVOR+'s [.., Sq, Sk] matrix of phi(q_i) . phi(k_j) for j <= i (0 above the diagonal),
// each row scaled by a constant of its own that cancels in a ratio of row sums and that no later
// key sets: what causal performer_attention multiplies v by, before dividing by the row sums.
// q [.., Sq, d], k [.., Sk, d], projection [M, d], Sq and Sk >= 1.
Tensor performer_causal_kernel(const Tensor& q, const Tensor& k, const Tensor& projection);

// q [B, H, Sq, d], k [B, H, Sk, d], v [B, H, Sk, dv], projection [M, d]. key_padding: bool
// [B, Sk] (true = a real key) or undefined; padded keys get phi = 0, and a query that sees no real
// key gets 0. is_causal: out_i sums over j <= i only, through the masked [Sq, Sk] matrix
// phi(q) phi(k)^T (O(S^2 M): there is no cumsum op). The log-features are shifted before exp by
// detached maxima that cancel in the ratio: per query; for the keys one per head (non-causal), or
// in causal mode one per key, scaled back per row by the largest shift among the keys j <= i, so
// that nothing out_i computes reads a later key. Sq = 0 gives an empty output, Sk = 0 zeros.
// Returns [B, H, Sq, dv]. Under autocast q, k, v and projection are first cast to the
// autocast dtype (an f32 projection with half q, k, v is what a module gives there).
Tensor performer_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                           const Tensor& projection, const Tensor& key_padding, bool is_causal);

}  // namespace tg::nn
