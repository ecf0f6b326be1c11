// The tutorial in C++ (tests/tutorial/tutorial.h) against references it does not share code
// with: the positional table against std::sin and std::cos, the tutorial's attention against the
// library's nn::MultiHeadAttention, its TextClassifier and TimeSeriesModel against the library's
// models of those names on the same weights, f64 gradcheck of every model, and the training loop
// with and without checkpointing.
// This folder mirrors the tutorial (tutorial.py), not a folder of the source tree.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "tests/tutorial/tutorial.h"

// A namespace of the file's own: the test build compiles several test files as one unit.
namespace tutorial_checks {

using namespace tg;

// The tutorial's state_dict under the library's names: W_q -> q_proj, ... (a PyTorch user renames
// the keys the same way to load one model's weights into the other).
nn::NamedTensors with_library_names(const nn::NamedTensors& state) {
  const std::vector<std::pair<std::string, std::string>> renames = {
      {"W_q.", "q_proj."}, {"W_k.", "k_proj."}, {"W_v.", "v_proj."}, {"W_o.", "o_proj."}};
  nn::NamedTensors renamed;
  for (auto [name, tensor] : state) {
    for (const auto& [from, to] : renames) {
      if (const size_t at = name.find(from); at != std::string::npos) name.replace(at, from.size(), to);
    }
    renamed.emplace_back(name, tensor);
  }
  return renamed;
}

// Bool masks written out by hand, true = may attend: padding [B, 1, 1, S] from the lengths, and
// the causal [S, S] (query i sees keys 0..i).
Tensor padding_by_hand(const std::vector<int64_t>& lengths, int64_t seq) {
  std::vector<bool> allowed;
  for (int64_t length : lengths) {
    for (int64_t j = 0; j < seq; ++j) allowed.push_back(j < length);
  }
  return from_bools(allowed, {static_cast<int64_t>(lengths.size()), 1, 1, seq});
}

Tensor causal_by_hand(int64_t seq) {
  std::vector<bool> allowed;
  for (int64_t i = 0; i < seq; ++i) {
    for (int64_t j = 0; j < seq; ++j) allowed.push_back(j <= i);
  }
  return from_bools(allowed, {seq, seq});
}

// The identity [1, 1, S, S]: attention weights times it are the weights themselves, exactly.
Tensor identity(int64_t seq, DType dtype) {
  std::vector<double> values(seq * seq, 0.0);
  for (int64_t i = 0; i < seq; ++i) values[i * seq + i] = 1.0;
  return from_values(values, {1, 1, seq, seq}, dtype);
}

void check_close(const Tensor& actual, const Tensor& expected, double tolerance, const std::string& what) {
  INFO(what);
  REQUIRE(actual.shape() == expected.shape());
  const std::vector<double> a = actual.to_host_f64(), e = expected.to_host_f64();
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("element " << i);
    REQUIRE(a[i] == Approx(e[i]).epsilon(0).margin(tolerance));  // |a - e| <= tolerance alone
  }
}

// An f64 gradcheck of `run` over every parameter of `model` (built in f32, converted to f64, in
// eval mode: dropout off) and the extra leaves.
template <typename Model, typename Run>
GradcheckResult gradcheck_model(Model& model, std::vector<Tensor> leaves, Run run) {
  model.to(DType::f64);
  model.eval();
  const size_t leaf_count = leaves.size();
  for (const Tensor& p : model.parameters()) leaves.push_back(p);
  return gradcheck([&](const std::vector<Tensor>& inputs) {
    return run(std::vector<Tensor>(inputs.begin(), inputs.begin() + leaf_count));
  }, leaves);
}

