// Performer (nn/performer.h): the random features (orthogonal blocks, chi norms, reproducible from
// the seed alone), the attention against a direct f64 host loop of the FAVOR+ formula (non-causal,
// causal, padding, keys large enough to need the stabilizer), and against exact softmax attention
// with many features.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/nn/attention.h"
#include "tapegrad/nn/masks.h"
#include "tapegrad/nn/performer.h"
#include "tapegrad/ops/ops.h"
#include "tapegrad/runtime/autocast.h"

using namespace tg;

namespace {

double row_dot(const std::vector<double>& m, int64_t a, int64_t b, int64_t d) {
  double total = 0;
  for (int64_t c = 0; c < d; ++c) total += m[a * d + c] * m[b * d + c];
  return total;
}

struct Heads {
  int64_t items, sq, sk, d, dv;  // items = B * H
};

// FAVOR+ straight from its definition, in f64 with no stabilizer: for each head,
// phi(x)_m = exp(w_m . x' - |x'|^2 / 2) / sqrt(M), x' = x d^(-1/4), and
// out_i = sum_j (phi(q_i) . phi(k_j)) v_j / sum_j phi(q_i) . phi(k_j) over the visible keys j
// (j <= i when causal, j < length of the item), 0 when there are none.
std::vector<double> favor_on_host(const std::vector<double>& q, const std::vector<double>& k,
                                  const std::vector<double>& v, const std::vector<double>& w,
                                  int64_t features, const Heads& s, bool causal,
                                  const std::vector<int64_t>& lengths, int64_t heads_per_item) {
  const double scale = std::pow(static_cast<double>(s.d), -0.25);
  const auto phi = [&](const double* x) {
    std::vector<double> result(features);
    double square = 0;
    for (int64_t c = 0; c < s.d; ++c) square += (x[c] * scale) * (x[c] * scale);
    for (int64_t m = 0; m < features; ++m) {
      double dot = 0;
      for (int64_t c = 0; c < s.d; ++c) dot += w[m * s.d + c] * x[c] * scale;
      result[m] = std::exp(dot - square / 2) / std::sqrt(static_cast<double>(features));
    }
    return result;
  };
  std::vector<double> out(s.items * s.sq * s.dv, 0.0);
  for (int64_t item = 0; item < s.items; ++item) {
    const int64_t length = lengths.empty() ? s.sk : lengths[item / heads_per_item];
    for (int64_t i = 0; i < s.sq; ++i) {
      const std::vector<double> pq = phi(&q[(item * s.sq + i) * s.d]);
      double denominator = 0;
      std::vector<double> numerator(s.dv, 0.0);
      for (int64_t j = 0; j < s.sk; ++j) {
        if (j >= length || (causal && j > i)) continue;
        const std::vector<double> pk = phi(&k[(item * s.sk + j) * s.d]);
        double a = 0;
        for (int64_t m = 0; m < features; ++m) a += pq[m] * pk[m];
        denominator += a;
        for (int64_t c = 0; c < s.dv; ++c) numerator[c] += a * v[(item * s.sk + j) * s.dv + c];
      }
      for (int64_t c = 0; c < s.dv; ++c) {
        out[(item * s.sq + i) * s.dv + c] = denominator > 0 ? numerator[c] / denominator : 0.0;
      }
    }
  }
  return out;
}

void require_relatively_close(const std::vector<double>& a, const std::vector<double>& b,
                              double tolerance) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("element " << i);
    REQUIRE(std::isfinite(a[i]));
    REQUIRE(a[i] == Approx(b[i]).epsilon(tolerance).margin(tolerance));
  }
}

Tensor key_padding(const std::vector<int64_t>& lengths, int64_t sk) {
  std::vector<bool> real;
  for (int64_t length : lengths) {
    for (int64_t j = 0; j < sk; ++j) real.push_back(j < length);
  }
  return from_bools(real, {static_cast<int64_t>(lengths.size()), sk});
}

