#pragma once
// int8 inference: symmetric quantization by rows and the quantized Linear product.
//
//   scale_r = max_c |x_rc| / 127,   q_rc = round(x_rc / scale_r) in [-127, 127],   x_rc ~ q_rc scale_r
//
// Every kernel computes x_rc / scale_r as x_rc times 1 / scale_r, the reciprocal rounded to f32
// once a row, as PyTorch's quantize_val and fbgemm's Quantize do: a multiply per entry instead of
// a division (an eighth of the cost on AVX2), and the same q on every device. It may differ from
// the correctly rounded quotient in the last bit, so an entry within an ulp of a half step can
// round the other way (the error stays under a step).
//
// A scale is never below 2^-126, the smallest normal f32: a row whose largest entry is below
// 127 * 2^-126 (denormal weights) gets 2^-126, and its entries round to a few steps of it or to 0
// (an error of at most 2^-127 each). A row with no nonzero finite entry gets 1.
//
// A Linear's weight [out, in] is quantized once per output row (per channel); its input is
// quantized per row at run time (dynamic: one scale per token, so an outlier token costs only its
// own precision) or with one calibrated scale (static). The product of two int8 matrices is summed
// exactly in int32 and brought back to f32 with both scales: y_ij = acc_ij s_i w_j + b_j.
// These ops are inference-only: they record nothing on the tape, and an input that needs a
// gradient is a tg::Error.
#include "tapegrad/autograd/tensor.h"

namespace tg {

struct QuantizedRows {
  Tensor values;  // i8 [rows, cols]
  Tensor scales;  // f32 [rows]
};

// x [rows, cols], floating (computed in f32). fixed_scale > 0: that scale for every row. levels
// (1..127): the steps each side, 127 above (63: 7 bits, scale_r = max_c |x_rc| / 63).
QuantizedRows quantize_rows(const Tensor& x, double fixed_scale = 0, int levels = 127);
// values * scale of their row, f32 [rows, cols].
Tensor dequantize_rows(const QuantizedRows& q);
// A Linear's weight [out, in] quantized per output row (quantize_rows) on the levels its device's
// product is fastest on (Kernels::int8_weight_levels): 127, or 63 on the CPU's AVX2 path, whose
// product on 7-bit activations takes a third fewer multiplies when the weight is 7-bit too.
// Either runs everywhere: the levels are a property of the quantized weight, not of the kernel.
QuantizedRows quantize_weight(const Tensor& weight);

// y [..., out] f32 = x [..., in] W^T + bias with W = weight (values [out, in], scales [out]) and x
// quantized per row, or with input_scale for every row when input_scale > 0 (static). bias f32
// [out] or undefined. x is quantized on the levels the device's kernels ask for
// (Kernels::int8_activation_levels): 127, or 63 (7-bit activations, as PyTorch's fbgemm
// reduce_range) on the CPU's AVX2 path, whose vpmaddubsw product is exact only for those; a
// static input_scale (calibrated for 127 steps) then becomes input_scale 127 / 63 on 63 steps.
Tensor quantized_linear(const Tensor& x, const QuantizedRows& weight, const Tensor& bias,
                        double input_scale = 0);

}  // namespace tg