TEST_CASE("tutorial PositionalEncoding against std::sin and std::cos", "[tutorial]") {
  const int64_t d_model = 6, max_len = 50;
  tutorial::PositionalEncoding encoding(d_model, max_len);
  REQUIRE(encoding.pe.shape() == Shape{1, max_len, d_model});
  REQUIRE(encoding.state_dict().size() == 1);
  REQUIRE(encoding.state_dict()[0].first == "pe");
  REQUIRE(encoding.parameters().empty());

  const std::vector<double> table = encoding.pe.to_host_f64();
  for (int64_t pos = 0; pos < max_len; ++pos) {
    for (int64_t column = 0; column < d_model; ++column) {
      const double angle = pos / std::pow(10000.0, static_cast<double>(column - column % 2) / d_model);
      const double expected = column % 2 == 0 ? std::sin(angle) : std::cos(angle);
      INFO("pos " << pos << ", column " << column);
      // The table is computed in f32 as the tutorial's: its angle carries a few f32 epsilons.
      REQUIRE(table[pos * d_model + column] == Approx(expected).margin(1e-6 * (1 + pos)));
    }
  }

  manual_seed(3);
  const Tensor x = uniform({2, 5, d_model}, -1.0, 1.0);
  const std::vector<double> out = encoding.forward(x).to_host_f64(), in = x.to_host_f64();
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t i = 0; i < 5 * d_model; ++i) {
      REQUIRE(out[b * 5 * d_model + i] == Approx(in[b * 5 * d_model + i] + table[i]).margin(1e-6));
    }
  }
}

// The tutorial's attention and the library's on the same weights, in `dtype`, with a causal or a
// padding mask: outputs, every gradient, and the attention weights.
void compare_with_library(DType dtype, bool causal) {
  INFO(dtype_name(dtype) << (causal ? ", causal mask" : ", padding mask"));
  const double tolerance = dtype == DType::f64 ? 1e-12 : 2e-5;
  const int64_t batch = 2, seq = 5, d_model = 8, num_heads = 2;
  const Tensor mask = causal ? causal_by_hand(seq) : padding_by_hand({5, 3}, seq);

  manual_seed(11);
  tutorial::MultiHeadAttention tut(d_model, num_heads);
  nn::MultiHeadAttention lib(d_model, num_heads);
  lib.load_state_dict(with_library_names(tut.state_dict()));
  tut.to(dtype);
  lib.to(dtype);
  tut.eval();  // its dropout (0.1) off; the library's has none
  lib.eval();

  const Tensor x_values = uniform({batch, seq, d_model}, -1.0, 1.0, dtype);
  const Tensor x_tut = x_values.clone().requires_grad_(), x_lib = x_values.clone().requires_grad_();
  const Tensor out_tut = tut.forward(x_tut, x_tut, x_tut, mask);
  const Tensor out_lib = lib.forward(x_lib, x_lib, x_lib, mask).output;
  check_close(out_tut, out_lib, tolerance, "output");

  const Tensor upstream = uniform({batch, seq, d_model}, -1.0, 1.0, dtype);
  sum(out_tut * upstream).backward();
  sum(out_lib * upstream).backward();
  check_close(x_tut.grad(), x_lib.grad(), tolerance, "x.grad");
  const std::vector<std::pair<std::shared_ptr<nn::Linear>, std::shared_ptr<nn::Linear>>> pairs = {
      {tut.W_q, lib.q_proj}, {tut.W_k, lib.k_proj}, {tut.W_v, lib.v_proj}, {tut.W_o, lib.o_proj}};
  for (const auto& [ours, theirs] : pairs) {
    check_close(ours->weight.grad(), theirs->weight.grad(), tolerance, "weight.grad");
    check_close(ours->bias.grad(), theirs->bias.grad(), tolerance, "bias.grad");
  }

  // The weights: the tutorial's attention over the identity as V gives its softmax itself.
  NoGrad no_grad;
  const Tensor Q = tut.split_heads(tut.W_q->forward(x_values));
  const Tensor K = tut.split_heads(tut.W_k->forward(x_values));
  const Tensor weights = tut.scaled_dot_product_attention(Q, K, identity(seq, dtype), mask);
  const Tensor lib_weights = lib.forward(x_values, x_values, x_values, mask, /*need_weights=*/true, /*is_causal=*/false,
                                           /*average_attn_weights=*/false).weights;
  check_close(weights, lib_weights, tolerance, "attention weights");
  // need_weights' default, PyTorch's average_attn_weights: the mean of the heads' weights.
  const Tensor lib_average = lib.forward(x_values, x_values, x_values, mask, /*need_weights=*/true).weights;
  check_close(lib_average, mean(weights, {1}), tolerance, "attention weights averaged over the heads");
  const std::vector<double> w = weights.to_host_f64();
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < num_heads; ++h) {
      for (int64_t i = 0; i < seq; ++i) {
        double row_sum = 0;
        for (int64_t j = 0; j < seq; ++j) {
          const double value = w[((b * num_heads + h) * seq + i) * seq + j];
          const bool allowed = causal ? j <= i : j < (b == 0 ? 5 : 3);
          INFO("batch " << b << ", head " << h << ", query " << i << ", key " << j);
          if (!allowed) REQUIRE(value == 0.0);  // exactly: exp(-1e9 - max) underflows to 0
          row_sum += value;
        }
        REQUIRE(row_sum == Approx(1.0).margin(1e-6));
      }
    }
  }
}