// Random heads [B, H, S, d] and the host loop's result on them, for one configuration.
void require_matches_host(const Shape& q_shape, const Shape& kv_shape, int64_t features,
                          bool causal, const std::vector<int64_t>& lengths, double key_range = 1.0,
                          DType dtype = DType::f64, double tolerance = 1e-10) {
  manual_seed(43);
  const Tensor q = uniform(q_shape, -1, 1, DType::f64);
  const Tensor k = uniform(kv_shape, -key_range, key_range, DType::f64);
  const Tensor v = uniform({kv_shape[0], kv_shape[1], kv_shape[2], 3}, -1, 1, DType::f64);
  const Tensor w = nn::performer_features(features, q_shape[3], 77, DType::f64);
  const Tensor padding = lengths.empty() ? Tensor() : key_padding(lengths, kv_shape[2]);
  const Tensor out =
      nn::performer_attention(q.to(dtype), k.to(dtype), v.to(dtype), w.to(dtype), padding, causal);
  REQUIRE(out.dtype() == dtype);
  REQUIRE(out.shape() == Shape{q_shape[0], q_shape[1], q_shape[2], 3});
  const Heads s{q_shape[0] * q_shape[1], q_shape[2], kv_shape[2], q_shape[3], 3};
  const std::vector<double> expected =
      favor_on_host(q.to_host_f64(), k.to_host_f64(), v.to_host_f64(), w.to_host_f64(), features, s,
                    causal, lengths, q_shape[1]);
  require_relatively_close(out.to_host_f64(), expected, tolerance);
}

}  // namespace

TEST_CASE("performer_features: orthogonal rows within each block, chi(d) norms", "[performer]") {
  const int64_t d = 8, features = 4096;
  const std::vector<double> w = nn::performer_features(features, d, 1, DType::f64).to_host_f64();
  REQUIRE(w.size() == static_cast<size_t>(features * d));
  double mean_square = 0;
  for (int64_t r = 0; r < features; ++r) {
    const double norm = std::sqrt(row_dot(w, r, r, d));
    REQUIRE(norm > 0);
    mean_square += norm * norm / features;
    for (int64_t s = (r / d) * d; s < r; ++s) {  // the earlier rows of the same block
      INFO("rows " << s << " and " << r);
      REQUIRE(std::abs(row_dot(w, r, s, d)) <
              1e-12 * norm * std::sqrt(row_dot(w, s, s, d)) + 1e-12);
    }
  }
  // E|w|^2 = d for a chi(d) norm; 4096 draws of variance 2d put the mean within 3% of d.
  REQUIRE(mean_square == Approx(static_cast<double>(d)).epsilon(0.05));
  // Rows of different blocks are not orthogonal in general (independent blocks).
  REQUIRE(std::abs(row_dot(w, 0, d, d)) > 1e-6);
}

TEST_CASE("performer_features: reproducible from the seed alone; the last block truncated",
          "[performer]") {
  manual_seed(5);
  const RngState before = rng_state();
  const std::vector<double> a = nn::performer_features(10, 4, 123, DType::f64).to_host_f64();
  REQUIRE(rng_state().seed == before.seed);
  REQUIRE(rng_state().offset == before.offset);
  manual_seed(999);  // the global generator plays no part
  REQUIRE(nn::performer_features(10, 4, 123, DType::f64).to_host_f64() == a);
  REQUIRE(nn::performer_features(10, 4, 124, DType::f64).to_host_f64() != a);
  // The last block is truncated: 10 = 4 + 4 + 2 rows, and rows 8 and 9 are orthogonal.
  REQUIRE(std::abs(row_dot(a, 8, 9, 4)) <
          1e-12 * std::sqrt(row_dot(a, 8, 8, 4) * row_dot(a, 9, 9, 4)));
  // Blocks do not depend on M: fewer features are the first rows of more.
  const std::vector<double> more = nn::performer_features(13, 4, 123, DType::f64).to_host_f64();
  REQUIRE(std::vector<double>(more.begin(), more.begin() + 40) == a);
  // f32 on request.
  const Tensor f32 = nn::performer_features(10, 4, 123);
  REQUIRE(f32.dtype() == DType::f32);
  REQUIRE(f32.shape() == Shape{10, 4});
  REQUIRE_THROWS_AS(nn::performer_features(0, 4, 1), Error);
}

