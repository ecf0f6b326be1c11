// Modules: names as PyTorch gives them, train/eval, load_state_dict's errors and its report of
// missing and unexpected keys, dtype conversion, calling a module as model(x).
#include <catch2/catch.hpp>

#include <cmath>
#include <concepts>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/nn/masks.h"
#include "tapegrad/nn/models.h"
#include "tapegrad/nn/optim.h"
#include "tapegrad/ops/ops.h"

using namespace tg;

namespace {

std::vector<std::string> names(const nn::NamedTensors& tensors) {
  std::vector<std::string> result;
  for (const auto& [name, t] : tensors) result.push_back(name);
  return result;
}

const Tensor& tensor_named(const nn::NamedTensors& tensors, const std::string& wanted) {
  for (const auto& [name, t] : tensors) {
    if (name == wanted) return t;
  }
  FAIL("no tensor named " << wanted);
  return tensors.front().second;
}

// A module as a user writes one: one base-class name gives it operator(). Its forward is not
// const, to check that such a forward is reached too.
struct Scaled : nn::ModuleOf<Scaled> {
  std::shared_ptr<nn::Linear> proj = register_module("proj", std::make_shared<nn::Linear>(3, 2));
  int calls = 0;
  Tensor forward(const Tensor& x, double factor = 1.0) {
    ++calls;
    return (*proj)(x) * factor;
  }
};

// A module derived from Module alone: forward only, no operator().
struct PlainModule : nn::Module {
  Tensor forward(const Tensor& x) const { return x; }
};

}  // namespace

TEST_CASE("Linear: PyTorch's layout and init bounds", "[module]") {
  manual_seed(0);
  nn::Linear linear(16, 4);
  REQUIRE(linear.weight.shape() == Shape{4, 16});
  REQUIRE(linear.bias.shape() == Shape{4});
  REQUIRE(names(linear.state_dict()) == std::vector<std::string>{"weight", "bias"});
  for (double w : linear.weight.to_host_f64()) REQUIRE(std::abs(w) <= 0.25);  // 1/sqrt(16)
  REQUIRE(linear.weight.requires_grad());
  // y = x W^T + b by hand for one row.
  const Tensor x = ones({1, 16});
  const auto w = linear.weight.to_host_f64();
  const auto b = linear.bias.to_host_f64();
  const auto y = linear.forward(x).to_host_f64();
  for (int o = 0; o < 4; ++o) {
    double expected = b[o];
    for (int i = 0; i < 16; ++i) expected += w[o * 16 + i];
    REQUIRE(y[o] == Approx(expected).epsilon(1e-5));
  }
}

TEST_CASE("MultiHeadAttention: state_dict names and a clear error for hidden % heads", "[module]") {
  nn::MultiHeadAttention mha(16, 4);
  REQUIRE(names(mha.state_dict()) ==
          std::vector<std::string>{"q_proj.weight", "q_proj.bias", "k_proj.weight", "k_proj.bias",
                                   "v_proj.weight", "v_proj.bias", "o_proj.weight", "o_proj.bias"});
  REQUIRE(mha.parameter_count() == 4 * (16 * 16 + 16));
  REQUIRE_THROWS_WITH(nn::MultiHeadAttention(10, 4), Catch::Contains("10") && Catch::Contains("4 heads"));
}

TEST_CASE("TimeSeriesModel: the classic tutorial's state_dict names", "[module]") {
  nn::ModelConfig config;
  config.dim = 16;
  config.heads = 4;
  nn::TimeSeriesModel model(3, 2, config);
  REQUIRE(names(model.state_dict()) ==
          std::vector<std::string>{"input_proj.weight", "input_proj.bias", "mha.q_proj.weight",
                                   "mha.q_proj.bias", "mha.k_proj.weight", "mha.k_proj.bias",
                                   "mha.v_proj.weight", "mha.v_proj.bias", "mha.o_proj.weight",
                                   "mha.o_proj.bias", "output.weight", "output.bias",
                                   "pos_encoding.pe"});  // the tutorial's buffer, after the parameters
  REQUIRE(model.forward(zeros({5, 7, 3})).shape() == Shape{5, 2});
  config.layers = 2;
  nn::TimeSeriesModel stacked(3, 2, config);
  REQUIRE(stacked.state_dict()[2].first == "layers.0.norm1.weight");
}