TEST_CASE("tutorial MultiHeadAttention against the library's on the same weights", "[tutorial]") {
  for (DType dtype : {DType::f32, DType::f64}) {
    compare_with_library(dtype, /*causal=*/false);
    compare_with_library(dtype, /*causal=*/true);
  }
}

TEST_CASE("tutorial TextClassifier against the library's loaded from its state_dict", "[tutorial]") {
  const int64_t vocab = 9, d_model = 8, num_heads = 2, classes = 3, max_len = 16;
  manual_seed(5);
  tutorial::TextClassifier tut(vocab, d_model, num_heads, classes, /*pad_idx=*/0, max_len);
  nn::ModelConfig config;
  config.dim = d_model;
  config.heads = num_heads;
  config.layers = 0;
  config.max_len = max_len;
  nn::TextClassifier lib(vocab, classes, config);
  // Under the tutorial's own names, a load that is not strict reports the attention's eight
  // tensors both ways (mha.W_q.weight unexpected, mha.q_proj.weight missing) and loads the rest.
  const nn::IncompatibleKeys keys = lib.load_state_dict(tut.state_dict(), /*strict=*/false);
  REQUIRE(keys.missing_keys.size() == 8);
  REQUIRE(keys.unexpected_keys.size() == 8);
  CHECK(std::find(keys.missing_keys.begin(), keys.missing_keys.end(), "mha.q_proj.weight") != keys.missing_keys.end());
  CHECK(std::find(keys.unexpected_keys.begin(), keys.unexpected_keys.end(), "mha.W_q.weight") != keys.unexpected_keys.end());
  check_close(lib.fc->weight, tut.fc->weight, 0, "fc.weight, loaded");
  lib.load_state_dict(with_library_names(tut.state_dict()));  // strict: every name matches
  tut.eval();
  lib.eval();

  // Padding (token 0) at the end of the second and third sequences.
  const Tensor tokens = from_indices({3, 1, 4, 1, 5, 2, 6, 5, 0, 0, 7, 0, 0, 0, 0}, {3, 5});
  check_close(tut.forward(tokens), lib.forward(tokens, {5, 3, 1}), 2e-5, "logits");
}

TEST_CASE("tutorial TimeSeriesModel against the library's loaded from its state_dict", "[tutorial]") {
  // The library's model attends without a mask: at the last step, the one the output reads, the
  // tutorial's causal mask hides nothing either, so the two agree there.
  const int64_t input_dim = 3, d_model = 8, num_heads = 2, output_dim = 2, max_len = 16;
  manual_seed(6);
  tutorial::TimeSeriesModel tut(input_dim, d_model, num_heads, output_dim, max_len);
  nn::ModelConfig config;
  config.dim = d_model;
  config.heads = num_heads;
  config.layers = 1;
  config.max_len = max_len;
  nn::TimeSeriesModel lib(input_dim, output_dim, config);
  lib.load_state_dict(with_library_names(tut.state_dict()));  // strict: every name matches
  tut.eval();
  lib.eval();
  const Tensor x = uniform({2, 7, input_dim}, -1.0, 1.0);
  check_close(tut(x), lib(x), 2e-5, "predictions");
}

