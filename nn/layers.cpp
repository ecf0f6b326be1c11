#include "tapegrad/nn/layers.h"

#include <cmath>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/ops/ops.h"
#include "tapegrad/ops/quantize.h"

namespace tg::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool with_bias, DType dtype) {
  TG_CHECK(in_features > 0 && out_features > 0, "Linear: sizes must be positive, got in=",
           in_features, " out=", out_features);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  weight = register_parameter("weight", uniform({out_features, in_features}, -bound, bound, dtype));
  if (with_bias) bias = register_parameter("bias", uniform({out_features}, -bound, bound, dtype));
}

Tensor Linear::forward(const Tensor& x) const {
  if (input_observer) input_observer(x);
  if (quantization_ == QuantMode::none) return linear(x, weight, bias);
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

Dropout::Dropout(double p) : p(p) {
  TG_CHECK(p >= 0 && p <= 1, "Dropout: p must be in [0, 1], got ", p);
}

Tensor Dropout::forward(const Tensor& x) const { return dropout(x, p, is_training()); }

Embedding::Embedding(int64_t num_embeddings, int64_t dim, DType dtype) {
  TG_CHECK(num_embeddings > 0 && dim > 0, "Embedding: sizes must be positive, got ", num_embeddings,
           " x ", dim);
  weight = register_parameter("weight", randn({num_embeddings, dim}, dtype));
}

Tensor Embedding::forward(const Tensor& indices) const { return embedding(indices, weight); }

LayerNorm::LayerNorm(int64_t dim, double eps, DType dtype) : eps(eps) {
  TG_CHECK(dim > 0, "LayerNorm: dim must be positive, got ", dim);
  weight = register_parameter("weight", ones({dim}, dtype));
  bias = register_parameter("bias", zeros({dim}, dtype));
}

Tensor LayerNorm::forward(const Tensor& x) const {
  return layer_norm(x, {weight.size(0)}, weight, bias, eps);
}

MLP::MLP(int64_t dim, int64_t hidden, Activation activation, DType dtype) : activation(activation) {
  linear1 = register_module("linear1", std::make_shared<Linear>(dim, hidden, true, dtype));
  linear2 = register_module("linear2", std::make_shared<Linear>(hidden, dim, true, dtype));
}

Tensor MLP::forward(const Tensor& x) const {
  const Tensor h = linear1->forward(x);
  return linear2->forward(activation == Activation::gelu ? gelu(h) : relu(h));
}

}  // namespace tg::nn
