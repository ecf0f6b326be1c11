// int8 quantization at the module level (nn/quantization.h, nn/observers.h): a quantized Linear's
// output against f32 within the error the rounding allows, its state_dict, checkpoints of it,
// calibration and observers, and the refusals (gradients, training, corrupt state).
#include <catch2/catch.hpp>

#include <cmath>
#include <map>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/nn/models.h"
#include "tapegrad/nn/observers.h"
#include "tapegrad/nn/optim.h"
#include "tapegrad/nn/quantization.h"
#include "tapegrad/ops/ops.h"
#include "tapegrad/ops/quantize.h"

using namespace tg;
using Catch::Contains;

namespace {

std::vector<std::pair<std::string, DType>> names_and_dtypes(const nn::NamedTensors& tensors) {
  std::vector<std::pair<std::string, DType>> out;
  for (const auto& [name, t] : tensors) out.emplace_back(name, t.dtype());
  return out;
}

double max_abs(const std::vector<double>& values, size_t begin, size_t end) {
  double m = 0;
  for (size_t i = begin; i < end; ++i) m = std::max(m, std::abs(values[i]));
  return m;
}

// The worst error of the int8 product y_ro = sum_i x_ri W_oi when x is quantized per row
// (scale sx_r = max_i |x_ri| / 127, or `fixed` for every row) and W per output row (sw_o):
// each x_ri and W_oi is off by at most half its scale, so
//   |x W - x^ W^| <= |x| |W - W^| + |W^| |x - x^| <= sum_i |x_ri| sw_o / 2 + (|W_oi| + sw_o / 2) sx_r / 2,
// plus f32 rounding of the result (a relative 1e-5 of sum |x||W|, far below it here).
std::vector<double> error_bounds(const std::vector<double>& x, const std::vector<double>& w, int64_t rows,
                                 int64_t in, int64_t out, double fixed = 0) {
  std::vector<double> bounds(static_cast<size_t>(rows * out));
  for (int64_t r = 0; r < rows; ++r) {
    const double sx = fixed > 0 ? fixed : max_abs(x, r * in, (r + 1) * in) / 127;
    for (int64_t o = 0; o < out; ++o) {
      const double sw = max_abs(w, o * in, (o + 1) * in) / 127;
      double bound = 0, magnitude = 0;
      for (int64_t i = 0; i < in; ++i) {
        const double xi = std::abs(x[r * in + i]), wi = std::abs(w[o * in + i]);
        bound += xi * sw / 2 + (wi + sw / 2) * sx / 2;
        magnitude += xi * wi;
      }
      bounds[r * out + o] = bound + 1e-5 * magnitude + 1e-6;
    }
  }
  return bounds;
}

}  // namespace

TEST_CASE("quantized Linear: the output is f32's within the rounding bound, dynamic and static", "[quantize]") {
  manual_seed(7);
  const int64_t rows = 6, in = 48, out = 10;
  nn::Linear reference(in, out), dynamic(in, out), fixed(in, out);
  dynamic.load_state_dict(reference.state_dict());
  fixed.load_state_dict(reference.state_dict());
  Tensor x = randn({rows, in});
  // Rows of very different sizes: what per-row input scales are for.
  x = x * from_values({0.01, 0.1, 1, 3, 10, 0.5}, {rows, 1});
  const std::vector<double> xs = x.to_host_f64(), ws = reference.weight.to_host_f64();
  NoGrad no_grad;
  const std::vector<double> expected = reference.forward(x).to_host_f64();

  dynamic.quantize(nn::QuantMode::dynamic);
  const std::vector<double> got = dynamic.forward(x).to_host_f64();
  const std::vector<double> bounds = error_bounds(xs, ws, rows, in, out);
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    REQUIRE(std::abs(got[i] - expected[i]) <= bounds[i]);
  }
  // The biggest row sets a static scale: small rows lose precision, but stay within their bound.
  const double scale = max_abs(xs, 0, xs.size()) / 127;
  fixed.quantize(nn::QuantMode::static_, scale);
  const std::vector<double> got_static = fixed.forward(x).to_host_f64();
  const std::vector<double> static_bounds = error_bounds(xs, ws, rows, in, out, scale);
  for (size_t i = 0; i < got_static.size(); ++i) {
    INFO("element " << i);
    REQUIRE(std::abs(got_static[i] - expected[i]) <= static_bounds[i]);
  }
}

