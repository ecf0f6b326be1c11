#pragma once
// Learned relative positions: what a score (i, j) adds, learned, as a function of j - i.
//
// T5 (Raffel et al. 2020, "Exploring the Limits of Transfer Learning", section 2.1): a scalar
// per head and bucket of j - i, table [num_buckets, heads], added to the scores. Buckets as
// Hugging Face's T5Attention._relative_position_bucket computes them: bidirectional (encoders)
// gives half the buckets to keys after the query; each half keeps max_exact = half / 2 exact
// distances and spreads the rest logarithmically up to max_distance, where the last bucket
// starts. Causal (unidirectional) buckets count only keys before the query.
// MultiHeadAttention adds it inside the fused kernel (ops/attention.h, relative_bias).
//
// Shaw, Uszkoreit and Vaswani 2018 ("Self-Attention with Relative Position Representations"):
// a learned key vector per clipped distance, a^K_{clip(j - i, -k, k)}, table [2k + 1, head_dim]
// shared by every head as in the paper; score (i, j) becomes q_i . (k_j + a^K) / sqrt(d). Only the
// key term: the paper's value term a^V is left out (its ablation, Table 4, lost nothing on
// translation without it). MultiHeadAttention takes the explicit path for it.
#include <cstdint>

#include "tapegrad/autograd/tensor.h"

namespace tg::nn {

// T5's bucket of relative_position = key position - query position (j - i), in [0, num_buckets).
// Arithmetic as PyTorch's: the log of the large distances in f32, truncated toward 0, then capped
// at num_buckets - 1. Needs num_buckets >= 4 and max_distance >= num_buckets (so that the log's
// range max_distance / max_exact exceeds 1); a tg::Error otherwise.
int64_t t5_relative_position_bucket(int64_t relative_position, bool bidirectional,
                                    int64_t num_buckets, int64_t max_distance);

// T5's bias of every offset j - i of a [Sq, Sk] score matrix, as the fused kernel takes it:
// [heads, Sq + Sk - 1], entry (h, j - i + Sq - 1) = table[bucket(j - i), h]. table [num_buckets,
// heads] (the module's relative_attention_bias.weight); taped (an embedding lookup), so the
// gradient reaches the table: the sum of dS over the pairs of each bucket. Query i stands at
// position i + query_offset (keys at 0..Sk-1): incremental decoding's newest row (Sq 1, offset p).
Tensor t5_relative_bias(const Tensor& table, int64_t sq, int64_t sk, bool bidirectional,
                        int64_t max_distance, int64_t query_offset = 0);

// Shaw's relative term of the scores, q_i . a^K_{clip(j - i)} for q [..., Sq, d] and table
// [2k + 1, d] (row r holds distance r - k): [..., Sq, Sk], unscaled. One product of q with the
// table's rows of the distances that occur (at most Sq + Sk - 1 of them, so cost and memory follow
// min(k, S), not k), then each (i, j) picks its distance's column (an embedding lookup); both
// taped. Query i stands at position i + query_offset, as in t5_relative_bias.
Tensor shaw_relative_logits(const Tensor& q, const Tensor& table, int64_t sk,
                            int64_t query_offset = 0);

}  // namespace tg::nn
