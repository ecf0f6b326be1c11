// The int8 ops (ops/quantize.h): shape and dtype checks, then the kernels (cpu/quantize.cpp,
// cuda/quantize.cu).
#include "tapegrad/ops/quantize.h"

#include <cmath>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/ops/elementwise.h"
#include "tapegrad/ops/views.h"

namespace tg {
namespace {

// Quantized ops are inference-only: a gradient cannot flow through round().
void check_no_grad(const char* op, const Tensor& x) {
  TG_CHECK(!(grad_enabled() && x.requires_grad()), "op '", op, "' is inference-only: its input of shape ",
           shape_str(x.shape()), " requires a gradient (run it under tg::NoGrad, or keep the f32 model for training)");
}

Tensor as_f32(const Tensor& x) {
  return x.dtype() == DType::f32 ? x.detach().contiguous() : x.detach().to(DType::f32);
}

// quantize_rows' scale and levels (autograd/kernels.h).
void check_quantization(const char* op, double fixed_scale, int levels) {
  TG_CHECK(std::isfinite(fixed_scale) && fixed_scale >= 0 && fixed_scale < 3.4e38, "op '", op,
           "': the fixed scale must be finite and >= 0 (0: a scale per row), got ", fixed_scale);
  TG_CHECK(levels >= 1 && levels <= 127, "op '", op, "': levels must be in [1, 127], got ", levels);
}

// A static input scale (calibrated for 127 steps each side) stretched to `levels` steps over the
// same range: input_scale 127 / levels (unchanged at 127; 0, a scale per row, stays 0).
double scale_for_levels(double input_scale, int levels) {
  return levels == 127 ? input_scale : input_scale * 127 / levels;
}

}  // namespace

QuantizedRows quantize_rows(const Tensor& x, double fixed_scale, int levels) {
  const char* op = "quantize_rows";
  TG_CHECK(x.defined() && x.dim() == 2 && is_floating(x.dtype()), "op '", op,
           "': x must be a floating [rows, cols] tensor, got ",
           x.defined() ? dtype_name(x.dtype()) + std::string(" ") + shape_str(x.shape()) : std::string("undefined"));
  check_quantization(op, fixed_scale, levels);
  check_no_grad(op, x);
  const Tensor input = as_f32(x);
  QuantizedRows q{empty(x.shape(), DType::i8, x.device()), empty({x.size(0)}, DType::f32, x.device())};
  kernels(x.device()).quantize_rows(input, fixed_scale, levels, q.values, q.scales);
  return q;
}

QuantizedRows quantize_weight(const Tensor& weight) {
  TG_CHECK(weight.defined(), "op 'quantize_weight': the weight is undefined");
  return quantize_rows(weight, 0, kernels(weight.device()).int8_weight_levels());
}

Tensor dequantize_rows(const QuantizedRows& q) {
  TG_CHECK(q.values.defined() && q.values.dim() == 2 && q.values.dtype() == DType::i8 &&
               q.scales.defined() && q.scales.dtype() == DType::f32 && q.scales.dim() == 1 &&
               q.scales.size(0) == q.values.size(0) && q.scales.device() == q.values.device(),
           "op 'dequantize_rows': needs i8 values [rows, cols] and f32 scales [rows] on one device");
  return q.values.to(DType::f32) * q.scales.contiguous().view({q.scales.size(0), 1});
}

namespace {

// quantized_linear: an i8 weight [out, in] with f32 scales [out], a floating x [..., in] that
// needs no gradient, a bias [out] if any, all on one device; `in` small enough for int32 sums.
void check_quantized_linear_inputs(const char* op, const Tensor& x, const QuantizedRows& weight,
                                   const Tensor& bias) {
  const Tensor& w = weight.values;
  TG_CHECK(w.defined() && w.dim() == 2 && w.dtype() == DType::i8 && weight.scales.defined() &&
               weight.scales.dtype() == DType::f32 && weight.scales.dim() == 1 &&
               weight.scales.size(0) == w.size(0),
           "op '", op, "': the weight must be i8 [out, in] with f32 scales [out]");
  const int64_t out_features = w.size(0), in_features = w.size(1);
  TG_CHECK(x.defined() && x.dim() >= 1 && x.size(-1) == in_features && is_floating(x.dtype()), "op '",
           op, "': x ", x.defined() ? shape_str(x.shape()) : "undefined", " does not end in ",
           in_features, " (the weight is [", out_features, ", ", in_features, "])");
  TG_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == out_features), "op '", op,
           "': bias ", bias.defined() ? shape_str(bias.shape()) : "", " must be [", out_features, "]");
  TG_CHECK(in_features <= kMaxInt8Depth, "op '", op, "': ", in_features,
           " input features would overflow the int32 sums (at most ", kMaxInt8Depth, ")");
  check_same_device(op, {x, w, weight.scales, bias});
  check_no_grad(op, x);
}

}  // namespace

Tensor quantized_linear(const Tensor& x, const QuantizedRows& weight, const Tensor& bias,
                        double input_scale) {
  const char* op = "quantized_linear";
  check_quantized_linear_inputs(op, x, weight, bias);
  const Tensor& w = weight.values;
  const int64_t out_features = w.size(0);
  const Tensor x_rows = as_f32(as_rows(x));  // (in_features may be 0)
  const int64_t rows = x_rows.size(0);
  Kernels& k = kernels(x.device());
  const int levels = k.int8_activation_levels();
  const double fixed_scale = scale_for_levels(input_scale, levels);
  check_quantization(op, fixed_scale, levels);
  const Tensor out = empty({rows, out_features}, DType::f32, x.device());
  k.quantized_linear(x_rows, fixed_scale, levels, w.contiguous(),
                     weight.scales.contiguous(), bias.defined() ? as_f32(bias) : Tensor(), out);
  Shape out_shape = x.shape();
  out_shape.back() = out_features;
  return out.view(out_shape);
}

// Not differentiable: they record nothing, and record() refuses their names.
const OpRegistration quantize_ops_without_gradient(
    {"quantize_rows", "dequantize_rows", "quantize_weight", "quantized_linear"}, OpGradient::none);

}  // namespace tg