TEST_CASE("train() and eval() reach every child", "[module]") {
  nn::ModelConfig config;
  config.dim = 8;
  config.heads = 2;
  config.layers = 2;
  config.dropout = 0.5;
  nn::CharLM model(5, config);
  model.eval();
  REQUIRE_FALSE(model.layers[1]->attn->is_training());
  REQUIRE_FALSE(model.layers[1]->dropout2->is_training());
  // In eval, dropout is off: two forwards agree exactly.
  const Tensor tokens = from_indices({1, 2, 3, 4}, {1, 4});
  REQUIRE(model.forward(tokens).to_host_f64() == model.forward(tokens).to_host_f64());
  model.train();
  REQUIRE(model.layers[0]->dropout1->is_training());
}

TEST_CASE("load_state_dict copies values and names every bad entry", "[module]") {
  nn::Linear a(3, 2), b(3, 2);
  b.load_state_dict(a.state_dict());
  REQUIRE(b.weight.to_host_f64() == a.weight.to_host_f64());
  REQUIRE(b.bias.to_host_f64() == a.bias.to_host_f64());

  nn::NamedTensors missing = {{"weight", zeros({2, 3})}};
  REQUIRE_THROWS_WITH(b.load_state_dict(missing), Catch::Contains("missing: bias"));
  nn::NamedTensors unexpected = a.state_dict();
  unexpected.emplace_back("extra", zeros({1}));
  REQUIRE_THROWS_WITH(b.load_state_dict(unexpected), Catch::Contains("unexpected: extra"));
  REQUIRE_NOTHROW(b.load_state_dict(unexpected, /*strict=*/false));
  nn::NamedTensors misshaped = {{"weight", zeros({3, 2})}, {"bias", zeros({2})}};
  REQUIRE_THROWS_WITH(b.load_state_dict(misshaped), Catch::Contains("weight [3, 2] vs [2, 3]"));
  // A failed load changes nothing.
  REQUIRE(b.weight.to_host_f64() == a.weight.to_host_f64());
}

TEST_CASE("Module::to converts parameters in place", "[module]") {
  nn::Linear linear(3, 2);
  const Tensor handle = linear.weight;
  const auto before = handle.to_host_f64();
  linear.to(DType::f64);
  REQUIRE(handle.dtype() == DType::f64);
  REQUIRE(linear.parameters()[0].dtype() == DType::f64);
  REQUIRE(handle.to_host_f64() == before);  // f32 -> f64 is exact
  REQUIRE(handle.requires_grad());
}

TEST_CASE("load_state_dict refuses a state that names a tensor twice", "[module]") {
  nn::Linear linear(3, 2);
  const auto before = linear.weight.to_host_f64();
  nn::NamedTensors twice = linear.state_dict();
  twice.emplace_back("weight", ones({2, 3}));
  REQUIRE_THROWS_AS(linear.load_state_dict(twice), Error);
  REQUIRE_THROWS_WITH(linear.load_state_dict(twice, /*strict=*/false),
                      Catch::Contains("names weight more than once"));
  REQUIRE(linear.weight.to_host_f64() == before);  // neither copy was loaded
}

TEST_CASE("load_state_dict converts between floating dtypes only", "[module]") {
  nn::Linear linear(2, 1);
  // f64 values into the f32 model: converted, as torch's copy_ does.
  linear.load_state_dict({{"weight", from_values({0.5, -0.25}, {1, 2}, DType::f64)},
                          {"bias", from_values({2.0}, {1}, DType::f64)}});
  REQUIRE(linear.weight.dtype() == DType::f32);
  REQUIRE(linear.weight.to_host_f64() == std::vector<double>{0.5, -0.25});
  // Integers into floating weights would be read as values: refused, nothing changed.
  REQUIRE_THROWS_WITH(linear.load_state_dict({{"weight", from_indices({1, 2}, {1, 2})},
                                              {"bias", from_values({2.0}, {1})}}),
                      Catch::Contains("dtype mismatch") && Catch::Contains("weight i64 vs f32"));
  REQUIRE(linear.weight.to_host_f64() == std::vector<double>{0.5, -0.25});
}

