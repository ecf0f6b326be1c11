// checkpoint: same gradients as the plain graph (dropout masks replayed), far less peak memory,
// one tape node per call, nesting, inputs that do not require grad, an f64 gradcheck, and
// checkpoint(fn, args...) on modules, lambdas and pointers.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <memory>
#include <vector>

#include "tapegrad/autograd/checkpoint.h"
#include "tapegrad/autograd/gradcheck.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/autograd/storage.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/nn/masks.h"
#include "tapegrad/nn/transformer.h"
#include "tapegrad/ops/ops.h"

using namespace tg;

namespace {

using Layers = std::vector<std::shared_ptr<nn::TransformerEncoderLayer>>;

Layers make_layers(int n, int64_t dim, int64_t heads, double dropout, DType dtype) {
  Layers layers;
  for (int i = 0; i < n; ++i) {
    layers.push_back(std::make_shared<nn::TransformerEncoderLayer>(dim, heads, 4 * dim, dropout,
                                                                   nn::Activation::gelu, dtype));
    layers.back()->train();
  }
  return layers;
}

Tensor run_layers(const Layers& layers, Tensor x, bool checkpointed) {
  for (const auto& layer : layers) {
    if (checkpointed) {
      x = checkpoint([layer](const std::vector<Tensor>& in) { return layer->forward(in[0]); }, {x});
    } else {
      x = layer->forward(x);
    }
  }
  return x;
}

void zero_all(const Layers& layers, const Tensor& x) {
  for (const auto& layer : layers) layer->zero_grad();
  x.zero_grad();
}

// Peak bytes above what existed before the forward, for forward + backward of sum(layers(x)).
int64_t peak_bytes(const Layers& layers, const Tensor& x, bool checkpointed) {
  zero_all(layers, x);
  reset_allocator_stats();
  const int64_t before = allocator_stats().current_bytes;
  {
    Tensor loss = sum(run_layers(layers, x, checkpointed));
    loss.backward();
  }
  return allocator_stats().peak_bytes - before;
}

void require_same(const Tensor& a, const Tensor& b, double tol) {
  REQUIRE(a.defined());
  REQUIRE(b.defined());
  const std::vector<double> va = a.to_host_f64(), vb = b.to_host_f64();
  REQUIRE(va.size() == vb.size());
  for (size_t i = 0; i < va.size(); ++i) {
    INFO("element " << i << ": " << va[i] << " vs " << vb[i]);
    REQUIRE(std::abs(va[i] - vb[i]) <= tol);
  }
}

}  // namespace

TEST_CASE("checkpoint: transformer stack with dropout gives the plain gradients", "[checkpoint]") {
  manual_seed(7);
  const Layers layers = make_layers(3, 16, 4, /*dropout=*/0.1, DType::f64);
  const Tensor x = randn({2, 8, 16}, DType::f64).requires_grad_();
  const Tensor w = randn({2, 8, 16}, DType::f64);  // a weighted sum: every output matters
  std::vector<Tensor> params;
  for (const auto& layer : layers) {
    for (const Tensor& p : layer->parameters()) params.push_back(p);
  }

  manual_seed(123);
  const Tensor plain_out = run_layers(layers, x, false);
  sum(plain_out * w).backward();
  const RngState plain_rng_after = rng_state();
  const Tensor plain_x_grad = x.grad();
  std::vector<Tensor> plain_grads;
  for (const Tensor& p : params) plain_grads.push_back(p.grad());
  zero_all(layers, x);

  manual_seed(123);
  const Tensor ckpt_out = run_layers(layers, x, true);
  require_same(ckpt_out, plain_out, 0.0);  // the forward draws the same masks
  sum(ckpt_out * w).backward();
  // Backward replayed the masks and put the generator back where the forward left it.
  REQUIRE(rng_state().seed == plain_rng_after.seed);
  REQUIRE(rng_state().offset == plain_rng_after.offset);

  require_same(x.grad(), plain_x_grad, 1e-12);
  for (size_t i = 0; i < params.size(); ++i) {
    INFO("parameter " << i);
    require_same(params[i].grad(), plain_grads[i], 1e-12);
  }
}

TEST_CASE("checkpoint: at most half the peak memory on 8 transformer layers", "[checkpoint]") {
  manual_seed(11);
  const Layers layers = make_layers(8, 64, 4, /*dropout=*/0.0, DType::f32);
  const Tensor x = randn({4, 64, 64}).requires_grad_();

  const int64_t plain = peak_bytes(layers, x, false);
  const int64_t checkpointed = peak_bytes(layers, x, true);
  WARN("peak bytes above baseline, 8 layers B=4 S=64 dim=64 heads=4 f32: plain " << plain
       << ", checkpointed " << checkpointed);
  REQUIRE(checkpointed > 0);
  REQUIRE(2 * checkpointed <= plain);
  // The counters are deterministic: a second measurement gives the same numbers.
  REQUIRE(peak_bytes(layers, x, true) == checkpointed);
  REQUIRE(peak_bytes(layers, x, false) == plain);
}

