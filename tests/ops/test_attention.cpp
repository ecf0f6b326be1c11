// The fused attention kernel against the explicit path (matmul, scale, mask, softmax, dropout,
// matmul): outputs and gradients, for every mask kind, with and without dropout.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <optional>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/nn/attention.h"
#include "tapegrad/nn/masks.h"
#include "tapegrad/ops/ops.h"
#include "tapegrad/runtime/autocast.h"
#include "tapegrad/runtime/features.h"
#include "tapegrad/runtime/threads.h"

using namespace tg;

namespace {

struct Run {
  std::vector<double> out, dq, dk, dv;
};

// Runs one path on fresh leaves made from the same seed, with the same dropout offsets. The fused
// op takes the sparse layout and ALiBi as they are, the explicit path their dense equivalents
// (sparsity_mask, alibi_bias; q is [B, H, S, d]).
Run run(bool fused, const Shape& q_shape, const Shape& kv_shape, const Tensor& mask, bool causal,
        double dropout_p, DType dtype, const SparsityLayout& layout = {}, bool alibi = false) {
  manual_seed(7);
  Tensor q = uniform(q_shape, -1, 1, dtype).requires_grad_();
  Tensor k = uniform(kv_shape, -1, 1, dtype).requires_grad_();
  Tensor v = uniform(kv_shape, -1, 1, dtype).requires_grad_();
  Tensor probe = uniform(q_shape, -1, 1, dtype);  // a random upstream gradient
  Tensor out;
  if (fused) {
    out = scaled_dot_product_attention(q, k, v, mask, causal, dropout_p, {}, layout, alibi);
  } else {
    const int64_t sq = q_shape[q_shape.size() - 2], sk = kv_shape[kv_shape.size() - 2];
    Tensor allowed = mask;
    if (layout.kind != SparsityKind::full) {
      const Tensor pattern = sparsity_mask(layout, sq, sk);
      allowed = mask.defined() ? nn::combine_masks(mask, pattern) : pattern;
    }
    const Tensor bias = alibi ? alibi_bias(q_shape[q_shape.size() - 3], sq, sk, dtype) : Tensor();
    out = nn::explicit_attention(q, k, v, allowed, causal, dropout_p, bias).first;
  }
  sum(out * probe).backward();
  return {out.to_host_f64(), q.grad().to_host_f64(), k.grad().to_host_f64(), v.grad().to_host_f64()};
}

void require_close(const std::vector<double>& a, const std::vector<double>& b, double tolerance) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("element " << i);
    REQUIRE(std::isfinite(a[i]));
    REQUIRE(a[i] == Approx(b[i]).margin(tolerance));
  }
}

void require_paths_agree(const Shape& q_shape, const Shape& kv_shape, const Tensor& mask,
                         bool causal, double dropout_p, DType dtype = DType::f64,
                         const SparsityLayout& layout = {}, bool alibi = false) {
  const double tolerance = dtype == DType::f64 ? 1e-10 : 1e-5;
  const Run fused = run(true, q_shape, kv_shape, mask, causal, dropout_p, dtype, layout, alibi);
  const Run reference = run(false, q_shape, kv_shape, mask, causal, dropout_p, dtype, layout, alibi);
  require_close(fused.out, reference.out, tolerance);
  require_close(fused.dq, reference.dq, tolerance);
  require_close(fused.dk, reference.dk, tolerance);
  require_close(fused.dv, reference.dv, tolerance);
}

}  // namespace

TEST_CASE("fused attention agrees with the explicit path: no mask", "[attention]") {
  require_paths_agree({2, 3, 5, 4}, {2, 3, 5, 4}, Tensor(), false, 0.0);
}

TEST_CASE("fused attention agrees with the explicit path: cross-attention, long keys", "[attention]") {
  // Sk spans several key tiles, Sq several query tiles.
  require_paths_agree({1, 2, 70, 8}, {1, 2, 300, 8}, Tensor(), false, 0.0);
}

TEST_CASE("fused attention agrees with the explicit path: causal", "[attention]") {
  require_paths_agree({2, 2, 150, 4}, {2, 2, 150, 4}, Tensor(), true, 0.0);
  require_paths_agree({1, 2, 6, 4}, {1, 2, 9, 4}, Tensor(), true, 0.0);  // Sq != Sk
}

TEST_CASE("fused attention agrees with the explicit path: padding mask", "[attention]") {
  require_paths_agree({3, 2, 7, 4}, {3, 2, 7, 4}, nn::padding_mask({7, 3, 1}, 7), false, 0.0);
}