TEST_CASE("Module::to refuses a dtype that is not floating", "[module]") {
  nn::Linear linear(3, 2);
  const auto before = linear.weight.to_host_f64();
  for (const DType dtype : {DType::i64, DType::i32, DType::i8, DType::b8}) {
    REQUIRE_THROWS_WITH(linear.to(dtype), Catch::Contains("Module::to") &&
                                              Catch::Contains(dtype_name(dtype)) &&
                                              Catch::Contains("only floating dtypes"));
  }
  REQUIRE(linear.weight.dtype() == DType::f32);
  REQUIRE(linear.weight.to_host_f64() == before);  // not truncated
  // Below Module::to, replace_in_place itself keeps a parameter that requires grad floating.
  REQUIRE_THROWS_WITH(
      linear.replace_in_place([](const Tensor& t) { return t.detach().to(DType::i64); }),
      Catch::Contains("'weight' requires grad") && Catch::Contains("cannot become i64"));
  REQUIRE(linear.weight.dtype() == DType::f32);
  REQUIRE(linear.bias.dtype() == DType::f32);  // all or nothing: the bias was not replaced either
}

TEST_CASE("replace_in_place refuses a replacement of another shape", "[module]") {
  nn::Linear linear(3, 2);
  const auto before = linear.weight.to_host_f64();
  REQUIRE_THROWS_WITH(linear.replace_in_place([&](const Tensor& t) {
    return t.same(linear.weight) ? zeros({2, 2}) : Tensor();
  }), Catch::Contains("'weight' has shape [2, 3] but its replacement has shape [2, 2]"));
  REQUIRE(linear.weight.shape() == Shape{2, 3});
  REQUIRE(linear.weight.to_host_f64() == before);
}

TEST_CASE("replace_in_place stores a transposed replacement contiguously: SGD updates the "
          "right elements", "[module]") {
  nn::Linear linear(3, 2, /*bias=*/false);
  // W = [[1, 2, 3], [4, 5, 6]], given as the transpose of a [3, 2] tensor (a strided view).
  const Tensor transposed = from_values({1, 4, 2, 5, 3, 6}, {3, 2}).transpose(0, 1);
  REQUIRE_FALSE(transposed.is_contiguous());
  linear.replace_in_place([&](const Tensor& t) { return t.same(linear.weight) ? transposed : Tensor(); });
  REQUIRE(linear.weight.is_contiguous());
  REQUIRE(linear.weight.to_host_f64() == std::vector<double>{1, 2, 3, 4, 5, 6});
  SGD sgd(linear.parameters(), 1.0);
  // grad = 1 at W[0][1] only: p -= 1 * grad changes 2 into 1 and nothing else.
  linear.weight.set_grad(from_values({0, 1, 0, 0, 0, 0}, {2, 3}));
  sgd.step();
  REQUIRE(linear.weight.to_host_f64() == std::vector<double>{1, 1, 3, 4, 5, 6});
}

TEST_CASE("positional encoding: the formula, a buffer outside the state_dict, max_len", "[module]") {
  nn::SinusoidalPositionalEncoding pe(6, 10, DType::f64);
  const auto table = pe.table.to_host_f64();
  for (int pos : {0, 3, 9}) {
    for (int i = 0; i < 3; ++i) {
      const double angle = pos / std::pow(10000.0, 2.0 * i / 6.0);
      REQUIRE(table[pos * 6 + 2 * i] == Approx(std::sin(angle)).margin(1e-12));
      REQUIRE(table[pos * 6 + 2 * i + 1] == Approx(std::cos(angle)).margin(1e-12));
    }
  }
  REQUIRE(pe.state_dict().empty());
  REQUIRE(pe.parameters().empty());
  REQUIRE(pe.forward(zeros({2, 10, 6}, DType::f64)).shape() == Shape{2, 10, 6});
  REQUIRE_THROWS_WITH(pe.forward(zeros({2, 11, 6}, DType::f64)), Catch::Contains("max_len 10"));
}

namespace {

// The tutorial's table, computed here as its PositionalEncoding does (f32 throughout): the
// exponent first, then its exp, then the angle pos * div_term.
std::vector<double> module_test_tutorial_table(int64_t max_len, int64_t dim) {
  std::vector<double> table(max_len * dim);
  for (int64_t pos = 0; pos < max_len; ++pos) {
    for (int64_t i = 0; 2 * i < dim; ++i) {
      const float div_term = std::exp(static_cast<float>(2 * i) * (-std::log(10000.0f) / dim));
      const float angle = static_cast<float>(pos) * div_term;
      table[pos * dim + 2 * i] = std::sin(angle);
      if (2 * i + 1 < dim) table[pos * dim + 2 * i + 1] = std::cos(angle);
    }
  }
  return table;
}

}  // namespace