TEST_CASE("checkpoint: one tape node per call", "[checkpoint]") {
  manual_seed(3);
  const Layers layers = make_layers(4, 16, 2, 0.0, DType::f32);
  const Tensor x = randn({2, 5, 16}).requires_grad_();
  const size_t before = tape_size();
  const Tensor y = run_layers(layers, x, true);
  REQUIRE(tape_size() - before == layers.size());
  REQUIRE(y.grad_fn() != nullptr);
  REQUIRE(y.grad_fn()->op == "checkpoint");
  // Only the input is saved: B * S * dim f32 values.
  REQUIRE(y.grad_fn()->saved_bytes == 2 * 5 * 16 * 4);

  const size_t plain_before = tape_size();
  const Tensor plain = run_layers(layers, x, false);
  REQUIRE(tape_size() - plain_before > 4 * layers.size());
}

TEST_CASE("checkpoint: nested checkpoints give the plain gradients", "[checkpoint]") {
  manual_seed(5);
  const Tensor x = random_leaf({3, 4});
  const Tensor w1 = random_leaf({4, 4});
  const Tensor w2 = random_leaf({4, 2});
  auto inner = [w1](const std::vector<Tensor>& in) { return tanh(matmul(in[0], w1)); };
  auto outer = [&](const std::vector<Tensor>& in) {
    const Tensor h = checkpoint(inner, {in[0]});
    return dropout(matmul(h, w2), 0.3, true) * in[0].narrow(1, 0, 2);
  };

  manual_seed(9);
  sum(outer({x})).backward();
  const Tensor gx = x.grad(), g1 = w1.grad(), g2 = w2.grad();
  x.zero_grad(); w1.zero_grad(); w2.zero_grad();

  manual_seed(9);
  const size_t before = tape_size();
  const Tensor y = checkpoint(outer, {x});
  REQUIRE(tape_size() - before == 1);  // the inner call ran unrecorded too
  sum(y).backward();
  require_same(x.grad(), gx, 1e-12);
  require_same(w1.grad(), g1, 1e-12);
  require_same(w2.grad(), g2, 1e-12);
}

TEST_CASE("checkpoint: inputs that do not require grad", "[checkpoint]") {
  const Tensor x = random_leaf({2, 3});
  const Tensor c = from_values({1, 2, 3, 4, 5, 6}, {2, 3}, DType::f64);  // a constant
  const Tensor drop = from_bools({false, true, false, false, false, true}, {2, 3});
  const Tensor w = random_leaf({3, 3});
  auto fn = [w](const std::vector<Tensor>& in) {
    return masked_fill(matmul(in[0] * in[1], w), in[2], 0.0);
  };

  SECTION("mixed with one that does: only that one gets a gradient") {
    sum(fn({x, c, drop})).backward();
    const Tensor gx = x.grad(), gw = w.grad();
    x.zero_grad(); w.zero_grad();
    const Tensor y = checkpoint(fn, {x, c, drop});
    REQUIRE(y.grad_fn()->op == "checkpoint");
    sum(y).backward();
    require_same(x.grad(), gx, 1e-12);
    require_same(w.grad(), gw, 1e-12);
    REQUIRE_FALSE(c.grad().defined());
    REQUIRE_FALSE(c.requires_grad());
  }
  SECTION("none does: a plain call, recorded as usual, so captured parameters still learn") {
    const Tensor y = checkpoint(fn, {c, c, drop});
    REQUIRE(y.grad_fn() != nullptr);
    REQUIRE(y.grad_fn()->op != "checkpoint");
    sum(y).backward();
    REQUIRE(w.grad().defined());
  }
  SECTION("grad mode off: nothing recorded") {
    NoGrad no_grad;
    const Tensor y = checkpoint(fn, {x, c, drop});
    REQUIRE(y.grad_fn() == nullptr);
    REQUIRE_FALSE(y.requires_grad());
  }
  SECTION("fn returning its input unchanged does not touch the input's history") {
    const Tensor y = checkpoint([](const std::vector<Tensor>& in) { return in[0]; }, {x});
    REQUIRE(x.is_leaf());
    REQUIRE_FALSE(y.same(x));
    sum(y * 2.0).backward();
    require_same(x.grad(), full({2, 3}, 2.0, DType::f64), 0.0);
  }
}

