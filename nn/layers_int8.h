#pragma once
// A Linear in int8 (nn/layers.h declares the class, nn/layers_int8.cpp computes it; nn/quantization.h
// quantizes every Linear of a model). Linear::quantize converts one layer in place, for inference:
// the f32 parameter `weight` leaves parameters() and state_dict(), and in its place come the buffers
//   weight        i8  [out, in]   round(W / weight_scale), per output row (symmetric)
//   weight_scale  f32 [out]       max_in |W_o,in| / 127
//   bias          f32 [out]       unchanged, now a buffer (nothing is trained any more)
//   input_scale   f32 []          static only: the calibrated scale of every input row
// forward then runs tg::quantized_linear (ops/quantize.h), and refuses to be differentiated: a
// tg::Error when a gradient could be asked of it, i.e. with the tape on and the input requiring
// grad or the module training.
#include <string>

namespace tg::nn {

// How a Linear computes: in floating point, or in int8 with its input quantized per row at run
// time (dynamic) or with one calibrated scale (static).
enum class QuantMode { none, dynamic, static_ };

// "none", "dynamic", "static" and back; anything else is a tg::Error listing the three.
const char* quant_mode_name(QuantMode mode);
QuantMode parse_quant_mode(const std::string& name);

}  // namespace tg::nn