TEST_CASE("fused attention agrees with the explicit path: causal + padding", "[attention]") {
  const Tensor mask = nn::combine_masks(nn::padding_mask({5, 2}, 5), nn::causal_mask(5, 5));
  require_paths_agree({2, 2, 5, 4}, {2, 2, 5, 4}, mask, false, 0.0);
  require_paths_agree({2, 2, 5, 4}, {2, 2, 5, 4}, nn::padding_mask({5, 2}, 5), true, 0.0);
}

TEST_CASE("fused attention agrees with the explicit path: fully masked rows", "[attention]") {
  // Row 1 of every item may attend nothing: output 0 and gradient 0, no NaN.
  std::vector<bool> allowed(4 * 6, true);
  for (int j = 0; j < 6; ++j) allowed[1 * 6 + j] = false;
  const Tensor mask = from_bools(allowed, {4, 6});
  require_paths_agree({2, 1, 4, 3}, {2, 1, 6, 3}, mask, false, 0.0);
  const Run fused = run(true, {2, 1, 4, 3}, {2, 1, 6, 3}, mask, false, 0.0, DType::f64);
  for (int item = 0; item < 2; ++item) {
    for (int c = 0; c < 3; ++c) {
      REQUIRE(fused.out[(item * 4 + 1) * 3 + c] == 0.0);
      REQUIRE(fused.dq[(item * 4 + 1) * 3 + c] == 0.0);
    }
  }
}

TEST_CASE("fused attention agrees with the explicit path: dropout masks match", "[attention]") {
  require_paths_agree({2, 2, 9, 4}, {2, 2, 11, 4}, Tensor(), false, 0.3);
  require_paths_agree({1, 2, 70, 4}, {1, 2, 70, 4}, Tensor(), true, 0.2);
}

TEST_CASE("fused attention agrees with the explicit path in f32", "[attention]") {
  require_paths_agree({2, 4, 100, 16}, {2, 4, 130, 16}, Tensor(), true, 0.0, DType::f32);
}

TEST_CASE("fused attention rejects bad shapes with the shapes in the message", "[attention]") {
  const Tensor q = zeros({2, 3, 4}), k = zeros({2, 5, 3}), v = zeros({2, 5, 4});
  REQUIRE_THROWS_WITH(scaled_dot_product_attention(q, k, v),
                      Catch::Contains("[2, 3, 4]") && Catch::Contains("[2, 5, 3]"));
  REQUIRE_THROWS_AS(scaled_dot_product_attention(q, zeros({2, 5, 4}), v, zeros({3, 5})), Error);
}

namespace {

// One run on heads split from [B, S, H, width] leaves, as MultiHeadAttention's split_heads does
// (a transpose): as they are (the kernel reads them in place), or copied to contiguous
// [B, H, S, width] first (the kernel gets [N, S, width]).
Run run_split_heads(bool in_place, int64_t sq, int64_t sk, int64_t head_dim, int64_t value_dim,
                    const Tensor& mask, bool causal, double dropout_p, DType dtype) {
  constexpr int64_t batch = 2, heads = 3;
  manual_seed(11);
  Tensor q_rows = uniform({batch, sq, heads, head_dim}, -1, 1, dtype).requires_grad_();
  Tensor k_rows = uniform({batch, sk, heads, head_dim}, -1, 1, dtype).requires_grad_();
  Tensor v_rows = uniform({batch, sk, heads, value_dim}, -1, 1, dtype).requires_grad_();
  Tensor probe = uniform({batch, heads, sq, value_dim}, -1, 1, dtype);
  const auto heads_of = [&](const Tensor& rows) {
    return in_place ? rows.transpose(1, 2) : rows.transpose(1, 2).contiguous();
  };
  Tensor out = scaled_dot_product_attention(heads_of(q_rows), heads_of(k_rows), heads_of(v_rows),
                                            mask, causal, dropout_p);
  // The in-place path hands back a [B, H, Sq, value_dim] view of a [B, Sq, H, value_dim] output.
  REQUIRE(out.is_contiguous() != in_place);
  sum(out * probe).backward();
  return {out.to_host_f64(), q_rows.grad().to_host_f64(), k_rows.grad().to_host_f64(),
          v_rows.grad().to_host_f64()};
}

}  // namespace

