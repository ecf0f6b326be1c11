#include "tapegrad/nn/layers.h"

#include <cmath>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/ops/ops.h"

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
  if (quantization_ != QuantMode::none) return forward_int8(x);  // nn/layers_int8.cpp
  return linear(x, weight, bias);
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
