// Reformer (nn/reformer.h): the rotations (reproducible from the seed), the hash on hand-made
// keys, the chunk length rule, the LSH attention against a naive f64 host loop over explicit
// candidate sets (sorted by bucket, chunks, the previous chunk, causal, padding, the self rule,
// rounds), and against full attention with shared QK when one chunk holds the whole sequence.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/autograd/storage.h"
#include "tapegrad/nn/attention.h"
#include "tapegrad/nn/masks.h"
#include "tapegrad/nn/reformer.h"
#include "tapegrad/ops/ops.h"

using namespace tg;

namespace {

struct LshCase {
  int64_t batch = 2, heads = 2, seq = 11, d = 4, dv = 3;
  int64_t buckets = 4, rounds = 2, chunk = 3;
  bool causal = false;
  std::vector<int64_t> lengths;  // real keys per batch row; empty: all real
};

// The bucket of key k (d values) in round r: argmax over [k W_r ; -k W_r], first maximum.
int64_t host_bucket(const double* k, const std::vector<double>& w, int64_t r, const LshCase& c) {
  const int64_t half = c.buckets / 2;
  std::vector<double> projections(c.buckets);
  for (int64_t b = 0; b < half; ++b) {
    double dot = 0;
    for (int64_t e = 0; e < c.d; ++e) dot += k[e] * w[(r * c.d + e) * half + b];
    projections[b] = dot;
    projections[half + b] = -dot;
  }
  return std::max_element(projections.begin(), projections.end()) - projections.begin();
}

// For one item and round: the positions of query i's candidates (its chunk and the one before,
// wrapping round; pad slots are no positions), from sorting the positions by (bucket, position).
std::vector<std::vector<int64_t>> host_candidates(const std::vector<int64_t>& bucket,
                                                  const LshCase& c) {
  std::vector<int64_t> order(c.seq);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return bucket[a] < bucket[b]; });
  const int64_t chunk = std::min(c.chunk, c.seq), chunks = (c.seq + chunk - 1) / chunk;
  std::vector<std::vector<int64_t>> candidates(c.seq);
  for (int64_t slot = 0; slot < c.seq; ++slot) {
    const int64_t own = slot / chunk, before = (own + chunks - 1) % chunks;
    for (int64_t other = 0; other < c.seq; ++other) {
      const int64_t their = other / chunk;
      if (their == own || (chunks > 1 && their == before)) {
        candidates[order[slot]].push_back(order[other]);
      }
    }
  }
  return candidates;
}

// Causal: query i's candidates are the positions of its own bucket whose rank in the bucket (the
// number of earlier positions there) falls in its chunk of the bucket or the chunk before it:
// chunks of C cut from each bucket's run, so that nothing about them depends on later positions.
std::vector<std::vector<int64_t>> host_bucket_candidates(const std::vector<int64_t>& bucket,
                                                         const LshCase& c) {
  const int64_t chunk = std::min(c.chunk, c.seq);
  std::vector<std::vector<int64_t>> candidates(c.seq);
  for (int64_t i = 0; i < c.seq; ++i) {
    std::vector<int64_t> same;  // positions of i's bucket, in order
    for (int64_t j = 0; j < c.seq; ++j) {
      if (bucket[j] == bucket[i]) same.push_back(j);
    }
    const int64_t rank = std::find(same.begin(), same.end(), i) - same.begin();
    const int64_t own = rank / chunk;
    for (int64_t r = 0; r < static_cast<int64_t>(same.size()); ++r) {
      if (r / chunk == own || r / chunk == own - 1) candidates[i].push_back(same[r]);
    }
  }
  return candidates;
}

// The shared-QK keys q / sqrt(|q|^2 + 1e-6) of every row of q (d values a row).
std::vector<double> host_keys(const std::vector<double>& q, int64_t d) {
  std::vector<double> keys(q.size());
  for (size_t row = 0; row < q.size() / d; ++row) {
    double square = 0;
    for (int64_t e = 0; e < d; ++e) square += q[row * d + e] * q[row * d + e];
    for (int64_t e = 0; e < d; ++e) keys[row * d + e] = q[row * d + e] / std::sqrt(square + 1e-6);
  }
  return keys;
}

