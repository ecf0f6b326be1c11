#pragma once
// Matrix products on BLAS GEMM. Transposed views go to BLAS as flags, never copied.
#include "tapegrad/autograd/tensor.h"

namespace tg {

// PyTorch's torch.matmul: 1-D, 2-D, batched and broadcast-batched operands.
Tensor matmul(const Tensor& a, const Tensor& b);
// y = x W^T + b, W of shape (out, in) as torch.nn.functional.linear; bias may be undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace tg
