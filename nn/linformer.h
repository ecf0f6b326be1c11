#pragma once
// Linformer (Wang et al. 2020): keys and values projected along the sequence to `rank` rows by
// learned E and F, so attention costs O(S rank) instead of O(S^2):
//   softmax(q (E^T k)^T / sqrt(d)) (F^T v),   E = proj_k[:Sk], F = proj_v[:Sk]   ([Sk, rank]).
// MultiHeadAttention owns proj_k and proj_v (the names of the reference implementation) and calls
// this on its split heads.
#include "tapegrad/autograd/tensor.h"

namespace tg::nn {

// q [B, H, Sq, d], k [B, H, Sk, d], v [B, H, Sk, dv]; proj_k, proj_v [max_len, rank], Sk <= max_len.
// key_padding: bool [B, Sk] (true = a real key) or undefined; padded keys and values are zeroed
// before the projection. Causal attention is a tg::Error: projecting along the sequence mixes every
// position into every row. dropout_p applies to the [Sq, rank] weights. Returns [B, H, Sq, dv].
Tensor linformer_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& proj_k,
                           const Tensor& proj_v, const Tensor& key_padding, bool is_causal,
                           double dropout_p);

// E and F at construction: U(-1/sqrt(rank), 1/sqrt(rank)) from the global generator, [max_len, rank].
Tensor linformer_projection(int64_t max_len, int64_t rank, DType dtype = DType::f32);

}  // namespace tg::nn