TEST_CASE("performer: non-causal matches the host loop of FAVOR+", "[performer]") {
  require_matches_host({2, 2, 5, 4}, {2, 2, 7, 4}, 10, false, {});
}

TEST_CASE("performer: causal matches the host loop, also with Sq != Sk", "[performer]") {
  require_matches_host({2, 2, 6, 4}, {2, 2, 6, 4}, 10, true, {});
  require_matches_host({1, 3, 4, 4}, {1, 3, 7, 4}, 6, true, {});
}

TEST_CASE("performer: padded keys get phi = 0, with and without causal", "[performer]") {
  require_matches_host({2, 2, 5, 4}, {2, 2, 6, 4}, 8, false, {6, 3});
  require_matches_host({2, 2, 6, 4}, {2, 2, 6, 4}, 8, true, {6, 3});
  // Changing the padded keys and values changes nothing.
  manual_seed(47);
  const Tensor q = uniform({2, 1, 3, 4}, -1, 1, DType::f64);
  const Tensor k = uniform({2, 1, 5, 4}, -1, 1, DType::f64);
  const Tensor v = uniform({2, 1, 5, 4}, -1, 1, DType::f64);
  const Tensor w = nn::performer_features(8, 4, 3, DType::f64);
  const Tensor padding = key_padding({5, 2}, 5);
  const Tensor real = padding.reshape({2, 1, 5, 1});
  const std::vector<double> out = nn::performer_attention(q, k, v, w, padding, false).to_host_f64();
  const Tensor k2 = where(real, k, scalar(9.0, DType::f64)),
               v2 = where(real, v, scalar(-9.0, DType::f64));
  require_relatively_close(nn::performer_attention(q, k2, v2, w, padding, false).to_host_f64(), out,
                           1e-12);
}

TEST_CASE("performer: a query that sees no real key gets 0, not NaN, and so does its gradient",
          "[performer]") {
  manual_seed(53);
  Tensor q = uniform({2, 1, 3, 4}, -1, 1, DType::f64).requires_grad_();
  Tensor k = uniform({2, 1, 4, 4}, -1, 1, DType::f64).requires_grad_();
  Tensor v = uniform({2, 1, 4, 4}, -1, 1, DType::f64).requires_grad_();
  const Tensor w = nn::performer_features(8, 4, 3, DType::f64);
  const Tensor out = nn::performer_attention(q, k, v, w, key_padding({4, 0}, 4), false);
  const std::vector<double> values = out.to_host_f64();
  for (size_t i = 12; i < 24; ++i) REQUIRE(values[i] == 0.0);  // item 1 has no real key
  sum(out).backward();
  for (const Tensor& t : {q, k, v}) {
    for (double g : t.grad().to_host_f64()) REQUIRE(std::isfinite(g));
  }
}

