#pragma once
// The linears of one input as one GEMM each way: an optimisation of linear (ops/matmul.h) for
// self-attention's q, k and v projections, which tests hold to linear on the stacked weights.
#include <vector>

#include "tapegrad/autograd/tensor.h"

namespace tg {

// The linears of one input side by side: y = x [W_1; ...; W_n]^T + [b_1; ...; b_n], what
// linear(x, cat(weights, 0), cat(biases, 0)) gives, on one GEMM each way. The stacked weight is a
// temporary (built for the forward product, again for dx), never kept: memory stays that of the
// n linears. Each dW_i and db_i is a slice of one product. biases: empty, or one per weight.
Tensor stacked_linear(const Tensor& x, const std::vector<Tensor>& weights,
                      const std::vector<Tensor>& biases = {});

}  // namespace tg