TEST_CASE("quantized Linear: state_dict names and dtypes, parameters gone", "[quantize]") {
  nn::Linear dynamic(8, 3), fixed(8, 3);
  dynamic.quantize(nn::QuantMode::dynamic);
  using Entries = std::vector<std::pair<std::string, DType>>;
  REQUIRE(names_and_dtypes(dynamic.state_dict()) ==
          Entries{{"weight", DType::i8}, {"weight_scale", DType::f32}, {"bias", DType::f32}});
  REQUIRE(dynamic.parameters().empty());
  REQUIRE(dynamic.weight.shape() == Shape{3, 8});
  REQUIRE(dynamic.weight_scale.shape() == Shape{3});
  REQUIRE_FALSE(dynamic.input_scale.defined());
  fixed.quantize(nn::QuantMode::static_, 0.5);
  REQUIRE(names_and_dtypes(fixed.state_dict()) == Entries{{"weight", DType::i8}, {"weight_scale", DType::f32},
                                                          {"bias", DType::f32}, {"input_scale", DType::f32}});
  REQUIRE(fixed.input_scale.dim() == 0);
  REQUIRE(fixed.input_scale.item() == 0.5);
  REQUIRE_THROWS_WITH(fixed.quantize(nn::QuantMode::dynamic), Contains("already quantized (static)"));
  nn::Linear bad(8, 3);
  // A static scale is stored as f32 and must be a normal one: 1e-50 would be stored as 0, 1e39
  // as inf (a file no loader takes), 1e-39 as a denormal.
  for (double scale : {0.0, 1e-50, 1e-39, 1e39, -1.0, double(NAN)}) {
    REQUIRE_THROWS_WITH(bad.quantize(nn::QuantMode::static_, scale), Contains("must be a normal f32"));
  }
  REQUIRE_THROWS_WITH(nn::parse_quant_mode("int4"), Contains("none, dynamic, static"));
}

TEST_CASE("quantized Linear: f32 weights are refused by load_state_dict, not truncated to int8",
          "[quantize]") {
  nn::Linear source(4, 2), target(4, 2);
  {
    NoGrad no_grad;  // weights well inside (-1, 1): truncated to int8, every one would be 0
    source.weight.copy_(from_values({0.5, -0.25, 0.75, 0.125, -0.5, 0.25, 0.625, -0.875}, {2, 4}));
  }
  target.quantize(nn::QuantMode::dynamic);
  const auto int8_weight = target.weight.to_host_i64();
  nn::NamedTensors f32_state = source.state_dict();  // weight, bias
  f32_state.emplace_back("weight_scale", ones({2}));
  REQUIRE_THROWS_WITH(target.load_state_dict(f32_state),
                      Contains("dtype mismatch") && Contains("weight f32 vs i8"));
  REQUIRE(target.weight.to_host_i64() == int8_weight);  // left as it was
  // The quantized state of the same weights loads (the way in: quantize the f32 model). Row r's
  // scale is its largest magnitude over the kernel's levels: 127, or 63 where the CPU's AVX2 int8
  // path runs (0.75 / 127: 0.5 -> 84.7 -> 85; 0.75 / 63: 0.5 -> 42).
  source.quantize(nn::QuantMode::dynamic);
  target.load_state_dict(source.state_dict());
  const double levels = kernels(kCPU).int8_weight_levels();
  const std::vector<double> weights = {0.5, -0.25, 0.75, 0.125, -0.5, 0.25, 0.625, -0.875};
  const double row_max[2] = {0.75, 0.875};
  const std::vector<int64_t> loaded = target.weight.to_host_i64();
  REQUIRE(loaded == source.weight.to_host_i64());
  for (size_t i = 0; i < weights.size(); ++i) {  // the nearest level (0.125 * 63 / 0.75 is a tie)
    INFO("weight " << i << ": " << loaded[i] << " for " << weights[i] * levels / row_max[i / 4]);
    REQUIRE(std::abs(loaded[i] - weights[i] * levels / row_max[i / 4]) <= 0.5 + 1e-4);
  }
  if (levels == 127) REQUIRE(loaded == std::vector<int64_t>{85, -42, 127, 21, -73, 36, 91, -127});
}

