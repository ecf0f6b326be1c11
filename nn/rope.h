#pragma once
// Rotary position embedding (RoPE, Su et al. 2021), the half-split convention of GPT-NeoX and
// LLaMA: channel pairs (c, c + d/2) of position p are rotated by the angle p * 10000^(-2c/d),
//   rope(x)[c] = x[c] cos - x[c + d/2] sin,   rope(x)[c + d/2] = x[c + d/2] cos + x[c] sin.
// MultiHeadAttention applies it to q and k after the projections, so scores depend on i - j only.
#include <cstdint>

#include "tapegrad/autograd/tensor.h"

namespace tg::nn {

// x [..., S, d] with d even; position of row s is offset + s. Taped (its backward is the inverse
// rotation applied to the gradient).
Tensor apply_rope(const Tensor& x, int64_t offset = 0);

}  // namespace tg::nn
