// stacked_linear: the linears of one input as one GEMM each way, an optimisation of linear
// (ops/matmul.cpp) that self-attention's packed path runs (nn/attention_packed.cpp).
#include "tapegrad/ops/stacked_linear.h"

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/op_registry.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/ops/linear_grads.h"
#include "tapegrad/ops/matmul.h"
#include "tapegrad/ops/views.h"
#include "tapegrad/runtime/autocast.h"

namespace tg {

namespace {

// The operands as the op records them: under autocast cast on the tape, as linear's, so that the
// gradients reach the f32 ones.
struct StackedOperands {
  Tensor x;
  std::vector<Tensor> weights, biases;  // biases: none, or one per weight
};

// The operands cast, with one or more weights, each 2-D, and no bias or a defined one for each;
// a tg::Error naming the first that is not. Their shapes against each other are cat's and
// linear's to check.
StackedOperands checked_operands(const Tensor& x_in, const std::vector<Tensor>& weights_in,
                                 const std::vector<Tensor>& biases_in) {
  const size_t n = weights_in.size();
  TG_CHECK(n > 0 && (biases_in.empty() || biases_in.size() == n), "op 'stacked_linear': ", n,
           " weights and ", biases_in.size(), " biases (expected one or more weights, and no bias or one each)");
  StackedOperands cast{autocast_to_half(x_in), {}, {}};
  std::vector<Tensor>& weights = cast.weights;
  std::vector<Tensor>& biases = cast.biases;
  for (size_t i = 0; i < n; ++i) {
    weights.push_back(autocast_to_half(weights_in[i]));
    TG_CHECK(weights[i].defined() && weights[i].dim() == 2, "op 'stacked_linear': weight ", i,
             " must be 2-D (out, in)");
    if (!biases_in.empty()) {
      biases.push_back(autocast_to_half(biases_in[i]));
      TG_CHECK(biases[i].defined(), "op 'stacked_linear': bias ", i, " is undefined");
    }
  }
  return cast;
}

std::vector<Tensor> detached_all(const std::vector<Tensor>& tensors) {
  std::vector<Tensor> out;
  for (const Tensor& t : tensors) out.push_back(t.detach());
  return out;
}

}  // namespace

Tensor stacked_linear(const Tensor& x_in, const std::vector<Tensor>& weights_in,
                      const std::vector<Tensor>& biases_in) {
  const auto [x, weights, biases] = checked_operands(x_in, weights_in, biases_in);
  const size_t n = weights.size();
  std::vector<int64_t> rows;  // out features of each linear
  for (const Tensor& weight : weights) rows.push_back(weight.size(0));
  Tensor out;
  {
    NoGrad no_grad;  // cat's checks give each mismatch its error; linear checks x against them
    const Tensor bias = biases.empty() ? Tensor() : cat(detached_all(biases), 0);
    out = linear(x.detach(), cat(detached_all(weights), 0), bias);
  }
  std::vector<Tensor> inputs{x}, saved{x};
  inputs.insert(inputs.end(), weights.begin(), weights.end());
  inputs.insert(inputs.end(), biases.begin(), biases.end());
  saved.insert(saved.end(), weights.begin(), weights.end());
  // y = x W^T + b with W, b stacked:  dx = G W,  dW = G^T x,  db = sum of G over rows; dW_i and
  // db_i are the rows of dW and db where W_i and b_i went
  record("stacked_linear", inputs, out, std::move(saved),
         [n, rows, with_bias = !biases.empty()](const Tensor& g, const Node& node) {
           Grads grads(node.saved.size() + (with_bias ? n : 0));
           bool weight_grads = false, bias_grads = false;
           for (size_t i = 0; i < n; ++i) {
             weight_grads |= node.needs_grad(1 + i);
             bias_grads |= with_bias && node.needs_grad(1 + n + i);
           }
           const std::vector<Tensor> stacked(node.saved.begin() + 1, node.saved.end());
           const Tensor weight = node.needs_grad(0) ? cat(stacked, 0) : Tensor();  // for dx only
           const LinearGrads both = linear_grads(as_rows(g), as_rows(node.saved[0]), weight,
                                                 node.needs_grad(0), weight_grads, bias_grads);
           if (node.needs_grad(0)) grads[0] = both.dx.view(node.saved[0].shape());
           const Tensor& dw = both.dw;
           const Tensor& db = both.db;
           int64_t start = 0;
           for (size_t i = 0; i < n; ++i) {
             if (node.needs_grad(1 + i)) grads[1 + i] = dw.narrow(0, start, rows[i]);
             if (with_bias && node.needs_grad(1 + n + i)) {
               grads[1 + n + i] = db.narrow(0, start, rows[i]);
             }
             start += rows[i];
           }
           return grads;
         });
  return out;
}

// The name this file's op records on the tape (autograd/op_registry.h).
const OpRegistration stacked_linear_ops({"stacked_linear"});

}  // namespace tg