TEST_CASE("fused attention reads split heads in place: the same values as contiguous heads",
          "[attention]") {
  for (const DType dtype : {DType::f32, DType::f64}) {
    for (const auto& [sq, sk, head_dim, value_dim] :
         std::vector<std::array<int64_t, 4>>{{5, 5, 4, 4}, {33, 70, 16, 8}, {130, 130, 32, 32}}) {
      // [B, 1, 1, Sk]: item 1 sees only its first half of the keys (a padded sequence)
      const Tensor padding = nn::padding_mask({sk, (sk + 1) / 2}, sk);
      for (const bool causal : {false, true}) {
        for (const bool masked : {false, true}) {
          for (const double dropout_p : {0.0, 0.25}) {
            INFO(dtype_name(dtype) << " sq " << sq << " sk " << sk << " head_dim " << head_dim
                                   << " value_dim " << value_dim << (causal ? " causal" : "")
                                   << (masked ? " masked" : "") << " dropout " << dropout_p);
            const Tensor mask = masked ? padding : Tensor();
            const Run in_place =
                run_split_heads(true, sq, sk, head_dim, value_dim, mask, causal, dropout_p, dtype);
            const Run copied =
                run_split_heads(false, sq, sk, head_dim, value_dim, mask, causal, dropout_p, dtype);
            REQUIRE(in_place.out == copied.out);  // the same arithmetic, in another layout
            REQUIRE(in_place.dq == copied.dq);
            REQUIRE(in_place.dk == copied.dk);
            REQUIRE(in_place.dv == copied.dv);
          }
        }
      }
    }
  }
}

namespace {

// The fused op with a sparse layout and/or ALiBi against the explicit path given the dense
// equivalents, in f64 and f32.
void require_layout_agrees(const Shape& shape, const SparsityLayout& layout, bool alibi,
                           bool causal, const Tensor& mask = Tensor()) {
  for (DType dtype : {DType::f64, DType::f32}) {
    INFO(dtype_name(dtype) << ", kind " << int(layout.kind) << ", alibi " << alibi << ", causal " << causal);
    require_paths_agree(shape, shape, mask, causal, 0.0, dtype, layout, alibi);
  }
}

}  // namespace

// 300 positions: several query tiles (64) and key tiles (128) on the CPU, so tiles are skipped.
TEST_CASE("fused attention of a few query rows (decoding) reads K and V in place and agrees", "[attention]") {
  // Up to 4 query rows take the kernel's in-place path (dot products with the keys where they
  // lie, no transposed copy): incremental decoding's one new position over a long cache.
  for (int64_t sq : {1, 2, 4, 5}) {
    for (const DType dtype : {DType::f32, DType::f64}) {
      INFO("sq " << sq << " " << dtype_name(dtype));
      const Tensor padding = nn::padding_mask({300, 170}, 300);  // [2, 1, 1, 300]
      require_paths_agree({2, 3, sq, 32}, {2, 3, 300, 32}, Tensor(), false, 0.0, dtype);
      require_paths_agree({2, 3, sq, 32}, {2, 3, 300, 32}, padding, false, 0.0, dtype);
      require_paths_agree({2, 3, sq, 32}, {2, 3, 300, 32}, Tensor(), false, 0.0, dtype,
                          {.kind = SparsityKind::local, .window = 40}, true);
      if (sq == 1) continue;  // (one query row: the split heads are contiguous already)
      const Run in_place = run_split_heads(true, sq, 300, 32, 16, padding, false, 0.0, dtype);
      const Run copied = run_split_heads(false, sq, 300, 32, 16, padding, false, 0.0, dtype);
      REQUIRE(in_place.out == copied.out);  // the same dot products, rows another distance apart
    }
  }
}

TEST_CASE("fused attention with a local window agrees with its dense mask", "[attention][sparse]") {
  const SparsityLayout local{.kind = SparsityKind::local, .window = 37};
  require_layout_agrees({1, 2, 300, 8}, local, false, false);
  require_layout_agrees({1, 2, 300, 8}, local, false, true);
  require_layout_agrees({2, 1, 20, 4}, {.kind = SparsityKind::local, .window = 1}, false, true);
}

TEST_CASE("fused attention with a dilated band agrees with its dense mask", "[attention][sparse]") {
  require_layout_agrees({1, 2, 300, 8}, {.kind = SparsityKind::band, .window = 4, .dilation = 30},
                        false, false);
  require_layout_agrees({1, 2, 300, 8}, {.kind = SparsityKind::band, .window = 3, .dilation = 2},
                        false, true);
}

TEST_CASE("fused attention with bigbird agrees with its dense mask", "[attention][sparse]") {
  const SparsityLayout bigbird{.kind = SparsityKind::bigbird, .window = 9, .random_blocks = 1,
                               .global_tokens = 2, .seed = 7};
  require_layout_agrees({1, 2, 300, 8}, bigbird, false, false);
  require_layout_agrees({1, 2, 300, 8}, bigbird, false, true);
}