TEST_CASE("quantized Linear: a gradient or training is one clear error", "[quantize]") {
  nn::Linear linear(4, 2);
  linear.quantize(nn::QuantMode::dynamic);
  Tensor x = randn({3, 4});
  x.requires_grad_();
  REQUIRE_THROWS_WITH(linear.forward(x), Contains("Linear(4, 2) is int8-quantized (dynamic) and inference-only: "
                                                  "its input requires a gradient"));
  // An input that needs no gradient, but the module is training: the same refusal.
  linear.train();
  REQUIRE_THROWS_WITH(linear.forward(randn({3, 4})), Contains("it is in training mode"));
  {
    NoGrad no_grad;  // under NoGrad both run
    REQUIRE(linear.forward(x).shape() == Shape{3, 2});
  }
  linear.eval();
  REQUIRE(linear.forward(randn({3, 4})).shape() == Shape{3, 2});

  // An optimizer over a quantized model sees only what is still f32 (embeddings, LayerNorms):
  // the int8 weights are buffers, so no step can touch them; a training forward is refused.
  manual_seed(1);
  const nn::ModelConfig config{.dim = 8, .heads = 2};
  nn::CharLM model(11, config);
  const size_t f32_parameters = model.parameters().size();
  nn::quantize_dynamic(model);
  for (const Tensor& p : model.parameters()) REQUIRE(is_floating(p.dtype()));
  REQUIRE(model.parameters().size() == f32_parameters - 2 * nn::named_linears(model).size());
  model.train();
  REQUIRE_THROWS_WITH(model.forward(from_indices({1, 2, 3}, {1, 3})), Contains("inference-only"));
}

TEST_CASE("quantize_dynamic: every Linear, a summary, 4x smaller weights", "[quantize]") {
  manual_seed(2);
  const nn::ModelConfig config{.dim = 16, .heads = 2, .layers = 1};
  nn::TimeSeriesModel model(3, 2, config);
  const nn::QuantizationSummary summary = nn::quantize_dynamic(model);
  REQUIRE(summary.modules == std::vector<std::string>{"input_proj", "mha.q_proj", "mha.k_proj", "mha.v_proj",
                                                      "mha.o_proj", "output"});
  // f32 weights: 4 bytes each; int8: 1 byte each plus a 4-byte scale a row.
  const int64_t weights = 16 * 3 + 4 * 16 * 16 + 2 * 16, rows = 16 + 4 * 16 + 2;
  REQUIRE(summary.linear_bytes_before == 4 * weights);
  REQUIRE(summary.linear_bytes_after == weights + 4 * rows);
  REQUIRE(summary.model_bytes_after < summary.model_bytes_before);
  REQUIRE_THAT(summary.describe(), Contains("quantized 6 Linear layers (dynamic int8)"));
  REQUIRE_FALSE(model.is_training());
  REQUIRE_THROWS_WITH(nn::quantize_dynamic(model), Contains("Linear 'input_proj' is already quantized"));
}

