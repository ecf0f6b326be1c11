#pragma once
// Fused, memory-efficient scaled dot-product attention, as one tape node:
//   softmax(scale * Q K^T, masked) V   with dropout on the probabilities.
// Same meaning as torch.nn.functional.scaled_dot_product_attention: a bool mask with true =
// "may attend", is_causal for a top-left causal mask, scale defaulting to 1/sqrt(d).
// A query row that may attend nothing gives output 0 and gradient 0 (PyTorch gives NaN).
#include <optional>

#include "tapegrad/autograd/attention_layout.h"
#include "tapegrad/autograd/tensor.h"

namespace tg {

// q [..., Sq, d], k [..., Sk, d], v [..., Sk, dv] with the same leading dims; mask broadcastable
// to [..., Sq, Sk]. Dropout draws from the global Philox generator. `sparsity` restricts the keys
// each query sees (autograd/attention_layout.h) and skips the tiles it rules out; `alibi` adds
// ALiBi's bias, with heads the dim before Sq (q [..., H, Sq, d]). relative_bias [H, Sq + Sk - 1],
// when defined, adds a bias by relative position inside the kernel: score (i, j) of head h gets
// relative_bias[h, j - i + Sq - 1] (T5's learned buckets, looked up per offset:
// nn/relative_position.h); its gradient is dS summed along each diagonal j - i and over the batch.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& mask = Tensor(), bool is_causal = false,
                                    double dropout_p = 0.0, std::optional<double> scale = {},
                                    const SparsityLayout& sparsity = {}, bool alibi = false,
                                    const Tensor& relative_bias = Tensor());

// Self-attention on one packed projection: qkv [B, S, 3 hidden] holds q, k and v side by side in
// its last dim (x [Wq; Wk; Wv]^T, one GEMM), each hidden = heads x head_dim; the result is the
// [B, heads, S, head_dim] of scaled_dot_product_attention on the three slices, with the same
// options (mask broadcastable to [B, heads, S, S]). On the CPU the kernel reads the slices in
// place and the gradient comes back as one [B, S, 3 hidden] tensor, so that the projection's
// backward is one GEMM each for dx and dW; elsewhere it runs on the slices.
Tensor packed_self_attention(const Tensor& qkv, int64_t heads, const Tensor& mask = Tensor(),
                             bool is_causal = false, double dropout_p = 0.0,
                             std::optional<double> scale = {}, const SparsityLayout& sparsity = {},
                             bool alibi = false, const Tensor& relative_bias = Tensor());

// The dense equivalents, for the explicit path and the tests: the layout as a bool mask [Sq, Sk]
// (true = may attend), and ALiBi's bias [H, Sq, Sk] (add it to the scores). The relative bias's
// dense form is relative_bias_dense (taped): [H, Sq + Sk - 1] -> [H, Sq, Sk].
Tensor sparsity_mask(const SparsityLayout& sparsity, int64_t sq, int64_t sk,
                     Device device = default_device());
Tensor alibi_bias(int64_t heads, int64_t sq, int64_t sk, DType dtype = DType::f32,
                  Device device = default_device());
Tensor relative_bias_dense(const Tensor& relative_bias, int64_t sq, int64_t sk);

}  // namespace tg
