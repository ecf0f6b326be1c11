// MultiHeadAttention's packed self-attention (nn/attention.h): an optimisation beside forward,
// which takes it where packs_projections allows.
#include <vector>

#include "tapegrad/autograd/textbook.h"
#include "tapegrad/nn/attention.h"
#include "tapegrad/ops/ops.h"

namespace tg::nn {

// Optimisation: self-attention on one packed projection. Where packs_projections allows it (one
// tensor as query, key and value, on the CPU, with nothing between the projections and the
// kernel), q, k and v come from one GEMM against [Wq; Wk; Wv] (stacked_linear, a [B, S, 3 hidden]
// tensor) and packed_self_attention reads them where that GEMM left them. It saves two of the
// three projection GEMMs forward, and in backward two GEMMs for dx, two for dW and the sum of
// three input gradients; memory is that of three linears. It computes the same attention as
// forward's four projections (tests/nn/test_attention.cpp holds the two to each other).
// Quantized (int8) projections take the one product against [Wq; Wk; Wv] that
// stack_quantized_projections set up (nn/attention_int8.cpp).
AttentionOutput MultiHeadAttention::forward_packed(const Tensor& x, const Tensor& head_mask,
                                                   bool is_causal, double dropout_p) const {
  Tensor qkv;
  if (q_proj->quantization() != QuantMode::none) {
    qkv = quantized_linear(x, stacked_weight, stacked_bias, *stacked_input_scale());
  } else {
    std::vector<Tensor> biases;  // none, or all three
    if (q_proj->bias.defined()) biases = {q_proj->bias, k_proj->bias, v_proj->bias};
    qkv = stacked_linear(x, {q_proj->weight, k_proj->weight, v_proj->weight}, biases);
  }
  const bool alibi = spec.position == PositionKind::alibi;
  const int64_t seq = x.size(1);
  const Tensor context = packed_self_attention(qkv, heads, head_mask, is_causal, dropout_p, {},
                                               spec.sparsity(), alibi,
                                               t5_bias(seq, seq, is_causal));
  return {o_proj->forward(merge_heads(context)), Tensor()};
}

// Whether forward may take forward_packed: self-attention (one tensor as query, key and value)
// on the CPU with the fused path, plain projections of one dtype with or without bias alike (no
// calibration observer) or int8 ones stacked as one (stacked_input_scale), and no rotation of q
// and k, Shaw's q-dependent bias or low-rank attention in between. Never under tg::Textbook
// (autograd/textbook.h): the tutorial projects q, k and v one Linear each.
bool MultiHeadAttention::packs_projections(const Tensor& query, const Tensor& key,
                                           const Tensor& value, bool need_weights) const {
  if (!use_fused || textbook_mode() || need_weights || !query.same(key) || !key.same(value) ||
      query.device().type != DeviceType::cpu || spec.position == PositionKind::rope ||
      spec.position == PositionKind::shaw ||
      !spec.has_scores()) {  // linformer, performer, reformer
    return false;
  }
  if (q_proj->quantization() != QuantMode::none) return stacked_input_scale().has_value();
  for (const auto& projection : {q_proj, k_proj, v_proj}) {
    if (projection->quantization() != QuantMode::none || projection->input_observer ||
        projection->bias.defined() != q_proj->bias.defined() ||
        projection->weight.dtype() != q_proj->weight.dtype()) {
      return false;
    }
  }
  return true;
}

}  // namespace tg::nn