TEST_CASE("quantize_static: the observed range sets input_scale (max |x| = 2.54 -> 0.02)", "[quantize]") {
  nn::Linear linear(3, 2);
  const Tensor x = from_values({0.5, -2.54, 1.0, 2.0, 0.1, -0.3}, {2, 3});
  const nn::QuantizationSummary summary = nn::quantize_static(linear, [&] { linear.forward(x); });
  REQUIRE(summary.modules == std::vector<std::string>{""});
  REQUIRE(linear.quantization() == nn::QuantMode::static_);
  REQUIRE(linear.input_scale.item() == Approx(0.02).epsilon(1e-6));
  REQUIRE_FALSE(linear.input_observer);  // the observers are gone once converted
  // Denormal inputs: max |x| / 127 = 2^-147 is denormal; the scale is the smallest normal f32.
  nn::Linear tiny(3, 2);
  nn::quantize_static(tiny, [&] { tiny.forward(from_values({0x1p-140, 0, -0x1p-141}, {1, 3})); });
  REQUIRE(tiny.input_scale.item() == 0x1p-126);

  // A Linear the calibration never reaches has no scale: an error naming it, nothing converted.
  manual_seed(3);
  nn::MLP mlp(4, 8);
  REQUIRE_THROWS_WITH(nn::quantize_static(mlp, [] {}), Contains("Linear 'linear1': the calibration saw no input"));
  REQUIRE(mlp.linear1->quantization() == nn::QuantMode::none);
  REQUIRE_FALSE(mlp.linear1->input_observer);
  REQUIRE(mlp.is_training());  // its mode restored
  REQUIRE_THROWS_WITH(nn::quantize_static(mlp, [] { throw Error("calibration failed"); }),
                      Contains("calibration failed"));
  REQUIRE_THROWS_WITH(nn::quantize_static(mlp, [] {}, {.observer = nn::ObserverKind::percentile, .percentile = 0}),
                      Contains("(0, 100]"));
  REQUIRE_FALSE(mlp.linear2->input_observer);
  REQUIRE(mlp.is_training());

  // Each Linear gets its own observer: linear2 sees gelu(linear1(x)), not x.
  const Tensor input = randn({5, 4});
  Tensor hidden;
  {
    NoGrad no_grad;
    hidden = gelu(mlp.linear1->forward(input));
  }
  nn::quantize_static(mlp, [&] { mlp.forward(input); });
  REQUIRE(mlp.linear1->input_scale.item() == Approx(max_abs(input.to_host_f64(), 0, 20) / 127).epsilon(1e-6));
  REQUIRE(mlp.linear2->input_scale.item() == Approx(max_abs(hidden.to_host_f64(), 0, 40) / 127).epsilon(1e-6));
}

TEST_CASE("observers: min/max and the percentile of |x| on a known distribution", "[quantize]") {
  nn::MinMaxObserver minmax;
  minmax.observe(from_values({-3, 1, 2}, {3}));
  minmax.observe(from_values({0.5, 4}, {2}));
  REQUIRE(minmax.min() == -3);
  REQUIRE(minmax.max() == 4);
  REQUIRE(minmax.scale("x") == Approx(4.0 / 127));

  // |x| uniform on a fine grid over (0, 10], fed in two batches (the second doubles the range):
  // the p-th percentile is 10 p / 100, read within one bin width (top / 4096 = 16 / 4096).
  std::vector<double> low, high;
  for (int i = 1; i <= 50000; ++i) low.push_back((i % 2 ? 1 : -1) * i * 1e-4);
  for (int i = 50001; i <= 100000; ++i) high.push_back(i * 1e-4);
  for (double p : {50.0, 99.0, 99.99}) {
    nn::PercentileObserver observer(p);
    observer.observe(from_values(low, {static_cast<int64_t>(low.size())}));
    observer.observe(from_values(high, {static_cast<int64_t>(high.size())}));
    REQUIRE(observer.count() == 100000);
    INFO("p = " << p);
    REQUIRE(std::abs(observer.range() - 10 * p / 100) <= 16.0 / 4096);
  }
  // An outlier moves min/max all the way but the 99th percentile hardly at all.
  std::vector<double> values(1000, 1.0);
  values[0] = 100;
  nn::PercentileObserver p99(99);
  nn::MinMaxObserver all;
  p99.observe(from_values(values, {1000}));
  all.observe(from_values(values, {1000}));
  REQUIRE(all.range() == 100);
  REQUIRE(p99.range() <= 1.0 + 128.0 / 4096);
  nn::PercentileObserver empty;
  REQUIRE_THROWS_WITH(empty.scale("Linear 'fc'"), Contains("Linear 'fc': the calibration saw no input"));
  REQUIRE_THROWS_WITH(nn::PercentileObserver(0), Contains("(0, 100]"));
  REQUIRE_THROWS_WITH(all.observe(from_values({NAN}, {1})), Contains("NaN"));
}