TEST_CASE("fused attention with ALiBi agrees with the explicit bias", "[attention][alibi]") {
  require_layout_agrees({2, 4, 150, 8}, {}, true, false);
  require_layout_agrees({2, 4, 150, 8}, {}, true, true);
  // with a window and a padding mask on top
  require_layout_agrees({2, 2, 40, 4}, {.kind = SparsityKind::local, .window = 6}, true, true,
                        nn::padding_mask({40, 37}, 40));
}

TEST_CASE("fused attention rejects a bad layout or ALiBi without heads", "[attention][sparse]") {
  const Tensor q = zeros({2, 5, 4}), three_d = zeros({2, 5, 4});
  REQUIRE_THROWS_AS(scaled_dot_product_attention(q, q, q, Tensor(), false, 0.0, {},
                                                 {.kind = SparsityKind::local, .window = 0}),
                    Error);
  REQUIRE_THROWS_AS(scaled_dot_product_attention(zeros({5, 4}), zeros({5, 4}), zeros({5, 4}),
                                                 Tensor(), false, 0.0, {}, {}, true),
                    Error);
  REQUIRE_NOTHROW(scaled_dot_product_attention(three_d, three_d, three_d, Tensor(), false, 0.0, {}, {}, true));
}

namespace {

// packed_self_attention on one leaf qkv [B, S, 3 H d] against the explicit path on its three
// slices (taped views of a second leaf with the same values): output and the gradient of qkv.
void require_packed_agrees(int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                           const Tensor& mask, bool causal, double dropout_p, DType dtype,
                           const SparsityLayout& layout = {}, bool alibi = false) {
  INFO("B " << batch << ", S " << seq << ", H " << heads << ", d " << head_dim << ", causal " << causal
            << ", dropout " << dropout_p << ", " << dtype_name(dtype));
  manual_seed(11);
  const int64_t hidden = heads * head_dim;
  const Tensor values = uniform({batch, seq, 3 * hidden}, -1, 1, dtype);
  const Tensor probe = uniform({batch, heads, seq, head_dim}, -1, 1, dtype);
  const auto slices = [&](const Tensor& qkv) {
    const Tensor split = qkv.view({batch, seq, 3, heads, head_dim});
    std::array<Tensor, 3> out;
    for (int64_t i = 0; i < 3; ++i) out[i] = split.narrow(2, i, 1).squeeze(2).transpose(1, 2);
    return out;
  };
  Tensor packed = values.detach().contiguous().requires_grad_();
  set_rng_state({5, 0});
  const Tensor fused = packed_self_attention(packed, heads, mask, causal, dropout_p, {}, layout, alibi);
  sum(fused * probe).backward();

  Tensor reference = values.detach().contiguous().requires_grad_();
  const auto [q, k, v] = slices(reference);
  Tensor allowed = mask;
  if (layout.kind != SparsityKind::full) {
    const Tensor pattern = sparsity_mask(layout, seq, seq);
    allowed = mask.defined() ? nn::combine_masks(mask, pattern) : pattern;
  }
  const Tensor bias = alibi ? alibi_bias(heads, seq, seq, dtype) : Tensor();
  set_rng_state({5, 0});
  const Tensor expected = nn::explicit_attention(q, k, v, allowed, causal, dropout_p, bias).first;
  sum(expected * probe).backward();

  const double tolerance = dtype == DType::f64 ? 1e-10 : 1e-5;
  require_close(fused.to_host_f64(), expected.to_host_f64(), tolerance);
  require_close(packed.grad().to_host_f64(), reference.grad().to_host_f64(), tolerance);
  REQUIRE(packed.grad().shape() == Shape{batch, seq, 3 * hidden});
}

}  // namespace

TEST_CASE("packed self-attention agrees with the explicit path on its slices", "[attention][packed]") {
  for (DType dtype : {DType::f64, DType::f32}) {
    require_packed_agrees(2, 5, 3, 4, Tensor(), false, 0.0, dtype);
    require_packed_agrees(2, 70, 2, 8, Tensor(), true, 0.0, dtype);  // two query tiles, causal bands
    require_packed_agrees(3, 9, 2, 5, nn::padding_mask({9, 4, 6}, 9), false, 0.0, dtype);
    require_packed_agrees(2, 7, 2, 3, nn::padding_mask({7, 5}, 7), true, 0.3, dtype);
    require_packed_agrees(1, 70, 2, 4, Tensor(), true, 0.0, dtype,
                          {.kind = SparsityKind::local, .window = 9}, /*alibi=*/true);
  }
}

