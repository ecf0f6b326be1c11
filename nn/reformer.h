#pragma once
// Reformer (Kitaev et al. 2020): LSH attention with shared queries and keys. Keys are the
// queries normalised to unit length (k = q / |q|), hashed by R random rotations into B buckets
// each (bucket = argmax [k W_r ; -k W_r], W_r [d, B/2]); per round the positions are sorted by
// (bucket, position), cut into chunks of C, and each chunk attends to itself and the chunk before
// it. A query does not attend to its own position unless nothing else is there (score -1e5, not
// -inf; masked keys -1e9). Each round gives o_r and its log-sum-exp z_r per query; the rounds
// combine as o = sum_r softmax_r(z_r) o_r, which is softmax attention over all the rounds'
// candidates together (a key two rounds bring counts twice, as in the Trax and Hugging Face code).
// Causal attention cuts each bucket's run into chunks of its own and sees keys of the own bucket
// only, so that what a query sees never depends on later positions (docs/attention.md).
// Cost: O(S R C d) for the attention, O(S R B d) for the hash; docs/attention.md walks through it.
// MultiHeadAttention owns random_rotations [R, d, B/2], a buffer drawn from the spec's seed; a
// reformer has no k_proj (its keys are its queries).
#include <cstdint>

#include "tapegrad/autograd/tensor.h"

namespace tg::nn {

// The chunk length for S positions and B buckets: the paper's m = 2S/B (twice a bucket's average
// size) rounded up, at most 64 (the chunk length of the Trax and Hugging Face configs), so that
// for a fixed B the cost grows linearly in S.
int64_t reformer_chunk_length(int64_t seq, int64_t buckets);
inline constexpr int64_t kReformerMaxChunk = 64;

// R rotations [rounds, head_dim, buckets / 2] of independent N(0, 1) entries from Philox(seed)
// (round r takes normals [r d B/2, (r + 1) d B/2)): the same seed gives the same rotations on
// every machine; the global generator is not used. buckets must be even and >= 2.
Tensor reformer_rotations(int64_t rounds, int64_t head_dim, int64_t buckets, uint64_t seed,
                          DType dtype = DType::f32);

// Shared-QK keys: q / sqrt(|q|^2 + 1e-6) along the last dim (taped).
Tensor reformer_keys(const Tensor& q);

// The hash (untaped, no gradient): keys [.., S, d], rotations [R, d, B/2] ->
// i64 buckets [.., R, S], bucket = argmax over [keys W_r ; -keys W_r] (first maximum on a tie),
// taken 64 columns of W_r at a time when there are more, so memory is O(S R) for any B.
// The queries hash as their keys do: a positive scale does not move the argmax.
Tensor reformer_buckets(const Tensor& keys, const Tensor& rotations);

// LSH attention with the buckets given: q and v [B, H, S, d] (shared QK: keys come from q),
// buckets i64 [B, H, R, S] in [0, number of buckets). key_padding: bool [B, S] (true = a real
// key) or undefined. is_causal: a query sees keys at positions <= its own (original positions)
// in its own bucket, chunked per bucket (their chunks and candidates depend on no later position).
// S = 0 gives an empty output.
// chunk_length >= 1 (the last chunk of a round is padded with masked slots). dropout_p applies to
// each round's chunk weights. Returns [B, H, S, dv]. Differentiable in q and v; the buckets are
// constants (they are piecewise constant in q, so this is also reformer_attention's gradient).
Tensor lsh_attention(const Tensor& q, const Tensor& v, const Tensor& buckets,
                     const Tensor& key_padding, bool is_causal, int64_t chunk_length,
                     double dropout_p = 0.0);

// reformer_buckets(q, rotations), then lsh_attention with
// reformer_chunk_length(S, B) (chunk_length 0) or the given chunk length.
Tensor reformer_attention(const Tensor& q, const Tensor& v, const Tensor& rotations,
                          const Tensor& key_padding, bool is_causal, double dropout_p = 0.0,
                          int64_t chunk_length = 0);

}  // namespace tg::nn