TEST_CASE("quantize: denormal and mixed weights give a loadable state, within half a step",
          "[quantize]") {
  // Each Linear's rows, in turn: as drawn (normal), times 2^-140 (every entry denormal: the
  // scale max/127 underflowed to 0, which check_quantized_state refuses), times 2^-118 (entries
  // about 2^-120, some normal and some denormal, max/127 denormal). Every scale must be a normal
  // f32 and every weight come back within half its row's step (on the device's weight levels).
  const int levels = kernels(kCPU).int8_weight_levels();
  const nn::ModelConfig config{.dim = 8, .heads = 2, .layers = 1};
  const nn::ModelStateShapes f32 = nn::TextClassifier::state_shapes(20, 3, config);
  const Tensor tokens = from_indices({1, 2, 3, 4, 5, 6}, {2, 3});
  for (nn::QuantMode mode : {nn::QuantMode::dynamic, nn::QuantMode::static_}) {
    INFO(nn::quant_mode_name(mode));
    manual_seed(6);
    nn::TextClassifier model(20, 3, config);
    nn::NamedTensors state = model.state_dict();
    std::map<std::string, std::vector<double>> originals;  // Linear path -> its f32 weights
    for (const auto& [path, linear] : nn::named_linears(model)) {
      std::vector<double> w = linear->weight.to_host_f64();
      const int64_t in = linear->in_features();
      for (int64_t o = 0; o < linear->out_features(); ++o) {
        const double factor = o % 3 == 0 ? 1.0 : o % 3 == 1 ? 0x1p-140 : 0x1p-118;
        for (int64_t i = 0; i < in; ++i) w[o * in + i] = static_cast<float>(w[o * in + i] * factor);
      }
      for (auto& [name, t] : state) {
        if (name == path + ".weight") t = from_values(w, t.shape());
      }
      originals[path] = w;
    }
    model.load_state_dict(state);
    if (mode == nn::QuantMode::dynamic) nn::quantize_dynamic(model);
    else nn::quantize_static(model, [&] { model.forward(tokens, {3, 3}); });
    REQUIRE_NOTHROW(nn::check_quantized_state(model.state_dict(), f32, mode));
    for (const auto& [path, linear] : nn::named_linears(model)) {
      INFO(path);
      const std::vector<double> scales = linear->weight_scale.to_host_f64();
      const std::vector<double> back =
          dequantize_rows({linear->weight, linear->weight_scale}).to_host_f64();
      const std::vector<double>& w = originals.at(path);
      const int64_t in = linear->in_features();
      for (int64_t o = 0; o < linear->out_features(); ++o) {
        const double row_max = max_abs(w, o * in, (o + 1) * in);
        INFO("row " << o << ", max |w| " << row_max << ", scale " << scales[o]);
        REQUIRE(scales[o] >= 0x1p-126);  // a normal f32: never 0, never denormal
        REQUIRE(scales[o] <= std::max(row_max / levels * (1 + 1e-6), 0x1p-126));
        for (int64_t i = 0; i < in; ++i) {  // + the f32 rounding of q s, <= 2^-24 127 s
          REQUIRE(std::abs(back[o * in + i] - w[o * in + i]) <= scales[o] * (0.5 + 8e-6));
        }
      }
    }
  }
}

