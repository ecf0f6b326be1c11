#pragma once
// The basic layers, each a thin Module over one op: Linear, Dropout, Embedding, LayerNorm, and
// the two-layer MLP of a transformer block.
#include <functional>

#include "tapegrad/nn/layers_int8.h"
#include "tapegrad/nn/module.h"

namespace tg::nn {

class Linear : public ModuleOf<Linear> {
 public:
  // weight (out, in) and bias (out), both uniform in +-1/sqrt(in) as PyTorch initialises them.
  Linear(int64_t in_features, int64_t out_features, bool bias = true, DType dtype = DType::f32);
  // x W^T + b (once quantized, the int8 product of nn/layers_int8.h).
  Tensor forward(const Tensor& x) const;
  int64_t in_features() const { return weight.size(1); }
  int64_t out_features() const { return weight.size(0); }

  Tensor weight, bias;
  // Called with every input forward() sees while set (quantize_static's calibration observers).
  std::function<void(const Tensor&)> input_observer;

  // int8 inference, in place (nn/layers_int8.h: what becomes of weight and bias; what
  // nn::quantize_dynamic / quantize_static call). `input_scale` must be finite and > 0 for static
  // (ignored for dynamic). Once only: a quantized Linear cannot be quantized again (tg::Error).
  void quantize(QuantMode mode, double input_scale = 0);
  QuantMode quantization() const { return quantization_; }
  Tensor weight_scale, input_scale;  // defined once quantized (input_scale: static only)

 private:
  Tensor forward_int8(const Tensor& x) const;  // forward once quantized (nn/layers_int8.cpp)
  QuantMode quantization_ = QuantMode::none;
};

class Dropout : public ModuleOf<Dropout> {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) const;  // identity in eval()
  double p;
};

class Embedding : public ModuleOf<Embedding> {
 public:
  Embedding(int64_t num_embeddings, int64_t dim, DType dtype = DType::f32);  // weight ~ N(0, 1)
  Tensor forward(const Tensor& indices) const;
  Tensor weight;
};

class LayerNorm : public ModuleOf<LayerNorm> {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5, DType dtype = DType::f32);  // weight 1, bias 0
  Tensor forward(const Tensor& x) const;
  Tensor weight, bias;
  double eps;
};

enum class Activation { gelu, relu };

// linear1 -> activation -> linear2, as the feed-forward half of a transformer layer.
class MLP : public ModuleOf<MLP> {
 public:
  MLP(int64_t dim, int64_t hidden, Activation activation = Activation::gelu, DType dtype = DType::f32);
  Tensor forward(const Tensor& x) const;
  std::shared_ptr<Linear> linear1, linear2;
  Activation activation;
};

}  // namespace tg::nn