TEST_CASE("performer: the stabilizer keeps f32 accurate where the plain features underflow",
          "[performer]") {
  // Keys up to 15 in size: w . k' - |k'|^2 / 2 reaches -300, where exp underflows to 0 in f32
  // (below -103) and every plain feature of a key would be 0 (0 / 0), while the host loop in f64
  // needs no stabilizer. The shift is one per head for the keys, so it cancels in the ratio.
  require_matches_host({2, 2, 4, 8}, {2, 2, 6, 8}, 16, false, {}, 15.0, DType::f64, 1e-9);
  require_matches_host({2, 2, 4, 8}, {2, 2, 6, 8}, 16, false, {}, 15.0, DType::f32, 2e-3);
  // Causal in f64 only: an early query sees few keys, and those may lie far below the head's
  // maximum, the one shift all keys share; f32 can underflow them there (docs/attention.md).
  require_matches_host({2, 2, 6, 8}, {2, 2, 6, 8}, 16, true, {}, 15.0, DType::f64, 1e-9);
  // And the gradients stay finite there.
  manual_seed(59);
  Tensor q = uniform({1, 2, 4, 8}, -1, 1).requires_grad_();
  Tensor k = uniform({1, 2, 6, 8}, -15, 15).requires_grad_();
  Tensor v = uniform({1, 2, 6, 8}, -1, 1).requires_grad_();
  sum(nn::performer_attention(q, k, v, nn::performer_features(16, 8, 2), Tensor(), false))
      .backward();
  for (const Tensor& t : {q, k, v}) {
    for (double g : t.grad().to_host_f64()) REQUIRE(std::isfinite(g));
  }
}

TEST_CASE("performer: with many features it approximates softmax attention", "[performer]") {
  manual_seed(61);
  const Tensor q = uniform({1, 2, 5, 8}, -1, 1, DType::f64);
  const Tensor k = uniform({1, 2, 5, 8}, -1, 1, DType::f64);
  const Tensor v = uniform({1, 2, 5, 8}, -1, 1, DType::f64);
  const auto worst_error = [&](int64_t features, bool causal) {
    const Tensor w = nn::performer_features(features, 8, 11, DType::f64);
    const std::vector<double> approx =
        nn::performer_attention(q, k, v, w, Tensor(), causal).to_host_f64();
    const std::vector<double> exact =
        nn::explicit_attention(q, k, v, Tensor(), causal, 0.0).first.to_host_f64();
    double worst = 0;
    for (size_t i = 0; i < exact.size(); ++i)
      worst = std::max(worst, std::abs(approx[i] - exact[i]));
    return worst;
  };
  for (bool causal : {false, true}) {
    const double many = worst_error(4096, causal), few = worst_error(8, causal);
    INFO("causal " << causal << ": max abs error " << many << " with 4096 features, " << few
                   << " with 8");
    REQUIRE(many < 0.05);
    REQUIRE(many < few);  // the estimate improves with M
  }
}

TEST_CASE("performer under autocast: half q, k, v with the f32 projection, close to f32",
          "[performer][autocast]") {
  // As in a module under autocast: q, k, v come out of half Linears, the projection is an f32
  // buffer. The result must be f32's within the half type's rounding: inputs rounded to 8 (bf16)
  // or 11 (f16) significant bits and matmuls rounded once, through exp; outputs are convex
  // combinations of v in [-1, 1]: 2 units in the last place of 1 (for bf16 2^-6, about
  // PyTorch's bf16 rtol of 1.6e-2).
  manual_seed(67);
  const Tensor q = uniform({2, 2, 6, 8}, -1, 1), k = uniform({2, 2, 6, 8}, -1, 1);
  const Tensor v = uniform({2, 2, 6, 8}, -1, 1);
  const Tensor w = nn::performer_features(16, 8, 5);
  REQUIRE(w.dtype() == DType::f32);
  for (bool causal : {false, true}) {
    const std::vector<double> reference =
        nn::performer_attention(q, k, v, w, Tensor(), causal).to_host_f64();
    for (const auto& [half, ulp] :
         {std::pair{DType::bf16, 0x1p-7}, std::pair{DType::f16, 0x1p-10}}) {
      INFO("causal " << causal << ", " << dtype_name(half));
      Tensor qf = q.clone().requires_grad_(), kf = k.clone().requires_grad_();
      Tensor out;
      {
        const Autocast autocast(half);
        out = nn::performer_attention(qf.to(half), kf.to(half), v.to(half), w, Tensor(), causal);
      }
      require_relatively_close(out.to_host_f64(), reference, 2 * ulp);
      sum(out).backward();  // the gradient reaches the f32 leaves, finite
      REQUIRE(qf.grad().dtype() == DType::f32);
      for (const Tensor& t : {qf, kf}) {
        for (double g : t.grad().to_host_f64()) REQUIRE(std::isfinite(g));
      }
    }
  }
}

