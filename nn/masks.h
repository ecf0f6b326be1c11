#pragma once
// Attention masks. Convention: bool, true = "may attend" (as F.scaled_dot_product_attention).
// torch.nn.MultiheadAttention's bool masks mean the opposite (true = "masked out"): negate a
// PyTorch key_padding_mask / attn_mask before giving it to tapegrad.
#include <vector>

#include "tapegrad/autograd/tensor.h"

namespace tg::nn {

// [sq, sk]: query i may attend key j when j <= i (top-left aligned, as is_causal in PyTorch).
Tensor causal_mask(int64_t sq, int64_t sk, Device device = default_device());
// [B, 1, 1, max_len]: key j of sequence b may be attended when j < lengths[b].
Tensor padding_mask(const std::vector<int64_t>& lengths, int64_t max_len, Device device = default_device());
// Elementwise AND, broadcasting: e.g. causal [S, S] and padding [B, 1, 1, S] -> [B, 1, S, S].
Tensor combine_masks(const Tensor& a, const Tensor& b);

}  // namespace tg::nn
