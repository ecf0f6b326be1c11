#pragma once
// The basic layers, each a thin Module over one op: Linear, Dropout, Embedding, LayerNorm, and
// the two-layer MLP of a transformer block.
#include <functional>

#include "tapegrad/nn/module.h"

namespace tg::nn {

// How a Linear computes (nn/quantization.h): in floating point, or in int8 with its input quantized
// per row at run time (dynamic) or with one calibrated scale (static).
enum class QuantMode { none, dynamic, static_ };

class Linear : public Module {
 public:
  // weight (out, in) and bias (out), both uniform in +-1/sqrt(in) as PyTorch initialises them.
  Linear(int64_t in_features, int64_t out_features, bool bias = true, DType dtype = DType::f32);
  // x W^T + b; quantized: tg::quantized_linear (inference only: a tg::Error when a gradient could
  // be asked of it, i.e. with the tape on and the input requiring grad or the module training).
  Tensor forward(const Tensor& x) const;

  // int8 inference, in place (what nn::quantize_dynamic / quantize_static call). The f32 parameter
  // `weight` leaves parameters() and state_dict(); in its place come the buffers
  //   weight        i8  [out, in]   round(W / weight_scale), per output row (symmetric)
  //   weight_scale  f32 [out]       max_in |W_o,in| / 127
  //   bias          f32 [out]       unchanged, now a buffer (nothing is trained any more)
  //   input_scale   f32 []          static only: the calibrated scale of every input row
  // `input_scale` must be finite and > 0 for static (ignored for dynamic). Once only: a quantized
  // Linear cannot be quantized again (tg::Error).
  void quantize(QuantMode mode, double input_scale = 0);
  QuantMode quantization() const { return quantization_; }
  int64_t in_features() const { return weight.size(1); }
  int64_t out_features() const { return weight.size(0); }

  Tensor weight, bias;
  Tensor weight_scale, input_scale;  // defined once quantized (input_scale: static only)
  // Called with every input forward() sees while set (quantize_static's calibration observers).
  std::function<void(const Tensor&)> input_observer;

 private:
  QuantMode quantization_ = QuantMode::none;
};

// "none", "dynamic", "static" and back; anything else is a tg::Error listing the three.
const char* quant_mode_name(QuantMode mode);
QuantMode parse_quant_mode(const std::string& name);

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) const;  // identity in eval()
  double p;
};

class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t dim, DType dtype = DType::f32);  // weight ~ N(0, 1)
  Tensor forward(const Tensor& indices) const;
  Tensor weight;
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5, DType dtype = DType::f32);  // weight 1, bias 0
  Tensor forward(const Tensor& x) const;
  Tensor weight, bias;
  double eps;
};

enum class Activation { gelu, relu };

// linear1 -> activation -> linear2, as the feed-forward half of a transformer layer.
class MLP : public Module {
 public:
  MLP(int64_t dim, int64_t hidden, Activation activation = Activation::gelu, DType dtype = DType::f32);
  Tensor forward(const Tensor& x) const;
  std::shared_ptr<Linear> linear1, linear2;
  Activation activation;
};

}  // namespace tg::nn