TEST_CASE("performer: bad shapes and dtypes are tg::Errors naming performer_attention",
          "[performer]") {
  const Tensor q = zeros({1, 2, 3, 4}, DType::f64), kv = zeros({1, 2, 5, 4}, DType::f64);
  const Tensor w = zeros({6, 4}, DType::f64);
  REQUIRE_THROWS_WITH(
      nn::performer_attention(q, kv, kv, zeros({6, 5}, DType::f64), Tensor(), false),
      Catch::Contains("performer_attention") && Catch::Contains("[6, 5]"));
  REQUIRE_THROWS_WITH(
      nn::performer_attention(q, zeros({1, 2, 5, 3}, DType::f64), kv, w, Tensor(), false),
      Catch::Contains("performer_attention") && Catch::Contains("[1, 2, 5, 3]"));
  REQUIRE_THROWS_WITH(nn::performer_attention(q, kv, kv, w, ones({1, 4}, DType::b8), false),
                      Catch::Contains("key_padding"));
  REQUIRE_THROWS_WITH(nn::performer_attention(q, kv, kv, zeros({6, 4}), Tensor(), false),
                      Catch::Contains("dtype"));
}

TEST_CASE("performer: causal output of query i does not depend on the keys and values after i",
          "[performer]") {
  // Key 0 is long, so its log-features lie about 100 below those of the later keys: one shift
  // taken over all keys underflowed its features to 0 in f32 and query 0 (which sees key 0 alone)
  // got 0 instead of v_0. Then every later key and value is made huge: rows up to i must not move.
  manual_seed(71);
  const int64_t seq = 6, d = 4;
  const Tensor w = nn::performer_features(8, d, 9, DType::f64);
  Tensor k = uniform({1, 2, seq, d}, -1, 1, DType::f64);
  k = cat({k.narrow(2, 0, 1) * 20.0, k.narrow(2, 1, seq - 1)}, 2);
  const Tensor q = uniform({1, 2, seq, d}, -1, 1, DType::f64);
  const Tensor v = uniform({1, 2, seq, 3}, -1, 1, DType::f64);
  for (const auto& [dtype, tolerance] : {std::pair{DType::f64, 1e-12}, std::pair{DType::f32, 1e-5}}) {
    INFO(dtype_name(dtype));
    const auto attend = [&, dtype = dtype](const Tensor& keys, const Tensor& values) {
      return nn::performer_attention(q.to(dtype), keys.to(dtype), values.to(dtype), w.to(dtype),
                                     Tensor(), true)
          .to_host_f64();
    };
    const std::vector<double> out = attend(k, v), values = v.to_host_f64();
    for (int64_t h = 0; h < 2; ++h) {
      for (int64_t c = 0; c < 3; ++c) {  // query 0 sees key 0 only: its output is v_0
        REQUIRE(out[h * seq * 3 + c] == Approx(values[h * seq * 3 + c]).margin(tolerance));
      }
    }
    for (int64_t i = 0; i + 1 < seq; ++i) {
      const int64_t later = seq - 1 - i;
      const Tensor k2 = cat({k.narrow(2, 0, i + 1), k.narrow(2, i + 1, later) * 1e3}, 2);
      const Tensor v2 = cat({v.narrow(2, 0, i + 1), v.narrow(2, i + 1, later) * 1e6 + 5.0}, 2);
      const std::vector<double> changed = attend(k2, v2);
      for (int64_t h = 0; h < 2; ++h) {
        for (int64_t row = 0; row <= i; ++row) {
          for (int64_t c = 0; c < 3; ++c) {
            INFO("keys after " << i << " changed: head " << h << ", row " << row);
            const size_t e = (h * seq + row) * 3 + c;
            REQUIRE(changed[e] == Approx(out[e]).margin(tolerance));
          }
        }
      }
    }
  }
  // And the whole causal result in f32 matches the f64 host loop where the keys are long.
  require_matches_host({2, 2, 6, 8}, {2, 2, 6, 8}, 16, true, {}, 15.0, DType::f32, 2e-3);
}