// softmax over the (score, key) pairs of one query, times the keys' rows of v: into out[0, dv).
void host_softmax_times_v(const std::vector<std::pair<double, int64_t>>& scored,
                          const double* v, int64_t dv, double* out) {
  double top = -1e300, total = 0;
  for (const auto& [score, j] : scored) top = std::max(top, score);
  for (const auto& [score, j] : scored) {
    const double weight = std::exp(score - top);
    total += weight;
    for (int64_t e = 0; e < dv; ++e) out[e] += weight * v[j * dv + e];
  }
  for (int64_t e = 0; e < dv; ++e) out[e] /= total;
}

// LSH attention straight from the paper, in f64, one query at a time: the scores of the union
// (with repeats) of its candidate sets over the rounds, minus later keys (causal) and padded
// keys; its own position scores -1e5; softmax over them all, times v. Padded queries are left 0.
std::vector<double> lsh_on_host(const std::vector<double>& q, const std::vector<double>& v,
                                const std::vector<double>& w, const LshCase& c) {
  const int64_t items = c.batch * c.heads;
  const std::vector<double> keys = host_keys(q, c.d);
  std::vector<double> out(items * c.seq * c.dv, 0.0);
  for (int64_t item = 0; item < items; ++item) {
    const int64_t length = c.lengths.empty() ? c.seq : c.lengths[item / c.heads];
    const double* item_q = &q[item * c.seq * c.d];
    const double* item_keys = &keys[item * c.seq * c.d];
    std::vector<std::vector<std::pair<double, int64_t>>> scored(c.seq);  // (score, key) per query
    for (int64_t r = 0; r < c.rounds; ++r) {
      std::vector<int64_t> bucket(c.seq);
      for (int64_t i = 0; i < c.seq; ++i) bucket[i] = host_bucket(&item_keys[i * c.d], w, r, c);
      const auto candidates =
          c.causal ? host_bucket_candidates(bucket, c) : host_candidates(bucket, c);
      for (int64_t i = 0; i < c.seq; ++i) {
        for (const int64_t j : candidates[i]) {
          if (j >= length || (c.causal && j > i)) continue;
          double dot = 0;
          for (int64_t e = 0; e < c.d; ++e) dot += item_q[i * c.d + e] * item_keys[j * c.d + e];
          scored[i].push_back({j == i ? -1e5 : dot / std::sqrt(static_cast<double>(c.d)), j});
        }
      }
    }
    for (int64_t i = 0; i < length; ++i) {
      host_softmax_times_v(scored[i], &v[item * c.seq * c.dv], c.dv,
                           &out[(item * c.seq + i) * c.dv]);
    }
  }
  return out;
}

Tensor reformer_key_padding(const std::vector<int64_t>& lengths, int64_t seq) {
  std::vector<bool> real;
  for (const int64_t length : lengths) {
    for (int64_t j = 0; j < seq; ++j) real.push_back(j < length);
  }
  return from_bools(real, {static_cast<int64_t>(lengths.size()), seq});
}