// Long enough that the CPU kernel's backward sums dK, dV (10 query tiles) and dQ (up to 5 key
// tiles) in scratch and adds them into the strided gradient once (Sums in cpu/fast/attention.cpp);
// the baseline path (FastPathsOff) adds every tile's product in place.
TEST_CASE("packed self-attention on long sequences: gradients summed apart agree", "[attention][packed]") {
  for (bool baseline : {false, true}) {
    INFO((baseline ? "baseline path" : "fast paths"));
    std::optional<cpu::FastPathsOff> plain;
    if (baseline) plain.emplace();
    require_packed_agrees(1, 600, 2, 32, Tensor(), true, 0.0, DType::f32);
    require_packed_agrees(2, 520, 3, 16, nn::padding_mask({520, 300}, 520), false, 0.0, DType::f32);
  }
}

namespace {

// The thread count for one scope, restored after it.
struct ThreadsFor {
  int before = num_threads();
  explicit ThreadsFor(int threads) { set_num_threads(threads); }
  ~ThreadsFor() { set_num_threads(before); }
};

// Cross-attention on heads split from projections (q [B, Sq, H d] and kv [B, Sk, 2 H d] viewed as
// [B, H, S, d], each head's rows a projection's row apart) against the explicit path on
// contiguous copies: output and the three gradients.
void require_split_heads_agree(int64_t batch, int64_t sq, int64_t sk, int64_t heads,
                               int64_t head_dim, const Tensor& mask, DType dtype) {
  INFO("B " << batch << ", Sq " << sq << ", Sk " << sk << ", H " << heads << ", "
            << dtype_name(dtype) << ", mask " << mask.defined());
  manual_seed(12);
  const Tensor q_values = uniform({batch, sq, heads * head_dim}, -1, 1, dtype);
  const Tensor kv_values = uniform({batch, sk, 2 * heads * head_dim}, -1, 1, dtype);
  const Tensor probe = uniform({batch, heads, sq, head_dim}, -1, 1, dtype);
  const auto heads_of = [&](const Tensor& q, const Tensor& kv) {
    const Tensor split_kv = kv.view({batch, sk, 2, heads, head_dim});
    return std::array<Tensor, 3>{q.view({batch, sq, heads, head_dim}).transpose(1, 2),
                                 split_kv.narrow(2, 0, 1).squeeze(2).transpose(1, 2),
                                 split_kv.narrow(2, 1, 1).squeeze(2).transpose(1, 2)};
  };
  Tensor q_leaf = q_values.detach().contiguous().requires_grad_();
  Tensor kv_leaf = kv_values.detach().contiguous().requires_grad_();
  const auto [q, k, v] = heads_of(q_leaf, kv_leaf);
  const Tensor fused = scaled_dot_product_attention(q, k, v, mask);
  sum(fused * probe).backward();

  Tensor q_ref = q_values.detach().contiguous().requires_grad_();
  Tensor kv_ref = kv_values.detach().contiguous().requires_grad_();
  const auto [q2, k2, v2] = heads_of(q_ref, kv_ref);
  const Tensor expected =
      nn::explicit_attention(q2.contiguous(), k2.contiguous(), v2.contiguous(), mask, false, 0.0)
          .first;
  sum(expected * probe).backward();

  const double tolerance = dtype == DType::f64 ? 1e-10 : 1e-5;
  require_close(fused.to_host_f64(), expected.to_host_f64(), tolerance);
  require_close(q_leaf.grad().to_host_f64(), q_ref.grad().to_host_f64(), tolerance);
  require_close(kv_leaf.grad().to_host_f64(), kv_ref.grad().to_host_f64(), tolerance);
}

}  // namespace

