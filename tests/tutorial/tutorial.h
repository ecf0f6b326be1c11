#pragma once
// The classic PyTorch attention tutorial (tutorial.py beside this file) in C++, line for line,
// with tapegrad's PyTorch names: a part here is the part of the same name there, and
// test_tutorial.cpp holds each within 1.2x of its Python lines. This folder mirrors that
// tutorial, not a folder of the source tree. docs/tutorial.md maps every name used.
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "tapegrad/tapegrad.h"

namespace tutorial {

using namespace tg;

// part: MultiHeadAttention
struct MultiHeadAttention : nn::ModuleOf<MultiHeadAttention> {
  int64_t d_model, num_heads, d_k;
  std::shared_ptr<nn::Linear> W_q, W_k, W_v, W_o;
  std::shared_ptr<nn::Dropout> dropout;
  MultiHeadAttention(int64_t d_model, int64_t num_heads, double dropout = 0.1)
      : d_model(d_model), num_heads(num_heads) {
    TG_CHECK(num_heads > 0 && d_model % num_heads == 0, "d_model must be divisible by num_heads");
    d_k = d_model / num_heads;
    W_q = register_module("W_q", std::make_shared<nn::Linear>(d_model, d_model));
    W_k = register_module("W_k", std::make_shared<nn::Linear>(d_model, d_model));
    W_v = register_module("W_v", std::make_shared<nn::Linear>(d_model, d_model));
    W_o = register_module("W_o", std::make_shared<nn::Linear>(d_model, d_model));
    this->dropout = register_module("dropout", std::make_shared<nn::Dropout>(dropout));
  }
  Tensor scaled_dot_product_attention(Tensor Q, Tensor K, Tensor V, Tensor mask) const {
    Tensor attn_scores = matmul(Q, K.transpose(-2, -1)) / std::sqrt(d_k);
    if (mask.defined()) attn_scores = masked_fill(attn_scores, mask == 0, -1e9);
    Tensor attn_probs = dropout->forward(softmax(attn_scores, -1));
    Tensor output = matmul(attn_probs, V);
    return output;
  }
  Tensor split_heads(const Tensor& x) const {
    const int64_t batch_size = x.size(0), seq_length = x.size(1);
    return x.view({batch_size, seq_length, num_heads, d_k}).transpose(1, 2);
  }
  Tensor combine_heads(const Tensor& x) const {
    const int64_t batch_size = x.size(0), seq_length = x.size(2);
    return x.transpose(1, 2).contiguous().view({batch_size, seq_length, d_model});
  }
  Tensor forward(Tensor Q, Tensor K, Tensor V, const Tensor& mask = Tensor()) const {
    Q = split_heads(W_q->forward(Q));
    K = split_heads(W_k->forward(K));
    V = split_heads(W_v->forward(V));
    Tensor attn_output = scaled_dot_product_attention(Q, K, V, mask);
    Tensor output = W_o->forward(combine_heads(attn_output));
    return output;
  }
};

// part: PositionalEncoding
struct PositionalEncoding : nn::ModuleOf<PositionalEncoding> {
  Tensor pe;
  PositionalEncoding(int64_t d_model, int64_t max_len = 5000) {
    Tensor pe = zeros({max_len, d_model});
    Tensor position = arange(0, max_len).unsqueeze(1);
    Tensor div_term = exp(arange(0, d_model, 2) * -(std::log(10000.0) / d_model));
    pe.slice(1, 0, INT64_MAX, 2).copy_(sin(position * div_term));
    pe.slice(1, 1, INT64_MAX, 2).copy_(cos(position * div_term));
    this->pe = register_buffer("pe", pe.unsqueeze(0));
  }
  Tensor forward(const Tensor& x) const { return x + pe.slice(1, 0, x.size(1)); }
};

// part: TextClassifier
struct TextClassifier : nn::ModuleOf<TextClassifier> {
  int64_t pad_idx;
  bool use_checkpoint = false;
  std::shared_ptr<nn::Embedding> embedding;
  std::shared_ptr<PositionalEncoding> pos_encoding;
  std::shared_ptr<MultiHeadAttention> mha;
  std::shared_ptr<nn::Linear> fc;
  TextClassifier(int64_t vocab_size, int64_t d_model, int64_t num_heads, int64_t num_classes,
                 int64_t pad_idx = 0, int64_t max_len = 512) : pad_idx(pad_idx) {
    embedding = register_module("embedding", std::make_shared<nn::Embedding>(vocab_size, d_model));
    pos_encoding = register_module("pos_encoding", std::make_shared<PositionalEncoding>(d_model, max_len));
    mha = register_module("mha", std::make_shared<MultiHeadAttention>(d_model, num_heads));
    fc = register_module("fc", std::make_shared<nn::Linear>(d_model, num_classes));
  }
  Tensor forward(const Tensor& tokens) const {
    Tensor mask = (tokens != pad_idx).unsqueeze(1).unsqueeze(2);
    Tensor x = pos_encoding->forward(embedding->forward(tokens));
    x = use_checkpoint ? checkpoint(mha, x, x, x, mask) : mha->forward(x, x, x, mask);
    Tensor keep = (tokens != pad_idx).unsqueeze(-1).to(x.dtype());
    Tensor pooled = sum(x * keep, {1}) / sum(keep, {1});
    return fc->forward(pooled);
  }
};

// part: TimeSeriesModel
struct TimeSeriesModel : nn::ModuleOf<TimeSeriesModel> {
  std::shared_ptr<nn::Linear> input_proj, output;
  std::shared_ptr<PositionalEncoding> pos_encoding;
  std::shared_ptr<MultiHeadAttention> mha;
  TimeSeriesModel(int64_t input_dim, int64_t d_model, int64_t num_heads, int64_t output_dim,
                  int64_t max_len = 512) {
    input_proj = register_module("input_proj", std::make_shared<nn::Linear>(input_dim, d_model));
    pos_encoding = register_module("pos_encoding", std::make_shared<PositionalEncoding>(d_model, max_len));
    mha = register_module("mha", std::make_shared<MultiHeadAttention>(d_model, num_heads));
    output = register_module("output", std::make_shared<nn::Linear>(d_model, output_dim));
  }
  Tensor forward(Tensor x) const {
    const int64_t seq_len = x.size(1);
    Tensor mask = triu(ones({seq_len, seq_len}, DType::f32, x.device()), 1) == 0;
    x = pos_encoding->forward(input_proj->forward(x));
    x = mha->forward(x, x, x, mask);
    return output->forward(x.select(1, -1));
  }
};

// part: training
template <typename Model>
std::vector<double> train(Model& model, const Tensor& tokens, const Tensor& labels, int steps) {
  AdamW optimizer(model.parameters(), /*lr=*/1e-3);
  GradScaler scaler;
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    optimizer.zero_grad();
    Autocast autocast(DType::bf16);  // to the end of the step (backward() runs without it)
    Tensor loss = cross_entropy(model(tokens), labels);
    if (isnan(loss).item()) continue;
    scaler.scale(loss).backward();
    scaler.unscale(optimizer);
    clip_grad_norm(model.parameters(), /*max_norm=*/1.0);
    scaler.step(optimizer);
    scaler.update();
    losses.push_back(loss.item());
  }
  return losses;
}
// end of parts

}  // namespace tutorial