TEST_CASE("positional encoding: a table too large to hold is a tg::Error", "[module]") {
  REQUIRE_THROWS_WITH(nn::sinusoidal_table(int64_t{1} << 40, int64_t{1} << 30),
                      Catch::Contains("positional encoding: max_len x dim"));
  // 2^60 entries fit in an int64 but not in memory: the allocator's error, no std exception.
  REQUIRE_THROWS_AS(nn::sinusoidal_table(int64_t{1} << 40, int64_t{1} << 20), Error);
}

TEST_CASE("positional encoding: the tutorial's persistent buffer pe [1, max_len, dim]", "[module]") {
  nn::SinusoidalPositionalEncoding pe(4, 7, DType::f32, /*persistent=*/true);
  REQUIRE(names(pe.state_dict()) == std::vector<std::string>{"pe"});
  REQUIRE(pe.state_dict()[0].second.shape() == Shape{1, 7, 4});
  REQUIRE(pe.parameters().empty());
  // forward adds rows 0..S-1 to every sequence of the batch.
  const auto y = pe.forward(zeros({2, 3, 4})).to_host_f64();
  const double angle = 2 / std::pow(10000.0, 2.0 / 4);  // position 2, column 2
  REQUIRE(y[12 + 2 * 4 + 2] == Approx(std::sin(angle)).margin(1e-7));
  REQUIRE(y[12 + 2 * 4 + 3] == Approx(std::cos(angle)).margin(1e-7));
}

TEST_CASE("check_sinusoidal_buffer: the sinusoid of any length, in f64 or as the tutorial's f32",
          "[module]") {
  REQUIRE_NOTHROW(nn::check_sinusoidal_buffer(nn::sinusoidal_buffer(9, 6), 6, "pe"));
  REQUIRE_NOTHROW(nn::check_sinusoidal_buffer(nn::sinusoidal_buffer(3, 5, DType::f64), 5, "pe"));
  // PyTorch's f32 table over the tutorial's 5000 positions: its angles drift by up to a few
  // f32 epsilons of pos * div_term, which the tolerance 1e-6 * (1 + pos) admits.
  const Tensor tutorial = from_values(module_test_tutorial_table(5000, 8), {1, 5000, 8});
  REQUIRE_NOTHROW(nn::check_sinusoidal_buffer(tutorial, 8, "pos_encoding.pe"));
}

TEST_CASE("check_sinusoidal_buffer refuses another shape, a changed value, a learned table",
          "[module]") {
  using Catch::Contains;
  REQUIRE_THROWS_WITH(nn::check_sinusoidal_buffer(nn::sinusoidal_table(9, 6), 6, "pos_encoding.pe"),
                      Contains("tensor 'pos_encoding.pe' has shape [9, 6]") &&
                          Contains("[1, max_len, 6]"));
  REQUIRE_THROWS_WITH(nn::check_sinusoidal_buffer(nn::sinusoidal_buffer(9, 6), 4, "pe"),
                      Contains("has shape [1, 9, 6]"));
  std::vector<double> values = nn::sinusoidal_buffer(9, 6).to_host_f64();
  values[4 * 6 + 3] += 1e-3;  // position 4, column 3
  REQUIRE_THROWS_WITH(nn::check_sinusoidal_buffer(from_values(values, {1, 9, 6}), 6, "pe"),
                      Contains("at position 4, column 3") && Contains("not the sinusoidal table"));
  values[4 * 6 + 3] = NAN;
  REQUIRE_THROWS_WITH(nn::check_sinusoidal_buffer(from_values(values, {1, 9, 6}), 6, "pe"),
                      Contains("at position 4, column 3"));
  REQUIRE_THROWS_WITH(nn::check_sinusoidal_buffer(zeros({1, 9, 6}), 6, "pe"),
                      Contains("at position 0, column 1"));  // cos(0) = 1
}