TEST_CASE("performer: an empty sequence gives an empty output, or 0 for queries without keys",
          "[performer]") {
  const Tensor w = nn::performer_features(6, 4, 3, DType::f64);
  const Tensor some = uniform({2, 2, 3, 4}, -1, 1, DType::f64);
  const Tensor none = zeros({2, 2, 0, 4}, DType::f64);
  for (const bool causal : {false, true}) {
    const Tensor no_query = nn::performer_attention(none, some, some, w, Tensor(), causal);
    REQUIRE(no_query.shape() == Shape{2, 2, 0, 4});
    const Tensor no_key = nn::performer_attention(some, none, none, w, Tensor(), causal);
    REQUIRE(no_key.shape() == Shape{2, 2, 3, 4});
    for (const double value : no_key.to_host_f64()) REQUIRE(value == 0.0);
    REQUIRE(nn::performer_attention(none, none, none, w, Tensor(), causal).shape() ==
            Shape{2, 2, 0, 4});
  }
}

TEST_CASE("performer module: a mask means what it means on the main path; [Sq, Sk] is refused",
          "[performer]") {
  // B == Sq == Sk == 3: a 2-D mask is [Sq, Sk] (broadcast over batch and heads), never [B, Sk].
  manual_seed(73);
  nn::MultiHeadAttention mha(8, 2, 0.0, DType::f64,
                             {.kind = nn::AttentionKind::performer, .features = 6, .seed = 4});
  const Tensor x = uniform({3, 3, 8}, -1, 1, DType::f64);
  REQUIRE_THROWS_WITH(mha.forward(x, nn::causal_mask(3, 3)),
                      Catch::Contains("performer") && Catch::Contains("[3, 3]") &&
                          Catch::Contains("key padding mask"));
  REQUIRE_THROWS_WITH(mha.forward(x, ones({3, 2, 1, 3}, DType::b8)),  // by head
                      Catch::Contains("performer") && Catch::Contains("[3, 2, 1, 3]"));
  // A padding mask [B, 1, 1, Sk] equals the same padding given to the op on the projected heads.
  const Tensor padding = nn::padding_mask({3, 1, 2}, 3);
  const std::vector<double> got = mha.forward(x, padding).output.to_host_f64();
  const Tensor q = mha.split_heads(mha.q_proj->forward(x));
  const Tensor k = mha.split_heads(mha.k_proj->forward(x));
  const Tensor v = mha.split_heads(mha.v_proj->forward(x));
  const Tensor heads = nn::performer_attention(q, k, v, mha.projection_matrix,
                                               key_padding({3, 1, 2}, 3), false);
  require_relatively_close(got, mha.o_proj->forward(mha.merge_heads(heads)).to_host_f64(), 1e-12);
  // [1, Sk] and [Sk]: one key mask for every batch row (Sq 1 of [Sq, Sk] broadcasts), as [B, 1, 1, Sk].
  const Tensor row = from_bools({true, false, true}, {1, 3});
  const std::vector<double> shared = mha.forward(x, row).output.to_host_f64();
  const Tensor expanded = row.reshape({1, 1, 1, 3}).expand({3, 1, 1, 3}).contiguous();
  require_relatively_close(shared, mha.forward(x, expanded).output.to_host_f64(), 1e-12);
  require_relatively_close(mha.forward(x, row.reshape({3})).output.to_host_f64(), shared, 1e-12);
}