// reformer_attention on random q, v (f64, or f32 with the f64 buckets) against the host loop,
// at the rows of real queries.
void require_matches_host(const LshCase& c, DType dtype = DType::f64, double tolerance = 1e-10) {
  manual_seed(91);
  const Tensor q = uniform({c.batch, c.heads, c.seq, c.d}, -1, 1, DType::f64);
  const Tensor v = uniform({c.batch, c.heads, c.seq, c.dv}, -1, 1, DType::f64);
  const Tensor w = nn::reformer_rotations(c.rounds, c.d, c.buckets, 5, DType::f64);
  const Tensor padding = c.lengths.empty() ? Tensor() : reformer_key_padding(c.lengths, c.seq);
  const Tensor out =
      dtype == DType::f64
          ? nn::reformer_attention(q, v, w, padding, c.causal, 0.0, c.chunk)
          : nn::lsh_attention(q.to(dtype), v.to(dtype), nn::reformer_buckets(q, w), padding,
                              c.causal, c.chunk);
  REQUIRE(out.dtype() == dtype);
  REQUIRE(out.shape() == Shape{c.batch, c.heads, c.seq, c.dv});
  const std::vector<double> got = out.to_host_f64();
  const std::vector<double> expected =
      lsh_on_host(q.to_host_f64(), v.to_host_f64(), w.to_host_f64(), c);
  for (int64_t row = 0; row < c.batch * c.heads * c.seq; ++row) {
    const int64_t length = c.lengths.empty() ? c.seq : c.lengths[row / c.seq / c.heads];
    if (row % c.seq >= length) continue;  // a padded query's output is not used
    for (int64_t e = 0; e < c.dv; ++e) {
      INFO("row " << row << ", column " << e);
      REQUIRE(got[row * c.dv + e] == Approx(expected[row * c.dv + e]).margin(tolerance));
    }
  }
}

}  // namespace

TEST_CASE("reformer_rotations: reproducible from the seed, rounds a prefix of more rounds",
          "[reformer]") {
  const std::vector<double> two = nn::reformer_rotations(2, 4, 6, 9, DType::f64).to_host_f64();
  REQUIRE(nn::reformer_rotations(2, 4, 6, 9, DType::f64).shape() == Shape{2, 4, 3});
  REQUIRE(nn::reformer_rotations(2, 4, 6, 9, DType::f64).to_host_f64() == two);
  REQUIRE(nn::reformer_rotations(2, 4, 6, 10, DType::f64).to_host_f64() != two);
  const std::vector<double> three = nn::reformer_rotations(3, 4, 6, 9, DType::f64).to_host_f64();
  REQUIRE(std::vector<double>(three.begin(), three.begin() + 24) == two);
  double mean = 0, square = 0;  // 4000 draws of N(0, 1)
  for (const double x : nn::reformer_rotations(10, 20, 40, 1, DType::f64).to_host_f64()) {
    mean += x / 4000;
    square += x * x / 4000;
  }
  REQUIRE(std::abs(mean) < 0.1);
  REQUIRE(std::abs(square - 1) < 0.1);
  REQUIRE_THROWS_WITH(nn::reformer_rotations(1, 4, 5, 1),
                      Catch::Contains("even number of buckets"));
  REQUIRE_THROWS_AS(nn::reformer_rotations(0, 4, 4, 1), Error);
}

TEST_CASE("reformer_buckets: the argmax over [x W; -x W], per round", "[reformer]") {
  // W = identity (d 2, 4 buckets): buckets 0, 1 for +x, +y and 2, 3 for -x, -y.
  const Tensor identity = from_values({1, 0, 0, 1}, {1, 2, 2}, DType::f64);
  const Tensor keys =
      from_values({1, 0.2, 0.1, 1, -1, 0.3, 0.2, -1, 3, 2.9}, {1, 5, 2}, DType::f64);
  REQUIRE(nn::reformer_buckets(keys, identity).to_host_i64() ==
          std::vector<int64_t>{0, 1, 2, 3, 0});
  // A second round rotated by 90 degrees: (x, y) -> (-y, x) moves every bucket up by one.
  const Tensor two = from_values({1, 0, 0, 1, 0, 1, -1, 0}, {2, 2, 2}, DType::f64);
  REQUIRE(nn::reformer_buckets(keys, two).shape() == Shape{1, 2, 5});
  REQUIRE(nn::reformer_buckets(keys, two).to_host_i64() ==
          std::vector<int64_t>{0, 1, 2, 3, 0, 1, 2, 3, 0, 1});
  REQUIRE_THROWS_WITH(nn::reformer_buckets(keys, zeros({1, 3, 2}, DType::f64)),
                      Catch::Contains("reformer_buckets") && Catch::Contains("[1, 3, 2]"));
}