TEST_CASE("need_weights returns per-head weights whose rows sum to 1 (0 when fully masked)", "[module]") {
  manual_seed(3);
  nn::MultiHeadAttention mha(8, 2);
  const Tensor x = randn({2, 3, 8});
  const Tensor mask = nn::padding_mask({3, 0}, 3);  // sequence 1 may attend nothing
  const nn::AttentionOutput result = mha.forward(x, x, x, mask, /*need_weights=*/true,
                                                    /*is_causal=*/false, /*average_attn_weights=*/false);
  REQUIRE(result.weights.shape() == Shape{2, 2, 3, 3});
  const auto row_sums = sum(result.weights, {-1}).to_host_f64();
  for (int r = 0; r < 6; ++r) REQUIRE(row_sums[r] == Approx(1.0));
  for (int r = 6; r < 12; ++r) REQUIRE(row_sums[r] == 0.0);
  // The fused path gives the same output.
  const nn::AttentionOutput fused = mha.forward(x, x, x, mask);
  REQUIRE_FALSE(fused.weights.defined());
  const auto a = fused.output.to_host_f64(), b = result.output.to_host_f64();
  for (size_t i = 0; i < a.size(); ++i) REQUIRE(a[i] == Approx(b[i]).margin(1e-5));
}

TEST_CASE("masks: causal, padding and their combination", "[module]") {
  REQUIRE(nn::causal_mask(2, 3).to_host_i64() == std::vector<int64_t>{1, 0, 0, 1, 1, 0});
  REQUIRE(nn::padding_mask({1, 3}, 3).shape() == Shape{2, 1, 1, 3});
  REQUIRE(nn::padding_mask({1, 3}, 3).to_host_i64() == std::vector<int64_t>{1, 0, 0, 1, 1, 1});
  const Tensor both = nn::combine_masks(nn::causal_mask(3, 3), nn::padding_mask({2}, 3));
  REQUIRE(both.shape() == Shape{1, 1, 3, 3});
  REQUIRE(both.to_host_i64() == std::vector<int64_t>{1, 0, 0, 1, 1, 0, 1, 1, 0});
  REQUIRE_THROWS_AS(nn::padding_mask({4}, 3), Error);
}

TEST_CASE("masks: sizes whose product does not fit are a tg::Error naming the mask", "[module]") {
  const int64_t big = int64_t{1} << 32;
  REQUIRE_THROWS_WITH(nn::causal_mask(big, big),
                      Catch::Contains("causal_mask: sq x sk: 4294967296 x 4294967296 overflows"));
  REQUIRE_THROWS_WITH(nn::padding_mask({1, 2, 3, 4}, int64_t{1} << 62),
                      Catch::Contains("padding_mask: batch x max_len"));
  REQUIRE_THROWS_WITH(nn::padding_mask({0}, -1), Catch::Contains("padding_mask: max_len -1"));
  // A product that fits but is too large to allocate: the allocator's error, no std exception.
  REQUIRE_THROWS_AS(nn::causal_mask(int64_t{1} << 31, int64_t{1} << 31), Error);
  REQUIRE_THROWS_AS(nn::padding_mask({1}, int64_t{1} << 62), Error);
}

TEST_CASE("TextClassifier: padding never changes a result", "[module]") {
  manual_seed(5);
  nn::ModelConfig config;
  config.dim = 8;
  config.heads = 2;
  for (int64_t layers : {0, 2}) {
    config.layers = layers;
    nn::TextClassifier model(20, 3, config);
    const auto short_batch = model.forward(from_indices({4, 7, 9}, {1, 3}), {3}).to_host_f64();
    const auto padded = model.forward(from_indices({4, 7, 9, 0, 0, 0, 0}, {1, 7}), {3}).to_host_f64();
    const auto other_pad = model.forward(from_indices({4, 7, 9, 13, 2, 19, 1}, {1, 7}), {3}).to_host_f64();
    for (size_t i = 0; i < short_batch.size(); ++i) {
      REQUIRE(padded[i] == Approx(short_batch[i]).margin(1e-5));
      REQUIRE(other_pad[i] == Approx(short_batch[i]).margin(1e-5));
    }
  }
}

TEST_CASE("load_state_dict is an in-place write: a graph from before it refuses backward",
          "[module][version]") {
  nn::Linear a(3, 2), b(3, 2);
  const Tensor x = ones({1, 3});
  Tensor y = sum(b.forward(x));
  const uint64_t before = b.weight.version();
  b.load_state_dict(a.state_dict());
  REQUIRE(b.weight.version() == before + 1);
  REQUIRE_THROWS_WITH(y.backward(), Catch::Contains("modified by an in-place operation"));
  sum(b.forward(x)).backward();  // a forward after the load is fine
  REQUIRE(b.weight.grad().defined());
}

