// matmul and linear: GEMM forward, and backward as two more GEMMs.
#include "tapegrad/ops/matmul.h"

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/ops/elementwise.h"
#include "tapegrad/ops/linear_grads.h"
#include "tapegrad/ops/reduce.h"
#include "tapegrad/ops/views.h"
#include "tapegrad/runtime/autocast.h"

namespace tg {
namespace {

// How a [rows, cols] matrix view is handed to BLAS: as it is, or transposed, with its leading
// dimension. Views that are neither (e.g. a stepped slice) are copied first.
struct GemmOperand {
  Tensor tensor;
  bool transposed = false;
  int64_t ld = 0;
};

GemmOperand gemm_operand(const Tensor& t) {
  const int64_t rows = t.size(-2), cols = t.size(-1);
  const int64_t row_stride = t.strides()[t.dim() - 2], col_stride = t.strides()[t.dim() - 1];
  if ((col_stride == 1 || cols == 1) && (row_stride >= cols || rows == 1)) {
    return {t, false, std::max<int64_t>({row_stride, cols, 1})};
  }
  if ((row_stride == 1 || rows == 1) && (col_stride >= rows || cols == 1)) {
    return {t, true, std::max<int64_t>({col_stride, rows, 1})};
  }
  NoGrad no_grad;
  Tensor copy = empty(t.shape(), t.dtype(), t.device());
  kernels(t.device()).copy(t, copy);
  return {copy, false, std::max<int64_t>(cols, 1)};
}

// out[..., m, n] = a[..., m, k] @ b[..., k, n] (+ out when accumulate); a and b already share
// out's batch dims.
void gemm_into(const Tensor& a, const Tensor& b, const Tensor& out, bool accumulate = false) {
  const Shape batch(out.shape().begin(), out.shape().end() - 2);
  const GemmOperand lhs = gemm_operand(a), rhs = gemm_operand(b);
  GemmBatch g;
  g.dtype = out.dtype();
  g.m = a.size(-2);
  g.k = a.size(-1);
  g.n = b.size(-1);
  g.transpose_a = lhs.transposed;
  g.transpose_b = rhs.transposed;
  g.lda = lhs.ld;
  g.ldb = rhs.ld;
  g.ldc = std::max<int64_t>(g.n, 1);
  g.beta = accumulate ? 1.0 : 0.0;
  g.a = lhs.tensor.data();  // the first element; the offsets count from there
  g.b = rhs.tensor.data();
  g.c = out.data();
  g.a_offsets = batch_offsets(lhs.tensor, batch);
  g.b_offsets = batch_offsets(rhs.tensor, batch);
  g.c_offsets = batch_offsets(out, batch);
  if (g.m == 0 || g.n == 0) return;
  if (g.k == 0) {
    if (!accumulate) kernels(out.device()).fill(out, 0);
    return;
  }
  kernels(out.device()).gemm(g);
}

// a and b defined, at least 1-D, of one dtype and on one device.
void check_matmul_operands(const Tensor& a, const Tensor& b) {
  TG_CHECK(a.defined() && b.defined(), "op 'matmul': undefined tensor");
  TG_CHECK(a.dim() >= 1 && b.dim() >= 1, "op 'matmul': shapes ", shape_str(a.shape()), " and ",
           shape_str(b.shape()), ": both need at least 1 dim");
  TG_CHECK(a.dtype() == b.dtype(), "op 'matmul': dtypes ", dtype_name(a.dtype()), " and ",
           dtype_name(b.dtype()), " differ (shapes ", shape_str(a.shape()), " and ",
           shape_str(b.shape()), ")");
  check_same_device("matmul", {a, b});
}

// x (..., in), weight (out, in) and bias (out) or undefined, of one dtype and on one device.
void check_linear_operands(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  TG_CHECK(x.defined() && weight.defined(), "op 'linear': undefined tensor");
  TG_CHECK(weight.dim() == 2 && x.dim() >= 1 && x.size(-1) == weight.size(1), "op 'linear': input ",
           shape_str(x.shape()), " does not fit weight ", shape_str(weight.shape()),
           " (expected (..., in) and (out, in))");
  check_same_device("linear", {x, weight, bias});
  TG_CHECK(x.dtype() == weight.dtype(), "op 'linear': input dtype ", dtype_name(x.dtype()),
           " and weight dtype ", dtype_name(weight.dtype()), " differ");
  if (!bias.defined()) return;
  TG_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), "op 'linear': bias ",
           shape_str(bias.shape()), " does not fit weight ", shape_str(weight.shape()));
  TG_CHECK(bias.dtype() == x.dtype(), "op 'linear': bias dtype ", dtype_name(bias.dtype()),
           " and input dtype ", dtype_name(x.dtype()), " differ");
}

