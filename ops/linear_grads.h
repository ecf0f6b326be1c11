#pragma once
// linear's backward, shared by the ops that compute a linear layer: linear (ops/matmul.cpp) and
// stacked_linear (ops/stacked_linear.cpp), which differ only in where dW and db go.
#include "tapegrad/autograd/tensor.h"

namespace tg {

struct LinearGrads {
  Tensor dx, dw, db;
};

// The gradients of y = x W^T + b from g (all as rows: [M, out], [M, in], [out, in]), those that
// are wanted: dx = g W, dW = g^T x, db = the column sums of g (W is read for dx only, and may be
// undefined without it). The device's one-pass kernel where it has one (Kernels::linear_backward),
// else two products and a sum.
LinearGrads linear_grads(const Tensor& g_rows, const Tensor& x_rows, const Tensor& weight,
                         bool want_dx, bool want_dw, bool want_db);

}  // namespace tg