TEST_CASE("Module::to between forward and backward: backward refuses the stale gradient",
          "[module][grad]") {
  nn::Linear linear(3, 2);
  Tensor y = sum(linear.forward(ones({1, 3})));
  linear.to(DType::f64);
  // The forward's weight gradient is f32; the leaf is f64 now: it must not land in .grad.
  REQUIRE_THROWS_WITH(y.backward(), Catch::Contains("converted after the forward"));
  REQUIRE_FALSE(linear.weight.grad().defined());
}

TEST_CASE("modules are callable: model(args...) is model.forward(args...)", "[module][call]") {
  manual_seed(12);
  // Linear against x W^T + b computed here, element by element.
  nn::Linear linear(3, 2);
  const Tensor x = randn({4, 3});
  const std::vector<double> xs = x.to_host_f64(), w = linear.weight.to_host_f64(),
                            b = linear.bias.to_host_f64(), y = linear(x).to_host_f64();
  for (int r = 0; r < 4; ++r) {
    for (int o = 0; o < 2; ++o) {
      double expected = b[o];
      for (int i = 0; i < 3; ++i) expected += xs[r * 3 + i] * w[o * 3 + i];
      REQUIRE(y[r * 2 + o] == Approx(expected).margin(1e-6));
    }
  }
  // Each library module gives what its forward gives, through an object, a const reference and
  // a shared_ptr, with its default arguments.
  const Tensor h = randn({2, 5, 8});
  auto norm = std::make_shared<nn::LayerNorm>(8);
  REQUIRE((*norm)(h).to_host_f64() == norm->forward(h).to_host_f64());
  const nn::MLP mlp(8, 16);
  REQUIRE(mlp(h).to_host_f64() == mlp.forward(h).to_host_f64());
  nn::Dropout dropout(0.5);
  dropout.eval();
  REQUIRE(dropout(h).to_host_f64() == h.to_host_f64());
  const Tensor tokens = from_indices({1, 4, 2, 0, 3}, {1, 5});
  nn::Embedding embedding(6, 8);
  REQUIRE(embedding(tokens).to_host_f64() == embedding.forward(tokens).to_host_f64());
  nn::SinusoidalPositionalEncoding positions(8, 16);
  REQUIRE(positions(h, 3).to_host_f64() == positions.forward(h, 3).to_host_f64());
  nn::TransformerEncoderLayer layer(8, 2, 16);
  REQUIRE(layer(h, Tensor(), true).to_host_f64() == layer.forward(h, Tensor(), true).to_host_f64());

  nn::ModelConfig config;
  config.dim = 8;
  config.heads = 2;
  nn::TimeSeriesModel series(3, 2, config);
  const Tensor window = randn({2, 6, 3});
  REQUIRE(series(window).to_host_f64() == series.forward(window).to_host_f64());
  nn::TextClassifier classifier(6, 3, config);
  const std::vector<int64_t> lengths = {4};
  REQUIRE(classifier(tokens, lengths).to_host_f64() ==
          classifier.forward(tokens, lengths).to_host_f64());
  nn::CharLM lm(6, config);
  REQUIRE(lm(tokens).shape() == Shape{1, 5, 6});
  REQUIRE(lm(tokens).to_host_f64() == lm.forward(tokens).to_host_f64());

  // A user's module: the non-const forward runs, with its arguments.
  Scaled scaled;
  const Tensor doubled = scaled(x, 2.0);
  REQUIRE(scaled.calls == 1);
  const std::vector<double> once = scaled.proj->forward(x).to_host_f64(), twice = doubled.to_host_f64();
  for (size_t i = 0; i < once.size(); ++i) REQUIRE(twice[i] == Approx(2 * once[i]));
  // Whether a call fits is a question with an answer, as for any C++ callable.
  static_assert(std::invocable<nn::Linear&, const Tensor&>);
  static_assert(!std::invocable<nn::Linear&, const Tensor&, const Tensor&>);
  static_assert(!std::invocable<const Scaled&, const Tensor&>);  // forward is not const
  static_assert(!std::invocable<PlainModule&, const Tensor&>);   // no ModuleOf, no operator()
}

