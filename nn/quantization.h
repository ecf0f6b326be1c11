#pragma once
// Post-training int8 quantization of a model's Linear layers, in place, as PyTorch's
// torch.ao.quantization.quantize_dynamic and prepare + calibrate + convert (docs/quantization.md).
//
// Every Linear's weight W [out, in] is quantized once, symmetrically per output row (channel):
//   weight_scale_o = max_i |W_oi| / 127,   weight_oi = round(W_oi / weight_scale_o) in [-127, 127].
// Its input x [..., in] is quantized row by row (one row = one token) when it runs:
//   dynamic: scale_r = max_i |x_ri| / 127, computed for each row at run time. Per row, not per
//            tensor: activations of a transformer vary a lot from token to token (a few tokens
//            carry outliers many times the typical size); with one scale per token an outlier
//            token costs only its own precision, and the other rows keep a grid fitted to them.
//   static:  one scale for every row, fixed beforehand from calibration batches by an observer
//            (nn/observers.h): no reduction at run time, at the price of saturating (clamping to
//            +-127) values past the calibrated range.
// The product is summed exactly in int32 and scaled back: y_rj = acc_rj scale_r weight_scale_j + b_j
// (ops/quantize.h). Everything else (embeddings, LayerNorm, attention's softmax) stays f32.
#include <functional>
#include <string>
#include <vector>

#include "tapegrad/nn/layers.h"
#include "tapegrad/nn/models.h"

namespace tg::nn {

// What a quantization did: the Linears it converted, and bytes of the whole state_dict and of the
// Linear weights alone, before (f32) and after (i8 weights + f32 scales).
struct QuantizationSummary {
  QuantMode mode = QuantMode::none;
  std::vector<std::string> modules;  // dotted paths, e.g. "mha.q_proj"
  int64_t linear_bytes_before = 0, linear_bytes_after = 0;  // weight (+ weight_scale) bytes
  int64_t model_bytes_before = 0, model_bytes_after = 0;    // every state_dict tensor
  std::string describe() const;  // a few lines, as `tapegrad quantize` prints them
};

// Quantizes every Linear of `model` (weights now, inputs per row at run time) and puts the model
// in eval(). A model with a quantized Linear already is a tg::Error.
QuantizationSummary quantize_dynamic(Module& model);

enum class ObserverKind { minmax, percentile };
ObserverKind parse_observer(const std::string& name);  // "minmax" | "percentile"
const char* observer_name(ObserverKind kind);

struct StaticOptions {
  ObserverKind observer = ObserverKind::minmax;
  double percentile = 99.99;  // PercentileObserver's p
};

// Runs the f32 model's forward passes: `calibrate` is called once, in eval() under tg::NoGrad,
// and should feed the calibration batches through the model (its outputs are ignored).
using Calibration = std::function<void()>;

// prepare: an observer on every Linear's input; calibrate; convert: every Linear quantized with
// input_scale = observer range / 127. A Linear the calibration never reached (or saw only zeros)
// is a tg::Error naming it, and the model is left as it was.
QuantizationSummary quantize_static(Module& model, const Calibration& calibrate,
                                    const StaticOptions& options = {});

// Gives a freshly built f32 model the structure of `mode` (its values are the initial weights
// quantized and input scales of 1, all overwritten next) so that load_state_dict() can fill it
// from a quantized checkpoint. QuantMode::none does nothing.
void quantize_structure(Module& model, QuantMode mode);

// The Linears of a model, with their dotted paths, in state_dict order.
std::vector<std::pair<std::string, Linear*>> named_linears(Module& model);

// Bytes of every state_dict tensor; of the Linears' weights (and weight scales, once quantized).
int64_t state_bytes(const Module& model);
int64_t linear_weight_bytes(Module& model);

// The state_dict names and shapes of a model after quantization `mode`, from those of its f32
// form: each Linear prefix of `f32.linears` loses its parameters weight and bias and gains the
// buffers weight [out, in], weight_scale [out], bias [out] and (static) input_scale [].
ModelStateShapes quantized_state_shapes(const ModelStateShapes& f32, QuantMode mode);

// The checks a state_dict of quantization `mode` needs beyond names and shapes, each a tg::Error
// naming the tensor: no quantization state the mode does not have (weight_scale, input_scale) and
// no i8 weight in an f32 model (mode mismatch); for dynamic and static every Linear's weight is i8
// and its scales f32, finite and > 0 (the kernel gives an all-zero row scale 1, never 0). Tensors
// that are missing are left to the shape check.
void check_quantized_state(const NamedTensors& state, const ModelStateShapes& f32, QuantMode mode);

}  // namespace tg::nn
