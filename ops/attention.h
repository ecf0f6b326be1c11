#pragma once
// Fused, memory-efficient scaled dot-product attention, as one tape node:
//   softmax(scale * Q K^T, masked) V   with dropout on the probabilities.
// Same meaning as torch.nn.functional.scaled_dot_product_attention: a bool mask with true =
// "may attend", is_causal for a top-left causal mask, scale defaulting to 1/sqrt(d).
// A query row that may attend nothing gives output 0 and gradient 0 (PyTorch gives NaN).
#include <optional>

#include "tapegrad/autograd/tensor.h"

namespace tg {

// q [..., Sq, d], k [..., Sk, d], v [..., Sk, dv] with the same leading dims; mask broadcastable
// to [..., Sq, Sk]. Dropout draws from the global Philox generator.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& mask = Tensor(), bool is_causal = false,
                                    double dropout_p = 0.0, std::optional<double> scale = {});

}  // namespace tg
