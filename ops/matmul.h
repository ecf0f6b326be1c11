#pragma once
// Matrix products on BLAS GEMM. Transposed views go to BLAS as flags, never copied.
#include <vector>

#include "tapegrad/autograd/tensor.h"

namespace tg {

// PyTorch's torch.matmul: 1-D, 2-D, batched and broadcast-batched operands.
Tensor matmul(const Tensor& a, const Tensor& b);
// y = x W^T + b, W of shape (out, in) as torch.nn.functional.linear; bias may be undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// The linears of one input side by side: y = x [W_1; ...; W_n]^T + [b_1; ...; b_n], what
// linear(x, cat(weights, 0), cat(biases, 0)) gives, on one GEMM each way. The stacked weight is a
// temporary (built for the forward product, again for dx), never kept: memory stays that of the
// n linears. Each dW_i and db_i is a slice of one product. biases: empty, or one per weight.
Tensor stacked_linear(const Tensor& x, const std::vector<Tensor>& weights,
                      const std::vector<Tensor>& biases = {});

}  // namespace tg
