// A Linear in int8 (nn/layers_int8.h): its weight quantized once, in place, and its forward as
// one int8 product, tg::quantized_linear.
#include <string>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/nn/layers.h"
#include "tapegrad/ops/quantize.h"

namespace tg::nn {

Tensor Linear::forward_int8(const Tensor& x) const {
  // The op refuses an input that requires grad; the module also refuses to be trained, with a
  // message that says which layer it is and what to do.
  TG_CHECK(!grad_enabled() || (!x.requires_grad() && !is_training()), "Linear(", in_features(), ", ",
           out_features(), ") is int8-quantized (", quant_mode_name(quantization_),
           ") and inference-only: ",
           x.requires_grad() ? "its input requires a gradient" : "it is in training mode",
           " (run it in eval() under tg::NoGrad; train the f32 model and quantize it afterwards)");
  const double fixed_scale = quantization_ == QuantMode::static_ ? input_scale.item() : 0.0;
  return quantized_linear(x, QuantizedRows{weight, weight_scale}, bias, fixed_scale);
}

void Linear::quantize(QuantMode mode, double fixed_input_scale) {
  TG_CHECK(quantization_ == QuantMode::none, "Linear(", in_features(), ", ", out_features(),
           ") is already quantized (", quant_mode_name(quantization_), ")");
  TG_CHECK(mode != QuantMode::none, "Linear::quantize: the mode must be dynamic or static");
  // Stored as f32: a static scale must be a normal f32 (as every scale, ops/quantize.h).
  TG_CHECK(mode != QuantMode::static_ ||
               (fixed_input_scale >= 0x1p-126 && fixed_input_scale <= 3.4028234663852886e38),
           "Linear::quantize: a static input scale must be a normal f32, in [2^-126, 3.4e38], got ",
           fixed_input_scale);
  NoGrad no_grad;
  const QuantizedRows q = quantize_weight(weight.detach());
  const Tensor f32_bias = bias.defined() ? bias.detach().to(DType::f32) : Tensor();
  unregister_parameter("weight");
  if (bias.defined()) unregister_parameter("bias");
  weight = register_buffer("weight", q.values);
  weight_scale = register_buffer("weight_scale", q.scales);
  if (f32_bias.defined()) bias = register_buffer("bias", f32_bias.contiguous());
  if (mode == QuantMode::static_) {
    input_scale = register_buffer("input_scale", scalar(fixed_input_scale, DType::f32, weight.device()));
  }
  quantization_ = mode;
}

const char* quant_mode_name(QuantMode mode) {
  switch (mode) {
    case QuantMode::none: return "none";
    case QuantMode::dynamic: return "dynamic";
    case QuantMode::static_: return "static";
  }
  return "?";
}

QuantMode parse_quant_mode(const std::string& name) {
  for (QuantMode mode : {QuantMode::none, QuantMode::dynamic, QuantMode::static_}) {
    if (name == quant_mode_name(mode)) return mode;
  }
  fail("unknown quantization '", name, "' (none, dynamic, static)");
}

}  // namespace tg::nn
