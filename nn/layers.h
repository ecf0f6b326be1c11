#pragma once
// The basic layers, each a thin Module over one op: Linear, Dropout, Embedding, LayerNorm, and
// the two-layer MLP of a transformer block.
#include "tapegrad/nn/module.h"

namespace tg::nn {

class Linear : public Module {
 public:
  // weight (out, in) and bias (out), both uniform in +-1/sqrt(in) as PyTorch initialises them.
  Linear(int64_t in_features, int64_t out_features, bool bias = true, DType dtype = DType::f32);
  Tensor forward(const Tensor& x) const;
  Tensor weight, bias;
};

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