Tensor matmul_2d_or_batched(const Tensor& a, const Tensor& b) {
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  TG_CHECK(b.size(-2) == k, "op 'matmul': shapes ", shape_str(a.shape()), " and ",
           shape_str(b.shape()), " do not match (inner dims ", k, " vs ", b.size(-2), ")");
  const Shape batch = broadcast_shapes(Shape(a.shape().begin(), a.shape().end() - 2),
                                       Shape(b.shape().begin(), b.shape().end() - 2), "matmul");
  Shape a_shape = batch, b_shape = batch, out_shape = batch;
  a_shape.insert(a_shape.end(), {m, k});
  b_shape.insert(b_shape.end(), {k, n});
  out_shape.insert(out_shape.end(), {m, n});
  Tensor out = empty(out_shape, a.dtype(), a.device());
  gemm_into(expand_untaped(a, a_shape), expand_untaped(b, b_shape), out);
  // d(A B)/dA = G B^T, d(A B)/dB = A^T G (summed over broadcast batch dims by the engine)
  record("matmul", {a, b}, out, {a, b}, [](const Tensor& g, const Node& n) {
    const Tensor& a = n.saved[0];
    const Tensor& b = n.saved[1];
    return Grads{n.needs_grad(0) ? matmul(g, b.transpose(-1, -2)) : Tensor(),
                 n.needs_grad(1) ? matmul(a.transpose(-1, -2), g) : Tensor()};
  });
  return out;
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  // Under autocast: f16/bf16 operands and result; the kernel accumulates in f32.
  const Tensor a = autocast_to_half(a_in), b = autocast_to_half(b_in);
  check_matmul_operands(a, b);
  // A 1-D operand is a row (left) or column (right) vector, removed again from the result.
  if (a.dim() == 1 && b.dim() == 1) {  // a dot product: [1, k] @ [k, 1] -> []
    return matmul_2d_or_batched(a.unsqueeze(0), b.unsqueeze(-1)).squeeze(-1).squeeze(-1);
  }
  if (a.dim() == 1) return matmul(a.unsqueeze(0), b).squeeze(-2);
  if (b.dim() == 1) return matmul(a, b.unsqueeze(-1)).squeeze(-1);
  return matmul_2d_or_batched(a, b);
}

Tensor linear(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in) {
  // Under autocast: f16/bf16 operands (a weight's cast is cached for the scope) and result.
  const Tensor x = autocast_to_half(x_in), weight = autocast_to_half(weight_in);
  const Tensor bias = autocast_to_half(bias_in);
  check_linear_operands(x, weight, bias);
  const int64_t out_features = weight.size(0);
  Shape out_shape = x.shape();
  out_shape.back() = out_features;
  Tensor rows = as_rows(x.detach());
  Tensor out = empty({rows.size(0), out_features}, x.dtype(), x.device());
  if (bias.defined()) {  // out starts as the bias in every row; the GEMM adds x W^T to it
    kernels(x.device()).copy(expand_untaped(bias.detach(), out.shape()), out);
  }
  gemm_into(rows, weight.detach().transpose(0, 1), out, /*accumulate=*/bias.defined());
  out = out.view(out_shape);
  // y = x W^T + b:  dx = G W,  dW = G^T x,  db = sum of G over rows
  record("linear", {x, weight, bias}, out, {x, weight},
         [](const Tensor& g, const Node& n) {
           LinearGrads grads = linear_grads(as_rows(g), as_rows(n.saved[0]),
                                            n.saved[1], n.needs_grad(0), n.needs_grad(1), n.needs_grad(2));
           if (grads.dx.defined()) grads.dx = grads.dx.view(n.saved[0].shape());
           return Grads{grads.dx, grads.dw, grads.db};
         });
  return out;
}

// linear's backward (ops/linear_grads.h): the device's one-pass kernel where it has one, else two
// products and a sum.
LinearGrads linear_grads(const Tensor& g_rows, const Tensor& x_rows, const Tensor& weight,
                         bool want_dx, bool want_dw, bool want_db) {
  if (g_rows.is_contiguous() && x_rows.is_contiguous() && (!want_dx || weight.is_contiguous())) {
    const auto like = [&](const Tensor& t, Shape shape) { return empty(shape, t.dtype(), t.device()); };
    LinearGrads fused;
    if (want_dx) fused.dx = like(x_rows, x_rows.shape());
    if (want_dw) fused.dw = like(g_rows, {g_rows.size(1), x_rows.size(1)});  // [out, in]
    if (want_db) fused.db = like(g_rows, {g_rows.size(1)});
    if (kernels(g_rows.device()).linear_backward(g_rows, x_rows, weight, fused.dx, fused.dw, fused.db)) {
      return fused;
    }
  }  // else the unused outputs are freed before the products allocate theirs
  return {want_dx ? matmul(g_rows, weight) : Tensor(),
          want_dw ? matmul(g_rows.transpose(0, 1), x_rows) : Tensor(),
          want_db ? sum(g_rows, {0}) : Tensor()};
}

// The names this file's ops record on the tape (autograd/op_registry.h).
const OpRegistration matmul_ops({"matmul", "linear"});

}  // namespace tg