TEST_CASE("checkpoint: f64 gradcheck of tanh(x @ W) with W captured", "[checkpoint]") {
  manual_seed(17);
  const std::vector<Tensor> inputs{random_leaf({3, 4}), random_leaf({4, 5})};
  const GradcheckFn fn = [](const std::vector<Tensor>& in) {
    const Tensor weight = in[1];  // captured, not an input of the checkpoint
    return checkpoint([weight](const std::vector<Tensor>& xs) { return tanh(matmul(xs[0], weight)); },
                      {in[0]});
  };
  const GradcheckResult result = gradcheck(fn, inputs);
  INFO(result.message);
  REQUIRE(result.passed);
  REQUIRE(result.compared == 15 * (12 + 20));
}

// The plain graph refuses a backward after an in-place write to a tensor it saved (tape.h); the
// checkpointed one must refuse the same writes, although its fn ran unrecorded and a captured
// weight is no input of the checkpoint node: else its re-run would use the new values silently.
TEST_CASE("checkpoint: an in-place write between forward and backward is refused as the plain graph refuses it",
          "[checkpoint]") {
  const auto tanh_matmul = [](const Tensor& x, const Tensor& weight) { return tanh(matmul(x, weight)); };
  const auto checkpointed_loss = [&](const Tensor& x, const Tensor& weight) {
    return sum(checkpoint([&](const std::vector<Tensor>& in) { return tanh_matmul(in[0], weight); }, {x}));
  };
  const auto written = Catch::Contains("modified by an in-place operation");
  manual_seed(5);
  SECTION("a captured weight stepped (the reference: the plain graph refuses it too)") {
    const Tensor x = random_leaf({2, 3}), weight = random_leaf({3, 4});
    const Tensor plain = sum(tanh_matmul(x, weight));
    const Tensor checkpointed = checkpointed_loss(x, weight);
    {
      NoGrad no_grad;
      weight.copy_(weight * 2.0);  // an optimizer step
    }
    REQUIRE_THROWS_WITH(plain.backward(), written);
    REQUIRE_THROWS_WITH(checkpointed.backward(), written && Catch::Contains("'checkpoint' read a "
                                                                            "tensor of shape [3, 4]"));
    REQUIRE_FALSE(weight.grad().defined());  // no gradient reached a leaf
    REQUIRE_FALSE(x.grad().defined());
  }
  SECTION("a captured constant that does not require grad, and an input") {
    const Tensor x = random_leaf({2, 3});
    const Tensor constant = random_leaf({3, 4}).detach();
    const Tensor loss = checkpointed_loss(x, constant);
    {
      NoGrad no_grad;
      constant.fill_(1.0);
    }
    REQUIRE_THROWS_WITH(loss.backward(), written);
    const Tensor weight = random_leaf({3, 4});
    const Tensor again = checkpointed_loss(x, weight);
    {
      NoGrad no_grad;
      x.fill_(0.5);
    }
    REQUIRE_THROWS_WITH(again.backward(), written);
  }
  SECTION("writes before the forward or after the backward are fine; the gradients are the plain ones") {
    const Tensor x = random_leaf({2, 3}), weight = random_leaf({3, 4});
    {
      NoGrad no_grad;
      weight.copy_(weight * 0.5);  // before: the forward reads the new values
    }
    checkpointed_loss(x, weight).backward();
    const Tensor checkpointed_grad = weight.grad();
    weight.zero_grad();
    sum(tanh_matmul(x, weight)).backward();
    require_same(checkpointed_grad, weight.grad(), 1e-12);
    NoGrad no_grad;
    weight.copy_(weight * 2.0);  // after: nothing left to refuse
  }
}

// checkpoint(fn, args...), as torch.utils.checkpoint.checkpoint(fn, *args): a module, a lambda of
// Tensors, a shared_ptr, a module without operator(); the gradients of the plain call.
namespace {

// A module derived from Module alone: checkpoint calls its forward.
struct ForwardOnly : nn::Module {
  std::shared_ptr<nn::Linear> proj = register_module("proj", std::make_shared<nn::Linear>(16, 16, true, DType::f64));
  Tensor forward(const Tensor& x) const { return tanh(proj->forward(x)); }
};

// Every gradient of `leaves` after backward of sum(run() * weights), then zeroed.
std::vector<Tensor> gradients_of(const std::function<Tensor()>& run, const Tensor& weights,
                                 const std::vector<Tensor>& leaves) {
  for (const Tensor& leaf : leaves) leaf.zero_grad();
  sum(run() * weights).backward();
  std::vector<Tensor> grads;
  for (const Tensor& leaf : leaves) grads.push_back(leaf.grad().defined() ? leaf.grad().clone() : Tensor());
  for (const Tensor& leaf : leaves) leaf.zero_grad();
  return grads;
}

void require_same_grads(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("leaf " << i);
    REQUIRE(a[i].defined() == b[i].defined());  // a leaf the call does not use gets none
    if (a[i].defined()) require_same(a[i], b[i], 1e-12);
  }
}

}  // namespace

