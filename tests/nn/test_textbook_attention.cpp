// MultiHeadAttention under tg::Textbook (autograd/textbook.h): a training step of a text
// classifier records what the tutorial writes (three Linear projections, matmul, softmax,
// dropout, matmul), not the stacked projection and fused attention it records otherwise; the
// loss and every gradient agree with the fast path's; and incremental decoding takes the
// explicit path too.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tapegrad/autograd/rng.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/autograd/tape_graph.h"
#include "tapegrad/autograd/textbook.h"
#include "tapegrad/nn/kv_cache.h"
#include "tapegrad/nn/models.h"
#include "tapegrad/ops/ops.h"

using namespace tg;
using namespace tg::nn;

namespace {

// A small classifier with dropout (so that the attention weights' dropout is on the tape).
std::unique_ptr<TextClassifier> textbook_classifier() {
  manual_seed(31);
  auto model = std::make_unique<TextClassifier>(
      12, 3, ModelConfig{.dim = 16, .heads = 2, .layers = 1, .dropout = 0.25, .max_len = 32});
  model->train();
  return model;
}

// The loss of one batch: 3 texts of up to 9 tokens, the third padded.
Tensor classifier_batch_loss(const TextClassifier& model) {
  std::vector<int64_t> ids(27);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = 2 + static_cast<int64_t>(i * 7 % 10);
  const Tensor tokens = from_indices(ids, {3, 9});
  return cross_entropy(model.forward(tokens, {9, 9, 5}), from_indices({0, 2, 1}, {3}));
}

TensorNames classifier_parameter_names(const Module& model) {
  TensorNames names;
  for (const auto& [name, tensor] : model.named_parameters()) names[tensor.impl()] = name;
  return names;
}

size_t count_tape_ops(const TapeGraph& graph, const std::string& op) {
  return static_cast<size_t>(std::count_if(graph.nodes.begin(), graph.nodes.end(), [&](const TapeNode& n) {
    return n.kind == TapeNodeKind::op && n.name == op;
  }));
}

// The ops that read parameter `name`.
std::vector<std::string> parameter_readers(const TapeGraph& graph, const std::string& name) {
  std::vector<std::string> readers;
  for (const TapeEdge& edge : graph.edges) {
    if (graph.nodes[edge.from].kind == TapeNodeKind::parameter && graph.nodes[edge.from].name == name) {
      readers.push_back(graph.nodes[edge.to].name);
    }
  }
  return readers;
}

bool has_packed_or_fused_op(const TapeGraph& graph) {
  return std::any_of(graph.nodes.begin(), graph.nodes.end(), [](const TapeNode& n) {
    return n.kind == TapeNodeKind::op &&
           (n.name.find("packed") != std::string::npos || n.name.find("stacked") != std::string::npos ||
            n.name == "scaled_dot_product_attention");
  });
}

// The loss, then every parameter's gradient, by name.
std::map<std::string, std::vector<double>> classifier_loss_and_gradients(const TextClassifier& model) {
  manual_seed(32);  // the same dropout numbers for both runs
  const Tensor loss = classifier_batch_loss(model);
  loss.backward();
  std::map<std::string, std::vector<double>> results{{"(loss)", loss.to_host_f64()}};
  for (const auto& [name, p] : model.named_parameters()) {
    results[name] = p.grad().to_host_f64();
    p.zero_grad();
  }
  return results;
}

}  // namespace

