// Mixed precision below the models: the autocast policy and its scopes, differentiable casts
// (f32 gradients for f32 leaves), the parameter-cast cache, the f16/bf16 kernels against f32
// computations of the same rounded inputs, and autocast under checkpoint().
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "tapegrad/autograd/checkpoint.h"
#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/nn/attention.h"
#include "tapegrad/nn/transformer.h"
#include "tapegrad/ops/ops.h"
#include "tapegrad/runtime/autocast.h"

using namespace tg;

namespace {

// The unit roundoff of a format: RNE is off by at most this fraction of the value.
double unit_roundoff(DType dtype) { return dtype == DType::f16 ? 0x1.0p-11 : 0x1.0p-8; }

// Relative error of `actual` against `expected` as whole vectors: |a - e|_2 / |e|_2.
double relative_error(const Tensor& actual, const Tensor& expected) {
  const std::vector<double> a = actual.to_host_f64(), e = expected.to_host_f64();
  REQUIRE(a.size() == e.size());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (a[i] - e[i]) * (a[i] - e[i]);
    norm += e[i] * e[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
}

void require_equal_values(const Tensor& a, const Tensor& b) {
  const std::vector<double> va = a.to_host_f64(), vb = b.to_host_f64();
  REQUIRE(va.size() == vb.size());
  for (size_t i = 0; i < va.size(); ++i) {
    INFO("element " << i);
    if (std::isnan(vb[i])) REQUIRE(std::isnan(va[i]));
    else REQUIRE(va[i] == vb[i]);
  }
}

// |t| in f32 (exact: the square of a half value is exact in f32).
Tensor abs_values(const Tensor& t) {
  const Tensor t32 = t.to(DType::f32);
  return sqrt(t32 * t32);
}

// A half tensor with N(0, 1) values; its f32 copy holds exactly the same numbers.
Tensor random_half(const Shape& shape, DType dtype) { return randn(shape).to(dtype); }

}  // namespace

TEST_CASE("autocast scopes nest and restore the policy; f32 turns it off", "[autocast]") {
  REQUIRE_FALSE(autocast_dtype().has_value());
  {
    Autocast outer(DType::bf16);
    REQUIRE(autocast_dtype() == DType::bf16);
    {
      Autocast inner(DType::f16);
      REQUIRE(autocast_dtype() == DType::f16);
      {
        Autocast off(DType::f32);
        REQUIRE_FALSE(autocast_dtype().has_value());
      }
      REQUIRE(autocast_dtype() == DType::f16);
    }
    REQUIRE(autocast_dtype() == DType::bf16);
  }
  REQUIRE_FALSE(autocast_dtype().has_value());
  REQUIRE_THROWS_AS(Autocast(DType::i64), Error);
  REQUIRE_THROWS_AS(Autocast(DType::f64), Error);
}

TEST_CASE("autocast policy: GEMMs in half, reductions, softmax, norms and losses in f32", "[autocast]") {
  manual_seed(1);
  for (DType half : {DType::f16, DType::bf16}) {
    INFO(dtype_name(half));
    const Tensor a = randn({4, 8}), b = randn({8, 3}), w = randn({3, 8}), bias = randn({3});
    Autocast autocast(half);
    const Tensor product = matmul(a, b);
    REQUIRE(product.dtype() == half);
    REQUIRE(linear(a, w, bias).dtype() == half);
    REQUIRE(scaled_dot_product_attention(randn({2, 5, 4}), randn({2, 6, 4}), randn({2, 6, 4})).dtype() == half);
    // f32-class ops take the half result up to f32.
    REQUIRE(softmax(product, -1).dtype() == DType::f32);
    REQUIRE(log_softmax(product, -1).dtype() == DType::f32);
    REQUIRE(layer_norm(product, {3}, ones({3}), zeros({3})).dtype() == DType::f32);
    REQUIRE(sum(product).dtype() == DType::f32);
    REQUIRE(mean(product, {0}).dtype() == DType::f32);
    REQUIRE(max(product, 1).values.dtype() == DType::f32);
    REQUIRE(exp(product).dtype() == DType::f32);
    REQUIRE(log(exp(product)).dtype() == DType::f32);
    REQUIRE(mse_loss(product, zeros({4, 3})).dtype() == DType::f32);
    REQUIRE(cross_entropy(product, from_indices({0, 1, 2, 0}, {4})).dtype() == DType::f32);
    // Elementwise ops keep half; a half with an f32 promotes to f32.
    REQUIRE(gelu(product).dtype() == half);
    REQUIRE(relu(product * 2.0).dtype() == half);
    REQUIRE(dropout(product, 0.5, true).dtype() == half);
    REQUIRE((product + product).dtype() == half);
    REQUIRE((product + ones({4, 3})).dtype() == DType::f32);
    REQUIRE((ones({3}) * product).dtype() == DType::f32);
    REQUIRE(where(from_bools({true, false, true}, {3}), product, zeros({4, 3})).dtype() == DType::f32);
    REQUIRE(masked_fill(product, from_bools({true, false, true}, {3}), -1.0).dtype() == half);
    // f64 is never cast.
    REQUIRE(matmul(a.to(DType::f64), b.to(DType::f64)).dtype() == DType::f64);
    // Integer and bool tensors pass through untouched.
    REQUIRE(embedding(from_indices({0, 2}, {2}), w).dtype() == DType::f32);
  }
}

TEST_CASE("outside autocast nothing changes: mismatched dtypes are an error", "[autocast]") {
  const Tensor x = ones({2, 2}), h = ones({2, 2}, DType::bf16);
  REQUIRE_THROWS_AS(x + h, Error);
  REQUIRE_THROWS_AS(matmul(x, h), Error);
  REQUIRE(matmul(x, x).dtype() == DType::f32);
  REQUIRE(matmul(h, h).dtype() == DType::bf16);  // half GEMMs work outside autocast too
}

TEST_CASE("casts are differentiable: an f32 leaf through f16 ops gets an f32 gradient", "[autocast]") {
  manual_seed(2);
  for (DType half : {DType::f16, DType::bf16}) {
    INFO(dtype_name(half));
    const Tensor x = randn({6, 5}).requires_grad_();
    const Tensor weights = randn({6, 5});
    // In half: gelu(x) * weights, summed (the sum in f32 after a cast up).
    sum((gelu(x.to(half)) * weights.to(half)).to(DType::f32)).backward();
    const Tensor half_grad = x.grad();
    REQUIRE(half_grad.dtype() == DType::f32);
    x.zero_grad();
    sum(gelu(x) * weights).backward();
    const double error = relative_error(half_grad, x.grad());
    WARN(dtype_name(half) << ": relative error of the gradient through a half cast " << error);
    // A few roundings of u each (x, gelu(x), the product, the gradient): well under 8 u.
    REQUIRE(error <= 8 * unit_roundoff(half));
  }
}

TEST_CASE("half GEMM equals the f32 GEMM of the rounded inputs, rounded once", "[autocast]") {
  manual_seed(3);
  struct Case { Shape a, b; bool transpose_a, transpose_b; };
  // Odd sizes, transposed views (handed to BLAS as flags), a batch broadcast against one matrix,
  // and more rows than one 256-row conversion block.
  const std::vector<Case> cases = {
      {{37, 70}, {70, 45}, false, false}, {{70, 37}, {45, 70}, true, true},
      {{3, 2, 20, 33}, {33, 17}, false, false}, {{600, 24}, {24, 40}, false, false},
      {{24, 600}, {40, 24}, true, true}};
  for (DType half : {DType::f16, DType::bf16}) {
    for (const Case& c : cases) {
      INFO(dtype_name(half) << " a " << shape_str(c.a) << " b " << shape_str(c.b));
      Tensor a = random_half(c.a, half), b = random_half(c.b, half);
      if (c.transpose_a) a = a.transpose(-1, -2);
      if (c.transpose_b) b = b.transpose(-1, -2);
      const Tensor product = matmul(a, b);
      REQUIRE(product.dtype() == half);
      const Tensor reference = matmul(a.to(DType::f32), b.to(DType::f32));
      const Tensor magnitudes = matmul(abs_values(a), abs_values(b));  // sum |a||b| per element
      const std::vector<double> got = product.to_host_f64(), want = reference.to_host_f64(),
                                scale = magnitudes.to_host_f64();
      for (size_t i = 0; i < got.size(); ++i) {
        INFO("element " << i << ": " << got[i] << " vs " << want[i]);
        // One rounding of the f32 result, plus f32 summation-order noise.
        REQUIRE(std::abs(got[i] - want[i]) <= unit_roundoff(half) * std::abs(want[i]) + 1e-5 * scale[i]);
      }
    }
  }
}

TEST_CASE("half elementwise kernels compute in f32 and round once", "[autocast]") {
  manual_seed(4);
  for (DType half : {DType::f16, DType::bf16}) {
    INFO(dtype_name(half));
    const Tensor x = random_half({5, 7}, half), y = random_half({7}, half);
    const Tensor x32 = x.to(DType::f32), y32 = y.to(DType::f32);
    require_equal_values(gelu(x), gelu(x32).to(half));
    require_equal_values(tanh(x), tanh(x32).to(half));
    require_equal_values(relu(x), relu(x32).to(half));
    require_equal_values(x * 3.0, (x32 * 3.0).to(half));
    require_equal_values(x + 1.0, (x32 + 1.0).to(half));
    require_equal_values(x + y, (x32 + y32).to(half));            // broadcast
    require_equal_values(x.transpose(0, 1) * x.transpose(0, 1), (x32 * x32).to(half).transpose(0, 1));
    require_equal_values(x / y, (x32 / y32).to(half));
    const Tensor mask = from_bools({true, false, false, true, true, false, true}, {7});
    require_equal_values(where(mask, x, y), where(mask, x32, y32).to(half));
    require_equal_values(masked_fill(x, mask, -1e9), masked_fill(x32, mask, -1e9).to(half));
    // sum_dim (the engine's broadcast reduction, linear's bias gradient) accumulates in f32.
    const Tensor wide = random_half({3, 500, 4}, half);
    require_equal_values(sum(wide, {1}), sum(wide.to(DType::f32), {1}).to(half));
    // uniform numbers in half stay in [0, 1).
    const Tensor u = rand({4096}, half);
    for (double value : u.to_host_f64()) REQUIRE((value >= 0.0 && value < 1.0));
  }
}

TEST_CASE("parameter casts are cached for the scope and carry the gradient back", "[autocast]") {
  manual_seed(5);
  const Tensor w = randn({4, 6}).requires_grad_();
  const Tensor x1 = randn({3, 6}), x2 = randn({2, 6});
  {
    Autocast autocast(DType::bf16);
    REQUIRE(autocast_cache_size() == 0);
    const Tensor first = autocast_to_half(w), second = autocast_to_half(w);
    REQUIRE(first.same(second));  // one conversion, shared
    REQUIRE(first.dtype() == DType::bf16);
    REQUIRE(autocast_cache_size() == 1);
    REQUIRE_FALSE(autocast_to_half(x1).same(autocast_to_half(x1)));  // activations: not cached
    REQUIRE(autocast_cache_size() == 1);
    // The weight used twice: two linears and one cast to bf16 on the tape (the sums cast their
    // inputs up to f32: those casts are to f32).
    const Tensor loss = sum(linear(x1, w)) + sum(linear(x2, w));
    size_t casts = 0;
    std::istringstream tape(format_tape());
    for (std::string line; std::getline(tape, line);) {
      if (line.find("  to ") != std::string::npos && line.find("bf16") != std::string::npos) ++casts;
    }
    REQUIRE(casts == 1);
    loss.backward();
  }
  REQUIRE(autocast_cache_size() == 0);  // emptied when the outermost scope ends
  REQUIRE(w.grad().dtype() == DType::f32);
  const Tensor amp_grad = w.grad();
  w.zero_grad();
  (sum(linear(x1, w)) + sum(linear(x2, w))).backward();
  REQUIRE(relative_error(amp_grad, w.grad()) < 4 * unit_roundoff(DType::bf16));
}

TEST_CASE("backward inside an autocast scope runs without autocast", "[autocast]") {
  manual_seed(6);
  const Tensor w = randn({3, 4}).requires_grad_(), b = randn({3}).requires_grad_();
  Autocast autocast(DType::f16);
  const Tensor loss = sum(linear(randn({5, 4}), w, b));
  loss.backward();  // linear's backward sums its half gradient; autocast would have made it f32
  REQUIRE(w.grad().dtype() == DType::f32);
  REQUIRE(b.grad().dtype() == DType::f32);
  REQUIRE(autocast_dtype() == DType::f16);  // the scope is back after backward
}

TEST_CASE("fused attention in half agrees with f32 on the rounded inputs", "[autocast]") {
  manual_seed(7);
  for (DType half : {DType::f16, DType::bf16}) {
    for (bool causal : {false, true}) {
      INFO(dtype_name(half) << (causal ? " causal" : ""));
      const Tensor q = random_half({2, 3, 70, 16}, half).requires_grad_();
      const Tensor k = random_half({2, 3, 150, 16}, half).requires_grad_();
      const Tensor v = random_half({2, 3, 150, 8}, half).requires_grad_();
      const Tensor keys = from_bools(std::vector<bool>(150, true), {150});
      const Tensor out = scaled_dot_product_attention(q, k, v, keys, causal);
      REQUIRE(out.dtype() == half);
      const Tensor grad = random_half(out.shape(), half);
      out.backward(grad);
      const Tensor q32 = q.detach().to(DType::f32).requires_grad_();
      const Tensor k32 = k.detach().to(DType::f32).requires_grad_();
      const Tensor v32 = v.detach().to(DType::f32).requires_grad_();
      const Tensor ref = scaled_dot_product_attention(q32, k32, v32, keys, causal);
      ref.backward(grad.to(DType::f32));
      // The f32 kernel on the same numbers, each result rounded once.
      REQUIRE(relative_error(out, ref) <= unit_roundoff(half));
      REQUIRE(q.grad().dtype() == half);
      const double dq = relative_error(q.grad(), q32.grad()), dk = relative_error(k.grad(), k32.grad()),
                   dv = relative_error(v.grad(), v32.grad());
      WARN(dtype_name(half) << (causal ? " causal" : "") << " attention: out "
           << relative_error(out, ref) << ", dq " << dq << ", dk " << dk << ", dv " << dv);
      REQUIRE(dq <= unit_roundoff(half));
      REQUIRE(dk <= unit_roundoff(half));
      REQUIRE(dv <= unit_roundoff(half));
    }
  }
}

TEST_CASE("under autocast the fused and explicit attention paths agree", "[autocast]") {
  manual_seed(8);
  nn::MultiHeadAttention mha(32, 4);
  const Tensor x = randn({2, 40, 32});
  const Tensor mask = from_bools(std::vector<bool>(40, true), {40});
  Autocast autocast(DType::bf16);
  const Tensor fused = mha.forward(x, x, x, mask, /*need_weights=*/false, /*is_causal=*/true).output;
  const auto explicit_path = mha.forward(x, x, x, mask, /*need_weights=*/true, /*is_causal=*/true,
                                           /*average_attn_weights=*/false);
  REQUIRE(fused.dtype() == DType::bf16);
  REQUIRE(explicit_path.output.dtype() == DType::bf16);
  REQUIRE(explicit_path.weights.dtype() == DType::f32);  // softmax runs in f32
  // Both round q, k, v and the context to bf16 but differ in where else they round (the
  // explicit path rounds the scores and weights too): a few u apart.
  REQUIRE(relative_error(fused, explicit_path.output) <= 4 * unit_roundoff(DType::bf16));
}

TEST_CASE("checkpoint under autocast recomputes with the same policy and gradients", "[autocast]") {
  manual_seed(9);
  nn::TransformerEncoderLayer layer(16, 2, 64, 0.0, nn::Activation::gelu);
  const Tensor x = randn({2, 12, 16}).requires_grad_();
  const auto run = [&](bool checkpointed) {
    layer.zero_grad();
    x.zero_grad();
    Tensor loss;
    {
      Autocast autocast(DType::f16);
      const Tensor y = checkpointed
          ? checkpoint([&](const std::vector<Tensor>& in) { return layer.forward(in[0]); }, {x})
          : layer.forward(x);
      loss = sum(y);
    }
    loss.backward();
    std::vector<Tensor> grads{x.grad()};
    for (const Tensor& p : layer.parameters()) grads.push_back(p.grad());
    return grads;
  };
  const std::vector<Tensor> plain = run(false), recomputed = run(true);
  for (size_t i = 0; i < plain.size(); ++i) {
    INFO("gradient " << i);
    REQUIRE(plain[i].dtype() == DType::f32);
    require_equal_values(recomputed[i], plain[i]);  // the same computation, bit for bit
  }
}

TEST_CASE("a cached parameter cast is made again after an in-place write", "[autocast][version]") {
  const Tensor w = from_values({1, 2}, {2}).requires_grad_();
  Autocast autocast(DType::bf16);
  const Tensor before = autocast_to_half(w);
  REQUIRE(before.to_host_f64() == std::vector<double>{1, 2});
  {
    NoGrad no_grad;
    w.copy_(from_values({3, 4}, {2}));  // what an optimizer step inside the scope does
  }
  const Tensor after = autocast_to_half(w);
  REQUIRE_FALSE(after.same(before));
  REQUIRE(after.to_host_f64() == std::vector<double>{3, 4});  // not the stale [1, 2]
  REQUIRE(autocast_to_half(w).same(after));  // and cached again
}