TEST_CASE("reformer_chunk_length: the paper's 2S/B, rounded up, at most 64", "[reformer]") {
  REQUIRE(nn::reformer_chunk_length(64, 8) == 16);
  REQUIRE(nn::reformer_chunk_length(65, 8) == 17);
  REQUIRE(nn::reformer_chunk_length(5, 4) == 3);
  REQUIRE(nn::reformer_chunk_length(1, 1000) == 1);
  REQUIRE(nn::reformer_chunk_length(16384, 8) == 64);
}

TEST_CASE("reformer: matches the host loop over explicit candidate sets", "[reformer]") {
  SECTION("non-causal, 2 rounds, chunks of 3 over 11 (one padded chunk)") {
    require_matches_host({});
  }
  SECTION("causal") { require_matches_host({.causal = true}); }
  SECTION("padded keys") { require_matches_host({.lengths = {11, 6}}); }
  SECTION("causal and padded keys, 3 rounds of 6 buckets") {
    require_matches_host({.buckets = 6, .rounds = 3, .causal = true, .lengths = {7, 11}});
  }
  SECTION("two chunks: each is the other's previous") {
    require_matches_host({.seq = 8, .chunk = 4});
  }
  SECTION("one chunk") { require_matches_host({.rounds = 1, .chunk = 20}); }
  SECTION("causal, one chunk: the keys of the own bucket") {
    require_matches_host({.rounds = 2, .chunk = 20, .causal = true});
  }
  SECTION("chunks of 1: a query sees itself and one other") {
    require_matches_host({.seq = 6, .rounds = 3, .chunk = 1, .causal = true});
  }
  SECTION("f32, the buckets of f64") { require_matches_host({.causal = true}, DType::f32, 1e-5); }
}

// (Non-causal only: causal attention sees the keys of its own bucket alone, so one chunk is not full
// attention there; the host loop checks it, "causal, one chunk".)
TEST_CASE("reformer: one chunk over the sequence is full attention with shared QK, self masked",
          "[reformer]") {
  manual_seed(17);
  const int64_t seq = 9;
  const Tensor q = uniform({2, 3, seq, 4}, -1, 1, DType::f64);
  const Tensor v = uniform({2, 3, seq, 5}, -1, 1, DType::f64);
  std::vector<bool> off_diagonal;
  for (int64_t i = 0; i < seq; ++i) {
    for (int64_t j = 0; j < seq; ++j) off_diagonal.push_back(i != j);
  }
  const Tensor not_self = from_bools(off_diagonal, {seq, seq});
  for (const bool causal : {false}) {
    // full attention over every other key with k = q / |q| (explicit_attention: -inf masking)
    const std::vector<double> full =
        nn::explicit_attention(q, nn::reformer_keys(q), v, not_self, causal, 0.0)
            .first.to_host_f64();
    const std::vector<double> values = v.to_host_f64();
    for (const int64_t rounds : {1, 3}) {  // every round sees everything: rounds change nothing
      INFO("causal " << causal << ", rounds " << rounds);
      const Tensor w = nn::reformer_rotations(rounds, 4, 8, 3, DType::f64);
      const std::vector<double> out =
          nn::reformer_attention(q, v, w, Tensor(), causal, 0.0, seq).to_host_f64();
      for (size_t e = 0; e < out.size(); ++e) {
        const bool first = (e / 5) % seq == 0;  // causal: query 0 sees only itself: out = v_0
        const double expected = causal && first ? values[e] : full[e];
        REQUIRE(out[e] == Approx(expected).margin(1e-12));
      }
    }
  }
}

TEST_CASE("reformer: the gradient reaches q and v, finite where keys are masked", "[reformer]") {
  manual_seed(5);
  const Tensor q = uniform({2, 2, 7, 4}, -1, 1, DType::f64).requires_grad_();
  const Tensor v = uniform({2, 2, 7, 3}, -1, 1, DType::f64).requires_grad_();
  const Tensor w = nn::reformer_rotations(2, 4, 4, 1, DType::f64);
  sum(nn::reformer_attention(q, v, w, reformer_key_padding({7, 2}, 7), true, 0.0, 3)).backward();
  for (const Tensor& t : {q, v}) {
    bool nonzero = false;
    for (const double g : t.grad().to_host_f64()) {
      REQUIRE(std::isfinite(g));
      nonzero = nonzero || g != 0;
    }
    REQUIRE(nonzero);
  }
}