TEST_CASE("checkpoint(model, x, mask): a module's plain gradients, dropout replayed, one node",
          "[checkpoint][args]") {
  manual_seed(21);
  nn::TransformerEncoderLayer layer(16, 4, 32, /*dropout=*/0.2, nn::Activation::gelu, DType::f64);
  layer.train();
  const Tensor x = randn({2, 6, 16}, DType::f64).requires_grad_();
  const Tensor weights = randn({2, 6, 16}, DType::f64);
  const Tensor mask = nn::padding_mask({6, 4}, 6);
  std::vector<Tensor> leaves = layer.parameters();
  leaves.push_back(x);

  manual_seed(5);
  const auto plain = gradients_of([&] { return layer(x, mask); }, weights, leaves);
  manual_seed(5);
  const auto checkpointed = gradients_of([&] { return checkpoint(layer, x, mask); }, weights, leaves);
  require_same_grads(checkpointed, plain);

  const size_t before = tape_size();
  const Tensor y = checkpoint(layer, x, mask);
  REQUIRE(tape_size() - before == 1);
  REQUIRE(y.grad_fn()->op == "checkpoint");
  REQUIRE(format_tape().find("checkpoint") != std::string::npos);

  SECTION("an absent mask (an undefined Tensor) is passed through as it is") {
    layer.eval();
    const auto unmasked = gradients_of([&] { return layer(x); }, weights, leaves);
    const auto through = gradients_of([&] { return checkpoint(layer, x, Tensor()); }, weights, leaves);
    require_same_grads(through, unmasked);
  }
}

TEST_CASE("checkpoint(fn, a, b): lambdas, shared_ptrs and a module with forward alone",
          "[checkpoint][args]") {
  manual_seed(22);
  const Tensor a = random_leaf({3, 16}), b = random_leaf({3, 16});
  const Tensor weights = randn({3, 16}, DType::f64);
  auto mlp = std::make_shared<nn::MLP>(16, 32, nn::Activation::gelu, DType::f64);
  ForwardOnly forward_only;
  std::vector<Tensor> leaves = mlp->parameters();
  for (const Tensor& p : forward_only.parameters()) leaves.push_back(p);
  leaves.push_back(a);
  leaves.push_back(b);

  // A temporary lambda: kept by copy, so it is alive when backward calls it again.
  const auto plain = gradients_of([&] { return mlp->forward(a * b) + forward_only.forward(b); },
                                  weights, leaves);
  const auto checkpointed = gradients_of([&] {
    return checkpoint([&](const Tensor& u, const Tensor& v) { return mlp->forward(u * v); }, a, b) +
           checkpoint(forward_only, b);
  }, weights, leaves);
  require_same_grads(checkpointed, plain);

  const auto plain_mlp = gradients_of([&] { return mlp->forward(a); }, weights, leaves);
  const auto through_pointer = gradients_of([&] { return checkpoint(mlp, a); }, weights, leaves);
  require_same_grads(through_pointer, plain_mlp);

  // Only b requires grad: a is passed to the re-run as it is, and gets no gradient.
  const Tensor constant = a.detach();
  const Tensor y = checkpoint([](const Tensor& u, const Tensor& v) { return u * tanh(v); }, constant, b);
  REQUIRE(y.grad_fn()->op == "checkpoint");
  sum(y).backward();
  const std::vector<double> u = constant.to_host_f64(), v = b.to_host_f64(), g = b.grad().to_host_f64();
  for (size_t i = 0; i < g.size(); ++i) {
    REQUIRE(g[i] == Approx(u[i] * (1 - std::tanh(v[i]) * std::tanh(v[i]))).epsilon(1e-12));
  }
  REQUIRE_FALSE(constant.requires_grad());
}

TEST_CASE("checkpoint(fn, a, b): f64 gradcheck", "[checkpoint][args]") {
  manual_seed(23);
  const std::vector<Tensor> inputs{random_leaf({3, 4}), random_leaf({3, 4}), random_leaf({4, 4})};
  const GradcheckFn fn = [](const std::vector<Tensor>& in) {
    const Tensor weight = in[2];  // captured, not an argument of the checkpoint
    return checkpoint([weight](const Tensor& x, const Tensor& y) { return tanh(matmul(x, weight)) * y; },
                      in[0], in[1]);
  };
  const GradcheckResult result = gradcheck(fn, inputs);
  INFO(result.message);
  REQUIRE(result.passed);
  REQUIRE(result.compared == 12 * (12 + 12 + 16));
}
