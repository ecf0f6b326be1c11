// int8 self-attention in one product: q_proj, k_proj and v_proj's int8 tensors kept as the rows
// of one [q; k; v] tensor each, so that forward_packed quantizes x once and multiplies it by all
// three weights at once (nn/attention.h, stack_quantized_projections). Three separate products
// would quantize the same x three times, with the same scales (a row's scale depends on x alone).
#include <vector>

#include "tapegrad/autograd/tape.h"
#include "tapegrad/nn/attention.h"
#include "tapegrad/ops/views.h"

namespace tg::nn {
namespace {

// Whether `parts` are, in order, the consecutive rows of `whole` (one storage, contiguous, no gap)
// and each has whole's dtype and row width.
bool rows_of(const Tensor& whole, const std::vector<Tensor>& parts) {
  if (!whole.defined() || !whole.is_contiguous()) return false;
  int64_t offset = whole.offset();
  for (const Tensor& part : parts) {
    if (!part.defined() || part.storage() != whole.storage() || part.offset() != offset ||
        !part.is_contiguous() || part.dtype() != whole.dtype() || part.dim() != whole.dim() ||
        (part.dim() == 2 && part.size(1) != whole.size(1))) {
      return false;
    }
    offset += part.numel();
  }
  return offset == whole.offset() + whole.numel();
}

}  // namespace

void MultiHeadAttention::stack_quantized_projections() {
  if (!k_proj) return;  // a reformer: shared QK
  const std::vector<Linear*> projections = {q_proj.get(), k_proj.get(), v_proj.get()};
  const QuantMode mode = q_proj->quantization();
  for (const Linear* p : projections) {
    if (mode == QuantMode::none || p->quantization() != mode ||
        p->bias.defined() != q_proj->bias.defined() ||
        p->in_features() != q_proj->in_features()) {
      return;
    }
  }
  NoGrad no_grad;
  // One member of the three Linears as [q; k; v], each Linear's tensor made a view of its rows
  // (in place, Module::replace_in_place: the state dict keeps its entries and their order).
  const auto stack = [&](Tensor Linear::*member) {
    std::vector<Tensor> parts;
    for (const Linear* p : projections) parts.push_back(p->*member);
    const Tensor whole = cat(parts, 0);
    int64_t first = 0;
    for (Linear* p : projections) {
      const Tensor part = p->*member;
      const Tensor rows = whole.narrow(0, first, part.size(0));
      first += part.size(0);
      p->replace_in_place([&](const Tensor& t) { return t.same(part) ? rows : Tensor(); });
    }
    return whole;
  };
  stacked_weight = {stack(&Linear::weight), stack(&Linear::weight_scale)};
  stacked_bias = q_proj->bias.defined() ? stack(&Linear::bias) : Tensor();
}

std::optional<double> MultiHeadAttention::stacked_input_scale() const {
  if (!k_proj || !stacked_weight.values.defined()) return std::nullopt;
  const QuantMode mode = q_proj->quantization();
  std::vector<Tensor> weights, scales, biases;
  for (const auto& p : {q_proj, k_proj, v_proj}) {
    if (p->quantization() != mode || p->input_observer) return std::nullopt;
    weights.push_back(p->weight);
    scales.push_back(p->weight_scale);
    if (stacked_bias.defined()) biases.push_back(p->bias);
  }
  if (!rows_of(stacked_weight.values, weights) || !rows_of(stacked_weight.scales, scales) ||
      (stacked_bias.defined() && !rows_of(stacked_bias, biases))) {
    return std::nullopt;
  }
  if (mode != QuantMode::static_) return 0.0;
  // static: one input scale for the one quantized x (the three observers calibrated on the same
  // x agree; a load may have made them differ)
  const double scale = q_proj->input_scale.item();
  if (k_proj->input_scale.item() != scale || v_proj->input_scale.item() != scale) return std::nullopt;
  return scale;
}

}  // namespace tg::nn