// The CPU kernel copies one batch element's heads, position by position, where they were split
// from a projection and the batch has at least two elements a thread (cpu/fast/attention.cpp,
// "Heads split from a projection"): every option, at one thread and at four. (A batch of one keeps
// a unit a head: the tests above.)
TEST_CASE("attention on heads split from a projection: a unit a batch element agrees",
          "[attention][packed]") {
  for (int threads : {1, 4}) {
    INFO("threads " << threads);
    const ThreadsFor scope(threads);
    for (DType dtype : {DType::f64, DType::f32}) {
      require_packed_agrees(8, 70, 3, 8, Tensor(), true, 0.0, dtype);  // two query tiles
      require_packed_agrees(5, 9, 2, 5, nn::padding_mask({9, 4, 6, 1, 8}, 9), false, 0.0, dtype);
      require_packed_agrees(4, 7, 2, 3, nn::padding_mask({7, 5, 2, 6}, 7), true, 0.3, dtype);
      require_packed_agrees(6, 40, 2, 4, Tensor(), true, 0.0, dtype,
                            {.kind = SparsityKind::local, .window = 9}, /*alibi=*/true);
      require_split_heads_agree(6, 7, 11, 3, 8, Tensor(), dtype);  // Sk > Sq
      require_split_heads_agree(5, 13, 6, 2, 4, nn::padding_mask({6, 3, 5, 1, 4}, 6), dtype);
    }
  }
}

TEST_CASE("packed self-attention in bf16 and under autocast: close to f32", "[attention][packed]") {
  manual_seed(3);
  const Tensor values = uniform({2, 6, 12}, -1, 1);
  const Tensor f32 = packed_self_attention(values, 2, Tensor(), true);
  const Tensor bf16 = packed_self_attention(values.to(DType::bf16), 2, Tensor(), true);
  REQUIRE(bf16.dtype() == DType::bf16);
  require_close(bf16.to_host_f64(), f32.to_host_f64(), 2e-2);
  Tensor leaf = values.detach().contiguous().requires_grad_();
  {
    const Autocast autocast(DType::bf16);
    sum(packed_self_attention(leaf, 2, Tensor(), true).to(DType::f32)).backward();
  }
  REQUIRE(leaf.grad().dtype() == DType::f32);
  REQUIRE(leaf.grad().shape() == Shape{2, 6, 12});
}

TEST_CASE("packed self-attention rejects a qkv that does not split into heads", "[attention][packed]") {
  const Tensor qkv = zeros({2, 5, 12});
  REQUIRE_THROWS_WITH(packed_self_attention(qkv, 5), Catch::Contains("packed_self_attention") &&
                                                         Catch::Contains("[2, 5, 12]"));
  REQUIRE_THROWS_AS(packed_self_attention(zeros({2, 12}), 2), Error);
  REQUIRE_THROWS_AS(packed_self_attention(qkv, 0), Error);
  REQUIRE_THROWS_AS(packed_self_attention(Tensor(), 2), Error);
}

// ---- A learned relative bias inside the kernel (T5's, ops/attention.h relative_bias) ------------

namespace {

// The dense [H, Sq, Sk] bias that a relative bias [H, Sq + Sk - 1] stands for, written out:
// entry (h, i, j) is relative[h, j - i + Sq - 1].
std::vector<double> dense_relative(const std::vector<double>& relative, int64_t heads, int64_t sq,
                                   int64_t sk) {
  std::vector<double> dense(heads * sq * sk);
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < sq; ++i) {
      for (int64_t j = 0; j < sk; ++j) {
        dense[(h * sq + i) * sk + j] = relative[h * (sq + sk - 1) + j - i + sq - 1];
      }
    }
  }
  return dense;
}