TEST_CASE("tutorial models pass f64 gradcheck", "[tutorial]") {
  manual_seed(7);
  SECTION("MultiHeadAttention with a padding mask") {
    tutorial::MultiHeadAttention mha(8, 2);
    const Tensor mask = padding_by_hand({4, 2}, 4);
    const GradcheckResult result = gradcheck_model(mha, {random_leaf({2, 4, 8})}, [&](const std::vector<Tensor>& x) {
      return mha.forward(x[0], x[0], x[0], mask);
    });
    INFO(result.message);
    REQUIRE(result.passed);
  }
  SECTION("TextClassifier (its padding mask and mean over the real tokens)") {
    tutorial::TextClassifier model(7, 4, 2, 3, /*pad_idx=*/0, /*max_len=*/8);
    const Tensor tokens = from_indices({3, 1, 4, 6, 5, 2, 0, 0}, {2, 4});
    const GradcheckResult result = gradcheck_model(model, {}, [&](const std::vector<Tensor>&) {
      return model.forward(tokens);
    });
    INFO(result.message);
    REQUIRE(result.passed);
  }
  SECTION("TimeSeriesModel (its causal mask and the last step)") {
    tutorial::TimeSeriesModel model(3, 4, 2, 2, /*max_len=*/8);
    const GradcheckResult result = gradcheck_model(model, {random_leaf({2, 5, 3})}, [&](const std::vector<Tensor>& x) {
      return model.forward(x[0]);
    });
    INFO(result.message);
    REQUIRE(result.passed);
  }
}

TEST_CASE("tutorial training loop, its loss falling, the same under checkpoint", "[tutorial]") {
  // Class 1: the sequence holds token 1. Token 0 pads.
  const Tensor tokens = from_indices({1, 4, 5, 0, 0, 0,  2, 3, 4, 5, 0, 0,  6, 1, 2, 3, 4, 0,  7, 8, 2, 0, 0, 0,
                                      3, 3, 1, 6, 7, 8,  5, 6, 7, 8, 2, 3,  4, 4, 4, 1, 0, 0,  8, 7, 6, 5, 4, 3},
                                     {8, 6});
  const Tensor labels = from_indices({1, 0, 1, 0, 1, 0, 1, 0}, {8});
  const int steps = 60;
  auto run = [&](bool use_checkpoint) {
    manual_seed(21);  // the same weights and dropout masks for both runs
    tutorial::TextClassifier model(9, 16, 2, 2, /*pad_idx=*/0, /*max_len=*/8);
    model.use_checkpoint = use_checkpoint;
    return tutorial::train(model, tokens, labels, steps);
  };
  const std::vector<double> plain = run(false), checkpointed = run(true);
  REQUIRE(plain.size() == static_cast<size_t>(steps));
  REQUIRE(checkpointed.size() == static_cast<size_t>(steps));
  INFO("first loss " << plain.front() << ", last " << plain.back());
  REQUIRE(plain.back() < 0.6 * plain.front());
  for (int step = 0; step < steps; ++step) {
    INFO("step " << step);
    REQUIRE(checkpointed[step] == Approx(plain[step]).epsilon(0).margin(1e-6));
  }

  // The checkpointed forward records the attention as one "checkpoint" node (in eval mode, so
  // that the two forwards draw no dropout masks and give the same logits).
  tutorial::TextClassifier model(9, 16, 2, 2, 0, 8);
  model.eval();
  clear_tape();
  model.use_checkpoint = true;
  const Tensor logits = model.forward(tokens);
  REQUIRE(format_tape().find("checkpoint") != std::string::npos);
  clear_tape();
  model.use_checkpoint = false;
  const Tensor logits_again = model.forward(tokens);
  REQUIRE(format_tape().find("checkpoint") == std::string::npos);
  check_close(logits, logits_again, 1e-6, "logits with and without checkpoint");
}

TEST_CASE("tutorial training loop skips every step whose loss is NaN", "[tutorial]") {
  const Tensor tokens = from_indices({1, 2, 3, 0, 4, 5, 0, 0}, {2, 4});
  const Tensor labels = from_indices({1, 0}, {2});
  manual_seed(22);
  tutorial::TextClassifier model(6, 8, 2, 2, /*pad_idx=*/0, /*max_len=*/8);
  {
    NoGrad no_grad;
    model.fc->bias.narrow(0, 0, 1).fill_(std::nan(""));  // class 0's logits NaN: every loss NaN
  }
  const std::vector<double> embedding_before = model.embedding->weight.to_host_f64();
  REQUIRE(tutorial::train(model, tokens, labels, 3).empty());
  REQUIRE(model.embedding->weight.to_host_f64() == embedding_before);  // no step taken
}

}  // namespace tutorial_checks