TEST_CASE("quantized models: state shapes without building, and a bit-identical round trip", "[quantize]") {
  manual_seed(4);
  const nn::ModelConfig config{.dim = 8, .heads = 2, .layers = 2};
  for (nn::QuantMode mode : {nn::QuantMode::dynamic, nn::QuantMode::static_}) {
    nn::CharLM model(13, config);
    const Tensor tokens = from_indices({1, 5, 7, 2, 12, 3}, {2, 3});
    if (mode == nn::QuantMode::dynamic) nn::quantize_dynamic(model);
    else nn::quantize_static(model, [&] { model.forward(tokens); });
    // What validate_checkpoint expects, computed from the f32 shapes, is what the model holds.
    const nn::ModelStateShapes expected = nn::quantized_state_shapes(nn::CharLM::state_shapes(13, config), mode);
    nn::StateShapes got;
    for (const auto& [name, t] : model.state_dict()) got.emplace_back(name, t.shape());
    REQUIRE(got == expected.state_dict());
    REQUIRE_NOTHROW(nn::check_quantized_state(model.state_dict(), nn::CharLM::state_shapes(13, config), mode));

    // A fresh f32 model given the structure, then the state: the same outputs to the bit.
    nn::CharLM loaded(13, config);
    nn::quantize_structure(loaded, mode);
    loaded.load_state_dict(model.state_dict());
    NoGrad no_grad;
    REQUIRE(loaded.forward(tokens).to_host_f64() == model.forward(tokens).to_host_f64());
  }
}

TEST_CASE("quantized state: missing scales, wrong dtypes, bad scales and mode mismatches are named", "[quantize]") {
  manual_seed(5);
  const nn::ModelConfig config{.dim = 8, .heads = 2, .layers = 0};
  const nn::ModelStateShapes f32 = nn::TextClassifier::state_shapes(20, 3, config);
  nn::TextClassifier model(20, 3, config);
  nn::quantize_static(model, [&] { model.forward(from_indices({1, 2, 3}, {1, 3}), {3}); });
  const nn::NamedTensors good = model.state_dict();
  const auto edited = [&](const std::string& name, const std::function<Tensor(const Tensor&)>& edit) {
    nn::NamedTensors state;
    for (const auto& [key, t] : good) {
      if (key != name) state.emplace_back(key, t);
      else if (Tensor changed = edit(t); changed.defined()) state.emplace_back(key, changed);
    }
    return state;
  };
  using nn::QuantMode;
  REQUIRE_THROWS_WITH(nn::check_quantized_state(edited("fc.weight_scale", [](const Tensor&) { return Tensor(); }),
                                                f32, QuantMode::static_),
                      Contains("tensor 'fc.weight_scale' is missing"));
  REQUIRE_THROWS_WITH(nn::check_quantized_state(edited("mha.q_proj.weight",
                                                       [](const Tensor& t) { return t.to(DType::f32); }),
                                                f32, QuantMode::static_),
                      Contains("tensor 'mha.q_proj.weight' must be I8 in a static-quantized checkpoint, got f32"));
  REQUIRE_THROWS_WITH(nn::check_quantized_state(edited("mha.k_proj.weight_scale",
                                                       [](const Tensor& t) { return t * 0.0; }),
                                                f32, QuantMode::static_),
                      Contains("tensor 'mha.k_proj.weight_scale' holds the scale 0"));
  REQUIRE_THROWS_WITH(nn::check_quantized_state(edited("mha.v_proj.input_scale",
                                                       [](const Tensor&) { return scalar(NAN); }),
                                                f32, QuantMode::static_),
                      Contains("tensor 'mha.v_proj.input_scale' holds the scale nan"));
  REQUIRE_THROWS_WITH(nn::check_quantized_state(edited("fc.weight_scale",
                                                       [](const Tensor& t) { return t.to(DType::f64); }),
                                                f32, QuantMode::static_),
                      Contains("tensor 'fc.weight_scale' must be F32"));
  // Written static, read as dynamic or as f32.
  REQUIRE_THROWS_WITH(nn::check_quantized_state(good, f32, QuantMode::dynamic),
                      Contains("tensor 'mha.q_proj.input_scale' is int8 quantization state but the config's "
                               "quantization is 'dynamic' (mode mismatch)"));
  REQUIRE_THROWS_WITH(nn::check_quantized_state(good, f32, QuantMode::none), Contains("mode mismatch"));
}