// The fused op with a relative bias (a leaf) against the explicit path with its dense form (a
// leaf written out by hand): outputs, dq, dk, dv, and the relative bias's gradient, which must be
// the dense bias's gradient summed along each diagonal j - i (added up here by hand).
void require_relative_agrees(const Shape& q_shape, int64_t sk, bool causal, DType dtype,
                             const SparsityLayout& layout = {}, const Tensor& mask = Tensor()) {
  const int64_t batch = q_shape[0], heads = q_shape[1], sq = q_shape[2], d = q_shape[3];
  INFO("B " << batch << ", H " << heads << ", Sq " << sq << ", Sk " << sk << ", causal " << causal
            << ", layout " << int(layout.kind) << ", " << dtype_name(dtype));
  manual_seed(21);
  const Tensor values = uniform({heads, sq + sk - 1}, -2, 2, dtype);
  const Tensor relative = values.detach().contiguous().requires_grad_();
  const Tensor dense = from_values(dense_relative(values.to_host_f64(), heads, sq, sk),
                                   {heads, sq, sk}, dtype).requires_grad_();
  const Shape kv_shape{batch, heads, sk, d};
  const Tensor q = uniform(q_shape, -1, 1, dtype), k = uniform(kv_shape, -1, 1, dtype);
  const Tensor v = uniform(kv_shape, -1, 1, dtype), probe = uniform(q_shape, -1, 1, dtype);
  std::vector<std::vector<double>> grads[2];  // fused, explicit: dq, dk, dv
  std::vector<double> outputs[2];
  for (const bool fused : {true, false}) {
    const Tensor qs = q.detach().contiguous().requires_grad_();
    const Tensor ks = k.detach().contiguous().requires_grad_();
    const Tensor vs = v.detach().contiguous().requires_grad_();
    Tensor out;
    if (fused) {
      out = scaled_dot_product_attention(qs, ks, vs, mask, causal, 0.0, {}, layout, false,
                                         relative);
    } else {
      Tensor allowed = mask;
      if (layout.kind != SparsityKind::full) {
        const Tensor pattern = sparsity_mask(layout, sq, sk);
        allowed = mask.defined() ? nn::combine_masks(mask, pattern) : pattern;
      }
      out = nn::explicit_attention(qs, ks, vs, allowed, causal, 0.0, dense).first;
    }
    sum(out * probe).backward();
    outputs[fused ? 0 : 1] = out.to_host_f64();
    grads[fused ? 0 : 1] = {qs.grad().to_host_f64(), ks.grad().to_host_f64(),
                            vs.grad().to_host_f64()};
  }
  const double tolerance = dtype == DType::f64 ? 1e-10 : 2e-5;
  require_close(outputs[0], outputs[1], tolerance);
  for (int which = 0; which < 3; ++which) {
    require_close(grads[0][which], grads[1][which], tolerance);
  }
  const std::vector<double> dense_grad = dense.grad().to_host_f64();
  std::vector<double> diagonals(heads * (sq + sk - 1), 0.0);
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < sq; ++i) {
      for (int64_t j = 0; j < sk; ++j) {
        diagonals[h * (sq + sk - 1) + j - i + sq - 1] += dense_grad[(h * sq + i) * sk + j];
      }
    }
  }
  require_close(relative.grad().to_host_f64(), diagonals, dtype == DType::f64 ? 1e-9 : 1e-4);
}

}  // namespace

TEST_CASE("fused attention with a relative bias: forward by plain loops", "[attention][relative]") {
  // out_i = sum_j softmax_j(q_i . k_j / sqrt(d) + relative[h, j - i + Sq - 1]) v_j, one head at a
  // time, Sq 3 and Sk 4 (offsets -2 .. 3)
  manual_seed(22);
  const int64_t heads = 2, sq = 3, sk = 4, d = 2;
  const Tensor q = uniform({1, heads, sq, d}, -1, 1, DType::f64);
  const Tensor k = uniform({1, heads, sk, d}, -1, 1, DType::f64);
  const Tensor v = uniform({1, heads, sk, d}, -1, 1, DType::f64);
  const Tensor relative = uniform({heads, sq + sk - 1}, -3, 3, DType::f64);
  const std::vector<double> got =
      scaled_dot_product_attention(q, k, v, Tensor(), false, 0.0, {}, {}, false, relative)
          .to_host_f64();
  const std::vector<double> qs = q.to_host_f64(), ks = k.to_host_f64(), vs = v.to_host_f64();
  const std::vector<double> bias = relative.to_host_f64();
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < sq; ++i) {
      std::vector<double> weights(sk);
      double total = 0;
      for (int64_t j = 0; j < sk; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < d; ++c) dot += qs[(h * sq + i) * d + c] * ks[(h * sk + j) * d + c];
        weights[j] = std::exp(dot / std::sqrt(2.0) + bias[h * (sq + sk - 1) + j - i + sq - 1]);
        total += weights[j];
      }
      for (int64_t c = 0; c < d; ++c) {
        double expected = 0;
        for (int64_t j = 0; j < sk; ++j) expected += weights[j] / total * vs[(h * sk + j) * d + c];
        REQUIRE(got[(h * sq + i) * d + c] == Approx(expected).margin(1e-13));
      }
    }
  }
}

TEST_CASE("fused attention with a relative bias agrees with its dense form, gradients included",
          "[attention][relative]") {
  for (DType dtype : {DType::f64, DType::f32}) {
    require_relative_agrees({2, 3, 6, 4}, 6, false, dtype);
    require_relative_agrees({1, 2, 70, 8}, 300, false, dtype);  // query and key tiles, Sq != Sk
    require_relative_agrees({2, 2, 150, 4}, 150, true, dtype);  // causal bands on the diagonal
    require_relative_agrees({2, 2, 40, 4}, 40, true, dtype, {}, nn::padding_mask({40, 23}, 40));
    require_relative_agrees({1, 2, 300, 8}, 300, false, dtype,
                            {.kind = SparsityKind::local, .window = 37});
    require_relative_agrees({1, 2, 140, 4}, 140, true, dtype,
                            {.kind = SparsityKind::bigbird, .window = 5, .random_blocks = 1,
                             .global_tokens = 2, .seed = 3});
  }
}