TEST_CASE("reformer: bad shapes are tg::Errors naming lsh_attention", "[reformer]") {
  const Tensor q = zeros({1, 2, 5, 4}, DType::f64), v = zeros({1, 2, 5, 3}, DType::f64);
  const Tensor buckets = zeros({1, 2, 2, 5}, DType::i64);
  REQUIRE_THROWS_WITH(nn::lsh_attention(q, zeros({1, 2, 4, 3}, DType::f64), buckets, Tensor(),
                                        false, 2),
                      Catch::Contains("lsh_attention") && Catch::Contains("[1, 2, 4, 3]"));
  REQUIRE_THROWS_WITH(nn::lsh_attention(q, v, zeros({1, 2, 2, 5}), Tensor(), false, 2),
                      Catch::Contains("lsh_attention") && Catch::Contains("i64 buckets"));
  REQUIRE_THROWS_WITH(nn::lsh_attention(q, v, buckets, Tensor(), false, 0),
                      Catch::Contains("chunk_length must be >= 1"));
  REQUIRE_THROWS_WITH(nn::lsh_attention(q, v, buckets, ones({1, 4}, DType::b8), false, 2),
                      Catch::Contains("key_padding must be bool [B, S] = [1, 5]"));
}

TEST_CASE("reformer: an empty sequence gives an empty output", "[reformer]") {
  const Tensor q = zeros({2, 2, 0, 4}, DType::f64), v = zeros({2, 2, 0, 3}, DType::f64);
  const Tensor w = nn::reformer_rotations(2, 4, 4, 1, DType::f64);
  for (const bool causal : {false, true}) {
    REQUIRE(nn::reformer_attention(q, v, w, Tensor(), causal).shape() == Shape{2, 2, 0, 3});
    REQUIRE(nn::reformer_attention(q, v, w, zeros({2, 0}, DType::b8), causal, 0.0, 3).shape() ==
            Shape{2, 2, 0, 3});
    REQUIRE(nn::lsh_attention(q, v, zeros({2, 2, 2, 0}, DType::i64), Tensor(), causal, 3).shape() ==
            Shape{2, 2, 0, 3});
  }
}

TEST_CASE("reformer_buckets: many buckets hash a block of columns at a time, the same argmax",
          "[reformer]") {
  // 1000 buckets: 500 columns, hashed in blocks, against the host argmax over all of them.
  const LshCase c{.batch = 1, .heads = 2, .seq = 9, .d = 4, .buckets = 1000, .rounds = 2};
  manual_seed(13);
  const Tensor q = uniform({c.batch, c.heads, c.seq, c.d}, -1, 1, DType::f64);
  const Tensor w = nn::reformer_rotations(c.rounds, c.d, c.buckets, 3, DType::f64);
  const std::vector<double> qs = q.to_host_f64(), ws = w.to_host_f64();
  const Tensor buckets = nn::reformer_buckets(q, w);  // [B, H, R, S]
  REQUIRE(buckets.shape() == Shape{c.batch, c.heads, c.rounds, c.seq});
  const std::vector<int64_t> got = buckets.to_host_i64();
  for (int64_t h = 0; h < c.heads; ++h) {
    for (int64_t r = 0; r < c.rounds; ++r) {
      for (int64_t i = 0; i < c.seq; ++i) {
        REQUIRE(got[(h * c.rounds + r) * c.seq + i] ==
                host_bucket(&qs[(h * c.seq + i) * c.d], ws, r, c));
      }
    }
  }
}