TEST_CASE("MultiHeadAttention called as mha(q, k, v, mask) and mha(x, mask, is_causal)",
          "[module][call]") {
  manual_seed(13);
  auto mha = std::make_shared<nn::MultiHeadAttention>(8, 2);
  const Tensor x = randn({2, 4, 8}), memory = randn({2, 3, 8});
  const Tensor mask = nn::padding_mask({3, 2}, 3);
  // Cross-attention with a mask; the weights by structured binding, per head.
  const auto [out, weights] = (*mha)(x, memory, memory, mask, true, false, false);
  const nn::AttentionOutput direct = mha->forward(x, memory, memory, mask, true, false, false);
  REQUIRE(out.to_host_f64() == direct.output.to_host_f64());
  REQUIRE(weights.shape() == Shape{2, 2, 4, 3});
  REQUIRE(weights.to_host_f64() == direct.weights.to_host_f64());
  // Self-attention, causal: the overload of (x, mask, is_causal), not (q, k, v).
  const nn::MultiHeadAttention& self = *mha;
  const Tensor causal = self(x, Tensor(), true).output;
  REQUIRE(causal.to_host_f64() == self.forward(x, x, x, Tensor(), false, true).output.to_host_f64());
  REQUIRE(causal.to_host_f64() != self(x).output.to_host_f64());
}

TEST_CASE("load_state_dict(strict = false) loads what matches and reports the rest",
          "[module][load]") {
  manual_seed(14);
  nn::ModelConfig config;
  config.dim = 8;
  config.heads = 2;
  nn::TimeSeriesModel source(3, 2, config), target(3, 2, config);
  const nn::NamedTensors before = [&] {
    nn::NamedTensors copies;
    for (const auto& [name, t] : target.state_dict()) copies.emplace_back(name, t.detach().clone());
    return copies;
  }();
  nn::NamedTensors state;
  for (const auto& [name, t] : source.state_dict()) {
    if (name != "mha.k_proj.bias") state.emplace_back(name, t);
  }
  state.emplace_back("decoder.weight", zeros({2, 2}));
  state.emplace_back("aux.scale", ones({1}));

  SECTION("strict: the same errors as ever, nothing loaded") {
    REQUIRE_THROWS_WITH(target.load_state_dict(state),
                        Catch::Contains("missing: mha.k_proj.bias") &&
                            Catch::Contains("unexpected: aux.scale, decoder.weight"));
    for (const auto& [name, t] : target.state_dict()) {
      REQUIRE(t.to_host_f64() == tensor_named(before, name).to_host_f64());
    }
  }
  SECTION("not strict: the two lists, every other tensor loaded, the missing one kept") {
    const nn::IncompatibleKeys keys = target.load_state_dict(state, /*strict=*/false);
    REQUIRE(keys.missing_keys == std::vector<std::string>{"mha.k_proj.bias"});
    REQUIRE(keys.unexpected_keys == std::vector<std::string>{"aux.scale", "decoder.weight"});
    for (const auto& [name, t] : target.state_dict()) {
      INFO(name);
      const Tensor expected = name == "mha.k_proj.bias" ? tensor_named(before, name)
                                                        : tensor_named(source.state_dict(), name);
      REQUIRE(t.to_host_f64() == expected.to_host_f64());
    }
  }
  SECTION("not strict: a mis-shaped or mistyped entry still raises, and nothing changes") {
    nn::NamedTensors bad = state;
    for (auto& [name, t] : bad) {
      if (name == "output.weight") t = zeros({3, 8});
    }
    REQUIRE_THROWS_WITH(target.load_state_dict(bad, /*strict=*/false),
                        Catch::Contains("shape mismatch") &&
                            Catch::Contains("output.weight [3, 8] vs [2, 8]") &&
                            !Catch::Contains("missing") && !Catch::Contains("unexpected"));
    for (auto& [name, t] : bad) {
      if (name == "output.weight") t = zeros({2, 8}, DType::i64);
    }
    REQUIRE_THROWS_WITH(target.load_state_dict(bad, /*strict=*/false),
                        Catch::Contains("output.weight i64 vs f32"));
    for (const auto& [name, t] : target.state_dict()) {
      REQUIRE(t.to_host_f64() == tensor_named(before, name).to_host_f64());
    }
  }
  SECTION("a load that fits reports nothing, strict or not") {
    const nn::IncompatibleKeys strict_keys = target.load_state_dict(source.state_dict());
    REQUIRE(strict_keys.missing_keys.empty());
    REQUIRE(strict_keys.unexpected_keys.empty());
    const nn::IncompatibleKeys loose_keys = target.load_state_dict(source.state_dict(), false);
    REQUIRE(loose_keys.missing_keys.empty());
    REQUIRE(loose_keys.unexpected_keys.empty());
  }
}
