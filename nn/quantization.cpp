#include "tapegrad/nn/quantization.h"

#include <cmath>
#include <map>
#include <memory>
#include <sstream>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/nn/attention.h"
#include "tapegrad/nn/observers.h"

namespace tg::nn {
namespace {

int64_t bytes_of(const Tensor& t) {
  return t.defined() ? t.numel() * static_cast<int64_t>(dtype_size(t.dtype())) : 0;
}

int64_t linear_weight_bytes(const std::vector<std::pair<std::string, Linear*>>& linears) {
  int64_t total = 0;
  for (const auto& [path, linear] : linears) total += bytes_of(linear->weight) + bytes_of(linear->weight_scale);
  return total;
}

// The Linears to convert: all of them, none quantized yet (a tg::Error naming the first that is).
std::vector<std::pair<std::string, Linear*>> f32_linears(Module& model) {
  auto linears = named_linears(model);
  for (const auto& [path, linear] : linears) {
    TG_CHECK(linear->quantization() == QuantMode::none, "quantize: Linear '", path, "' is already quantized (",
             quant_mode_name(linear->quantization()), ")");
  }
  return linears;
}

// Each quantized self-attention's q, k and v as one [q; k; v] (nn/attention.h).
void stack_attention_projections(Module& model) {
  for (const auto& [path, module] : model.named_modules()) {
    if (auto* attention = dynamic_cast<MultiHeadAttention*>(module)) attention->stack_quantized_projections();
  }
}

// Runs `convert` on every Linear between two measurements of the model, and says what changed.
template <typename Convert>
QuantizationSummary convert_linears(Module& model, QuantMode mode,
                                    const std::vector<std::pair<std::string, Linear*>>& linears,
                                    Convert convert) {
  QuantizationSummary summary;
  summary.mode = mode;
  summary.model_bytes_before = state_bytes(model);
  summary.linear_bytes_before = linear_weight_bytes(linears);
  for (size_t i = 0; i < linears.size(); ++i) {
    convert(i, *linears[i].second);
    summary.modules.push_back(linears[i].first);
  }
  stack_attention_projections(model);
  summary.linear_bytes_after = linear_weight_bytes(linears);
  summary.model_bytes_after = state_bytes(model);
  model.eval();
  return summary;
}

std::string display_path(const std::string& path) { return path.empty() ? "(the model itself)" : path; }

std::string mib(int64_t bytes) {
  std::ostringstream out;
  out.precision(3);
  out << static_cast<double>(bytes) / (1 << 20) << " MiB";
  return out.str();
}

const Tensor* find(const std::map<std::string, const Tensor*>& state, const std::string& name) {
  const auto found = state.find(name);
  return found == state.end() ? nullptr : found->second;
}

// A tensor of `dtype` whose values are all finite and > 0 (a scale a row can be divided by).
void check_scale(const std::map<std::string, const Tensor*>& state, const std::string& name) {
  const Tensor* t = find(state, name);
  TG_CHECK(t != nullptr, "tensor '", name, "' is missing (a quantized Linear needs it)");
  TG_CHECK(t->dim() <= 1, "tensor '", name, "' has shape ", shape_str(t->shape()), " but a scale is [out] or []");
  TG_CHECK(t->dtype() == DType::f32, "tensor '", name, "' must be F32, got ", dtype_name(t->dtype()));
  for (double v : t->to_host_f64()) {
    TG_CHECK(std::isfinite(v) && v > 0, "tensor '", name, "' holds the scale ", v,
             " (scales must be finite and > 0)");
  }
}

}  // namespace

int64_t state_bytes(const Module& model) {
  int64_t total = 0;
  for (const auto& [name, t] : model.state_dict()) total += bytes_of(t);
  return total;
}

int64_t linear_weight_bytes(Module& model) { return linear_weight_bytes(named_linears(model)); }

std::vector<std::pair<std::string, Linear*>> named_linears(Module& model) {
  std::vector<std::pair<std::string, Linear*>> out;
  for (const auto& [path, module] : model.named_modules()) {
    if (auto* linear = dynamic_cast<Linear*>(module)) out.emplace_back(path, linear);
  }
  return out;
}

QuantizationSummary quantize_dynamic(Module& model) {
  const auto linears = f32_linears(model);
  return convert_linears(model, QuantMode::dynamic, linears,
                         [](size_t, Linear& linear) { linear.quantize(QuantMode::dynamic); });
}

ObserverKind parse_observer(const std::string& name) {
  if (name == "minmax") return ObserverKind::minmax;
  if (name == "percentile") return ObserverKind::percentile;
  fail("unknown observer '", name, "' (minmax, percentile)");
}

const char* observer_name(ObserverKind kind) { return kind == ObserverKind::minmax ? "minmax" : "percentile"; }

QuantizationSummary quantize_static(Module& model, const Calibration& calibrate, const StaticOptions& options) {
  const auto linears = f32_linears(model);
  // prepare: one observer per Linear (all made before any is attached: a bad percentile throws here).
  std::vector<std::unique_ptr<Observer>> observers;
  for (size_t i = 0; i < linears.size(); ++i) {
    if (options.observer == ObserverKind::minmax) observers.push_back(std::make_unique<MinMaxObserver>());
    else observers.push_back(std::make_unique<PercentileObserver>(options.percentile));
  }
  std::vector<double> scales;
  {
    // Attached for this scope only, and the model's mode restored, also when calibration throws.
    struct Attached {
      const std::vector<std::pair<std::string, Linear*>>& linears;
      Module& model;
      bool was_training = model.is_training();
      ~Attached() {
        for (const auto& [path, linear] : linears) linear->input_observer = nullptr;
        model.train(was_training);
      }
    } attached{linears, model};
    for (size_t i = 0; i < linears.size(); ++i) {
      Observer* observer = observers[i].get();
      linears[i].second->input_observer = [observer](const Tensor& x) { observer->observe(x); };
    }
    // calibrate: the f32 model, as it will be used.
    NoGrad no_grad;
    model.eval();
    calibrate();
    for (size_t i = 0; i < linears.size(); ++i) {
      scales.push_back(observers[i]->scale("quantize_static: Linear '" + display_path(linears[i].first) + "'"));
    }
  }
  // convert: now that every scale is known, nothing below can fail half-way.
  return convert_linears(model, QuantMode::static_, linears,
                         [&](size_t i, Linear& linear) { linear.quantize(QuantMode::static_, scales[i]); });
}

void quantize_structure(Module& model, QuantMode mode) {
  if (mode == QuantMode::none) return;
  for (const auto& [path, linear] : f32_linears(model)) linear->quantize(mode, 1.0);
  stack_attention_projections(model);
  model.eval();
}

std::string QuantizationSummary::describe() const {
  std::ostringstream out;
  out << "quantized " << modules.size() << " Linear layer" << (modules.size() == 1 ? "" : "s") << " ("
      << quant_mode_name(mode) << " int8):";
  for (const std::string& path : modules) out << " " << display_path(path);
  out << "\nLinear weights: " << linear_bytes_before << " -> " << linear_bytes_after << " bytes ("
      << mib(linear_bytes_before) << " -> " << mib(linear_bytes_after);
  if (linear_bytes_after > 0) {
    out.precision(3);
    out << ", " << static_cast<double>(linear_bytes_before) / static_cast<double>(linear_bytes_after)
        << "x smaller";
  }
  out << ")\nwhole state_dict: " << model_bytes_before << " -> " << model_bytes_after << " bytes\n";
  return out.str();
}

ModelStateShapes quantized_state_shapes(const ModelStateShapes& f32, QuantMode mode) {
  if (mode == QuantMode::none) return f32;
  std::map<std::string, Shape> linear_weights;  // prefix -> [out, in]
  const std::map<std::string, Shape> parameters(f32.parameters.begin(), f32.parameters.end());
  for (const std::string& prefix : f32.linears) linear_weights.emplace(prefix, parameters.at(prefix + "weight"));
  ModelStateShapes out;
  out.linears = f32.linears;
  for (const auto& [name, shape] : f32.parameters) {
    const size_t dot = name.rfind('.');
    const std::string prefix = dot == std::string::npos ? "" : name.substr(0, dot + 1);
    if (!linear_weights.count(prefix)) out.parameters.emplace_back(name, shape);
  }
  out.buffers = f32.buffers;
  for (const std::string& prefix : f32.linears) {
    const Shape& weight = linear_weights.at(prefix);
    out.buffers.emplace_back(prefix + "weight", weight);
    out.buffers.emplace_back(prefix + "weight_scale", Shape{weight[0]});
    if (parameters.count(prefix + "bias")) out.buffers.emplace_back(prefix + "bias", Shape{weight[0]});
    if (mode == QuantMode::static_) out.buffers.emplace_back(prefix + "input_scale", Shape{});
  }
  return out;
}

void check_quantized_state(const NamedTensors& state, const ModelStateShapes& f32, QuantMode mode) {
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, t] : state) by_name.emplace(name, &t);
  const std::string config_says = std::string(" but the config's quantization is '") + quant_mode_name(mode) + "'";
  for (const std::string& prefix : f32.linears) {
    // The mode the tensors were written in must be the one the config records.
    for (const char* extra : {"weight_scale", "input_scale"}) {
      const bool expected = mode == QuantMode::static_ || (mode == QuantMode::dynamic && extra[0] == 'w');
      TG_CHECK(expected || find(by_name, prefix + extra) == nullptr, "tensor '", prefix, extra,
               "' is int8 quantization state", config_says, " (mode mismatch)");
    }
    const Tensor* weight = find(by_name, prefix + "weight");
    if (weight == nullptr) continue;  // reported as missing by the shape check
    if (mode == QuantMode::none) {
      TG_CHECK(is_floating(weight->dtype()), "tensor '", prefix, "weight' is ", dtype_name(weight->dtype()),
               config_says, " (mode mismatch)");
      continue;
    }
    TG_CHECK(weight->dtype() == DType::i8, "tensor '", prefix, "weight' must be I8 in a ", quant_mode_name(mode),
             "-quantized checkpoint, got ", dtype_name(weight->dtype()));
    check_scale(by_name, prefix + "weight_scale");
    if (const Tensor* bias = find(by_name, prefix + "bias")) {
      TG_CHECK(bias->dtype() == DType::f32, "tensor '", prefix, "bias' must be F32 in a quantized checkpoint, got ",
               dtype_name(bias->dtype()));
    }
    if (mode == QuantMode::static_) check_scale(by_name, prefix + "input_scale");
  }
}

}  // namespace tg::nn