TEST_CASE("Textbook: a classifier's step records three projections, matmul, softmax, dropout",
          "[textbook][attention]") {
  const std::unique_ptr<TextClassifier> classifier = textbook_classifier();
  const TextClassifier& model = *classifier;
  const TensorNames names = classifier_parameter_names(model);
  const std::string mha = "layers.0.attn.";
  {
    const TapeGraph fast = describe_tape(classifier_batch_loss(model), names);
    REQUIRE(count_tape_ops(fast, "stacked_linear") == 1);  // without the scope: the packed path
    REQUIRE(count_tape_ops(fast, "packed_self_attention") == 1);
    REQUIRE(count_tape_ops(fast, "softmax") == 0);
  }
  const Textbook textbook;
  const TapeGraph graph = describe_tape(classifier_batch_loss(model), names);
  CHECK_FALSE(has_packed_or_fused_op(graph));
  for (const std::string projection : {"q_proj", "k_proj", "v_proj", "o_proj"}) {
    INFO(projection);
    CHECK(parameter_readers(graph, mha + projection + ".weight") == std::vector<std::string>{"linear"});
    CHECK(parameter_readers(graph, mha + projection + ".bias") == std::vector<std::string>{"linear"});
  }
  CHECK(count_tape_ops(graph, "matmul") == 2);   // q k^T and weights v
  CHECK(count_tape_ops(graph, "softmax") == 1);
  CHECK(count_tape_ops(graph, "dropout") >= 1);  // the weights' (and the layer's residual dropouts)
  CHECK(count_tape_ops(graph, "where") >= 1);    // the padding mask: masked scores to -inf
}

TEST_CASE("Textbook: the explicit step's loss and gradients are the fast step's, to rounding",
          "[textbook][attention]") {
  const std::unique_ptr<TextClassifier> classifier = textbook_classifier();
  const TextClassifier& model = *classifier;
  const auto fast = classifier_loss_and_gradients(model);
  std::map<std::string, std::vector<double>> textbook;
  {
    const Textbook scope;
    textbook = classifier_loss_and_gradients(model);
  }
  REQUIRE(fast.size() == textbook.size());
  // f32 throughout: the two differ by the order of their sums (the fused kernel's online softmax,
  // OpenBLAS's f32 tiles against the reference's double sums), a few ulps per value, and the
  // dropout masks are the same Philox numbers. 1e-4 of each tensor's largest entry is far above
  // that and far below what a dropped term or a wrong mask would move. k_proj.bias's gradient is
  // 0 in exact arithmetic (softmax ignores a shift shared by every key): its entries are rounding
  // noise, held to 1e-7 of the largest gradient.
  double largest_of_all = 0;
  for (const auto& [name, expected] : fast) {
    for (double x : expected) largest_of_all = std::max(largest_of_all, std::abs(x));
  }
  for (const auto& [name, expected] : fast) {
    INFO(name);
    const std::vector<double>& actual = textbook.at(name);
    REQUIRE(actual.size() == expected.size());
    double largest = 0;
    for (double x : expected) largest = std::max(largest, std::abs(x));
    const double margin = 1e-4 * largest + 1e-7 * largest_of_all;
    for (size_t i = 0; i < expected.size(); ++i) REQUIRE(actual[i] == Approx(expected[i]).margin(margin));
  }
}

TEST_CASE("Textbook: incremental decoding takes the explicit path and gives the same logits",
          "[textbook][attention][kv-cache]") {
  manual_seed(33);
  CharLM model(10, ModelConfig{.dim = 16, .heads = 2, .layers = 2, .max_len = 16});
  model.eval();
  const NoGrad no_grad;
  const auto decode = [&] {
    KVCache cache = model.make_cache(1, 8);
    std::vector<double> logits = model.forward_cached(from_indices({1, 4, 2}, {1, 3}), cache).to_host_f64();
    for (int64_t token : {5, 7}) {
      const std::vector<double> next = model.forward_cached(from_indices({token}, {1, 1}), cache).to_host_f64();
      logits.insert(logits.end(), next.begin(), next.end());
    }
    return logits;
  };
  const std::vector<double> fast = decode();
  const Textbook textbook;
  const std::vector<double> plain = decode();
  REQUIRE(plain.size() == fast.size());
  for (size_t i = 0; i < fast.size(); ++i) REQUIRE(plain[i] == Approx(fast[i]).margin(1e-5));
}