TEST_CASE("reformer: memory is bounded by the sequence, not by the number of buckets",
          "[reformer]") {
  // At S = 16 the hash of 2^16 buckets formed [B, H, R, S, 2^16] scores (tens of MB here, tens of
  // GB at a model's sizes); the bytes it allocates beyond the rotations must match those of 128.
  manual_seed(17);
  const Tensor q = uniform({2, 2, 16, 4}, -1, 1).requires_grad_();
  const Tensor v = uniform({2, 2, 16, 4}, -1, 1).requires_grad_();
  const auto peak_growth = [&](int64_t buckets) {
    const Tensor w = nn::reformer_rotations(2, 4, buckets, 7);
    const int64_t before = allocator_stats().current_bytes;
    reset_allocator_stats();
    sum(nn::reformer_attention(q, v, w, Tensor(), true)).backward();
    return allocator_stats().peak_bytes - before;
  };
  const int64_t few = peak_growth(128), many = peak_growth(int64_t{1} << 16);
  INFO("peak growth " << few << " bytes with 128 buckets, " << many << " with 2^16");
  REQUIRE(many <= few + 4096);
}

TEST_CASE("reformer: causal output of query i does not depend on the positions after i",
          "[reformer]") {
  // Changing every later query and value (and so their buckets, and how many positions sort
  // before query i) must leave rows up to i as they were: the candidates and the rounds' weights
  // of query i are taken from positions up to i alone.
  manual_seed(19);
  const int64_t seq = 12;
  const Tensor q = uniform({2, 2, seq, 4}, -1, 1, DType::f64);
  const Tensor v = uniform({2, 2, seq, 3}, -1, 1, DType::f64);
  const Tensor w = nn::reformer_rotations(2, 4, 4, 5, DType::f64);
  const Tensor padding = reformer_key_padding({12, 9}, seq);
  for (const int64_t chunk : {int64_t{1}, int64_t{2}, int64_t{3}}) {
    const std::vector<double> out =
        nn::reformer_attention(q, v, w, padding, true, 0.0, chunk).to_host_f64();
    for (int64_t i = 0; i + 1 < seq; ++i) {
      const int64_t later = seq - 1 - i;
      const Tensor noise = uniform({2, 2, later, 4}, -1, 1, DType::f64);
      const Tensor q2 = cat({q.narrow(2, 0, i + 1), noise * 1e3}, 2);
      const Tensor v2 = cat({v.narrow(2, 0, i + 1), v.narrow(2, i + 1, later) * 1e6 - 3.0}, 2);
      const std::vector<double> changed =
          nn::reformer_attention(q2, v2, w, padding, true, 0.0, chunk).to_host_f64();
      for (int64_t item = 0; item < 4; ++item) {
        for (int64_t row = 0; row <= i; ++row) {
          for (int64_t e = 0; e < 3; ++e) {
            INFO("chunk " << chunk << ", positions after " << i << " changed: item " << item
                          << ", row " << row);
            const size_t at = (item * seq + row) * 3 + e;
            REQUIRE(changed[at] == Approx(out[at]).margin(1e-12));
          }
        }
      }
    }
  }
}

TEST_CASE("reformer: a step's peak bytes grow linearly in S once chunks are full", "[reformer]") {
  // From S = 2 x 64 x B / 2 on, chunks hold 64 positions: each doubling of S may at most double
  // the peak of a forward and backward (no O(S^2) or O(S x buckets) tensor anywhere).
  for (const bool causal : {false, true}) {
    std::vector<int64_t> peaks;
    for (const int64_t seq : {int64_t{512}, int64_t{1024}, int64_t{2048}}) {
      manual_seed(23);
      const Tensor q = uniform({1, 2, seq, 8}, -1, 1).requires_grad_();
      const Tensor v = uniform({1, 2, seq, 8}, -1, 1).requires_grad_();
      const Tensor w = nn::reformer_rotations(2, 8, 8, 3);
      const int64_t before = allocator_stats().current_bytes;
      reset_allocator_stats();
      sum(nn::reformer_attention(q, v, w, Tensor(), causal)).backward();
      peaks.push_back(allocator_stats().peak_bytes - before);
    }
    for (size_t i = 1; i < peaks.size(); ++i) {
      INFO("causal " << causal << ": peaks " << peaks[i - 1] << " and " << peaks[i]);
      REQUIRE(static_cast<double>(peaks[i]) <= 2.05 * static_cast<double>(peaks[i - 1]));
    }
  }
}
