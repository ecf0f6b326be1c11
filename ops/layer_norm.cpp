// layer_norm: one tape node. Forward normalises rows and applies the affine part, in one kernel
// call where the device has one (Kernels::layer_norm_forward, CPU fast paths), else normalize_rows
// and two ops; backward is the standard closed form, in one kernel call where the device has one
// (Kernels::layer_norm_backward), else composed from ops.
#include "tapegrad/ops/layer_norm.h"

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/ops/elementwise.h"
#include "tapegrad/ops/reduce.h"
#include "tapegrad/runtime/autocast.h"

namespace tg {
namespace {

void check_affine(const Tensor& t, const char* name, const Tensor& x, const Shape& normalized) {
  if (!t.defined()) return;
  TG_CHECK(t.shape() == normalized, "op 'layer_norm': ", name, " of shape ", shape_str(t.shape()),
           " does not match normalized_shape ", shape_str(normalized));
  check_same_device("layer_norm", {x, t});
  TG_CHECK(t.dtype() == x.dtype(), "op 'layer_norm': ", name, " is ",
           dtype_name(t.dtype()), " but the input is ", dtype_name(x.dtype()));
}

// The gradients in one pass from the device's kernel where it has one
// (Kernels::layer_norm_backward), in `grads`; false where it declines (then the ops compose them).
bool layer_norm_grads_fused(const Tensor& g_rows, const Tensor& xhat, const Tensor& rstd,
                            const Tensor& w, const Node& node, Grads& grads) {
  const int64_t n = xhat.size(1);
  const Tensor weight = w.defined() ? w.reshape({n}) : Tensor();
  Tensor dx, dw, db;  // the kernel allocates the wanted ones
  if (!kernels(xhat.device())
           .layer_norm_backward(g_rows, xhat, rstd, weight, node.needs_grad(0) ? &dx : nullptr,
                                node.needs_grad(1) ? &dw : nullptr,
                                node.needs_grad(2) ? &db : nullptr)) {
    return false;
  }
  if (dx.defined()) grads[0] = dx.view(node.inputs[0].shape);
  if (dw.defined()) grads[1] = dw.view(node.inputs[1].shape);
  if (db.defined()) grads[2] = db.view(node.inputs[2].shape);
  return true;
}

// A floating x whose trailing dims are the non-empty normalized_shape, and weight and bias (when
// given) of that shape, x's dtype and device.
void check_layer_norm_inputs(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                             const Tensor& bias) {
  TG_CHECK(x.defined() && is_floating(x.dtype()), "op 'layer_norm': needs a floating tensor");
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  TG_CHECK(k >= 1 && k <= x.dim() && Shape(x.shape().end() - k, x.shape().end()) == normalized_shape,
           "op 'layer_norm': normalized_shape ", shape_str(normalized_shape),
           " is not the trailing dims of the input's shape ", shape_str(x.shape()));
  check_affine(weight, "weight", x, normalized_shape);
  check_affine(bias, "bias", x, normalized_shape);
  TG_CHECK(numel(normalized_shape) > 0, "op 'layer_norm': normalized_shape ",
           shape_str(normalized_shape), " is empty");
}

}  // namespace

Tensor layer_norm(const Tensor& x_in, const Shape& normalized_shape, const Tensor& weight_in,
                  const Tensor& bias_in, double eps) {
  // f32 under autocast: mean and variance are sums over the row.
  const Tensor x = autocast_to_f32(x_in), weight = autocast_to_f32(weight_in);
  const Tensor bias = autocast_to_f32(bias_in);
  check_layer_norm_inputs(x, normalized_shape, weight, bias);
  const int64_t n = numel(normalized_shape);
  const int64_t rows = x.numel() / n;

  const Tensor x_rows = x.detach().contiguous().view({rows, n});
  const Tensor w_row = weight.defined() ? weight.detach().reshape({n}) : Tensor();
  const Tensor b_row = bias.defined() ? bias.detach().reshape({n}) : Tensor();
  const bool recorded = any_requires_grad({x, weight, bias});  // then backward needs xhat
  Tensor y, xhat, row_mean, rstd;
  if (!kernels(x.device()).layer_norm_forward(x_rows, eps, w_row, b_row, &y,
                                               recorded ? &xhat : nullptr, &row_mean, &rstd)) {
    xhat = empty({rows, n}, x.dtype(), x.device());
    row_mean = empty({rows}, x.dtype(), x.device());
    rstd = empty({rows}, x.dtype(), x.device());
    kernels(x.device()).normalize_rows(x_rows, eps, xhat, row_mean, rstd);
    NoGrad no_grad;  // the affine part belongs to this one node
    y = xhat;
    if (w_row.defined()) y = mul(y, w_row);
    if (b_row.defined()) y = add(y, b_row);
  }
  Tensor out = y.view(x.shape());
  // dx = rstd (gw - mean(gw) - xhat mean(gw xhat)); dw = sum over rows of g xhat; db = sum of g
  record("layer_norm", {x, weight, bias}, out, {xhat, rstd, weight},
         [rows, n, normalized_shape](const Tensor& g, const Node& node) {
           const Tensor& xhat = node.saved[0];
           const Tensor rstd = node.saved[1].view({rows, 1});
           const Tensor& w = node.saved[2];
           const Tensor g_rows = g.reshape({rows, n});
           Grads grads(3);
           if (layer_norm_grads_fused(g_rows.contiguous(), xhat, node.saved[1], w, node, grads)) {
             return grads;
           }
           if (node.needs_grad(0)) {
             const Tensor dxhat = w.defined() ? mul(g_rows, w.reshape({n})) : g_rows;
             const Tensor centred = sub(dxhat, mean(dxhat, {1}, /*keepdim=*/true));
             const Tensor projected = mul(xhat, mean(mul(dxhat, xhat), {1}, /*keepdim=*/true));
             grads[0] = mul(rstd, sub(centred, projected)).view(node.inputs[0].shape);
           }
           if (node.needs_grad(1)) grads[1] = sum(mul(g_rows, xhat), {0}).view(normalized_shape);
           if (node.needs_grad(2)) grads[2] = sum(g_rows, {0}).view(normalized_shape);
           return grads;
         });
  return out;
}

// The names this file's ops record on the tape (autograd/op_registry.h).
const OpRegistration layer_norm_ops({"layer_norm"});

}  // namespace tg