TEST_CASE("packed self-attention with a relative bias agrees with the op on its slices",
          "[attention][relative][packed]") {
  manual_seed(23);
  const int64_t batch = 2, seq = 70, heads = 2, head_dim = 4, hidden = heads * head_dim;
  const Tensor values = uniform({batch, seq, 3 * hidden}, -1, 1, DType::f64);
  const Tensor bias_values = uniform({heads, 2 * seq - 1}, -1, 1, DType::f64);
  const Tensor probe = uniform({batch, heads, seq, head_dim}, -1, 1, DType::f64);
  std::vector<double> outputs[2], bias_grads[2];
  for (const bool packed : {true, false}) {
    const Tensor qkv = values.detach().contiguous().requires_grad_();
    const Tensor bias = bias_values.detach().contiguous().requires_grad_();
    Tensor out;
    if (packed) {
      out = packed_self_attention(qkv, heads, Tensor(), true, 0.0, {}, {}, false, bias);
    } else {
      const Tensor split = qkv.view({batch, seq, 3, heads, head_dim});
      const auto slice = [&](int64_t i) {
        return split.narrow(2, i, 1).squeeze(2).transpose(1, 2);
      };
      out = scaled_dot_product_attention(slice(0), slice(1), slice(2), Tensor(), true, 0.0, {}, {},
                                         false, bias);
    }
    sum(out * probe).backward();
    outputs[packed ? 0 : 1] = out.to_host_f64();
    bias_grads[packed ? 0 : 1] = bias.grad().to_host_f64();
  }
  require_close(outputs[0], outputs[1], 1e-12);
  require_close(bias_grads[0], bias_grads[1], 1e-11);
}

TEST_CASE("fused attention with a relative bias under autocast: f32 bias, close to f32",
          "[attention][relative]") {
  manual_seed(24);
  const Tensor q = uniform({1, 2, 9, 4}, -1, 1), k = uniform({1, 2, 9, 4}, -1, 1);
  const Tensor v = uniform({1, 2, 9, 4}, -1, 1);
  const Tensor relative = uniform({2, 17}, -1, 1).requires_grad_();
  const Tensor f32 =
      scaled_dot_product_attention(q, k, v, Tensor(), true, 0.0, {}, {}, false, relative);
  Tensor half;
  {
    const Autocast autocast(DType::bf16);
    half = scaled_dot_product_attention(q, k, v, Tensor(), true, 0.0, {}, {}, false, relative);
  }
  REQUIRE(half.dtype() == DType::bf16);
  require_close(half.to_host_f64(), f32.to_host_f64(), 3e-2);
  sum(half.to(DType::f32)).backward();
  REQUIRE(relative.grad().dtype() == DType::f32);
  REQUIRE(relative.grad().shape() == Shape{2, 17});
}

TEST_CASE("fused attention refuses a relative bias of the wrong shape", "[attention][relative]") {
  const Tensor q = zeros({1, 2, 5, 4}), k = zeros({1, 2, 7, 4});
  REQUIRE_THROWS_WITH(
      scaled_dot_product_attention(q, k, k, Tensor(), false, 0.0, {}, {}, false, zeros({2, 10})),
      Catch::Contains("scaled_dot_product_attention") && Catch::Contains("[2, 11]") &&
          Catch::Contains("[2, 10]"));
  REQUIRE_THROWS_AS(
      scaled_dot_product_attention(q, k, k, Tensor(), false, 0.0, {}, {}, false, zeros({3, 11})),
      Error);
  const Tensor flat = zeros({5, 4});  // no heads dim
  REQUIRE_THROWS_AS(scaled_dot_product_attention(flat, flat, flat, Tensor(), false, 0.0, {}, {},
                                                 false, zeros({1, 9})),
                    Error);
  REQUIRE_THROWS_AS(relative_bias_dense(zeros({2, 10}), 5, 7), Error);
  // relative_bias_dense: entry (h, i, j) = relative[h, j - i + Sq - 1]
  const Tensor relative = from_values({0, 1, 2, 3, 10, 11, 12, 13}, {2, 4}, DType::f64);
  REQUIRE(relative_bias_dense(relative, 2, 3).to_host_f64() ==
          std::vector<double>{1, 2, 3, 0, 1, 2, 11, 12, 13, 10, 11, 12});
}
