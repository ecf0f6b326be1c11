// The sparse layouts of the fused attention (autograd/attention_layout.h): which keys a query
// sees, checked against the definitions written out by hand here; the tile test the kernels skip
// by, checked against brute force; bigbird's random blocks; ALiBi's slopes.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <set>
#include <vector>

#include "tapegrad/autograd/attention_layout.h"
#include "tapegrad/autograd/error.h"
#include "tapegrad/ops/attention.h"

using namespace tg;

namespace {

// The dense mask sparsity_mask builds, as a vector of 0/1.
std::vector<bool> dense(const SparsityLayout& layout, int64_t sq, int64_t sk) {
  const std::vector<double> values = sparsity_mask(layout, sq, sk).to_host_f64();
  std::vector<bool> result;
  for (double value : values) result.push_back(value != 0);
  return result;
}

}  // namespace

TEST_CASE("layout: local and band by their definitions", "[attention-layout]") {
  const int64_t s = 23;
  const std::vector<bool> local = dense({.kind = SparsityKind::local, .window = 4}, s, s);
  const std::vector<bool> band = dense({.kind = SparsityKind::band, .window = 3, .dilation = 5}, s, s);
  for (int64_t i = 0; i < s; ++i) {
    for (int64_t j = 0; j < s; ++j) {
      const int64_t distance = std::abs(i - j);
      INFO("i " << i << ", j " << j);
      REQUIRE(local[i * s + j] == (distance <= 3));
      REQUIRE(band[i * s + j] == (distance == 0 || distance == 5 || distance == 10));
    }
  }
  // full sees everything; band with dilation 1 is local
  for (bool entry : dense({}, 5, 7)) REQUIRE(entry);
  REQUIRE(dense({.kind = SparsityKind::band, .window = 4, .dilation = 1}, s, s) == local);
}

TEST_CASE("layout: bigbird is local + global tokens + R random key blocks per query block",
          "[attention-layout]") {
  const SparsityLayout layout{.kind = SparsityKind::bigbird, .window = 2, .random_blocks = 2,
                              .global_tokens = 3, .seed = 11};
  const int64_t sq = 200, sk = 300, blocks_q = 4, blocks_k = 5;  // blocks of 64
  const std::vector<int64_t> table = bigbird_random_blocks(layout, sq, sk);
  REQUIRE(table.size() == static_cast<size_t>(blocks_q * 2));
  for (int64_t qb = 0; qb < blocks_q; ++qb) {  // two distinct, sorted, in range
    REQUIRE(table[qb * 2] < table[qb * 2 + 1]);
    REQUIRE(table[qb * 2] >= 0);
    REQUIRE(table[qb * 2 + 1] < blocks_k);
  }
  const std::vector<bool> mask = dense(layout, sq, sk);
  for (int64_t i = 0; i < sq; ++i) {
    const std::set<int64_t> random(table.begin() + (i / 64) * 2, table.begin() + (i / 64) * 2 + 2);
    for (int64_t j = 0; j < sk; ++j) {
      const bool expected = std::abs(i - j) < 2 || i < 3 || j < 3 || random.count(j / 64) > 0;
      INFO("i " << i << ", j " << j);
      REQUIRE(mask[i * sk + j] == expected);
    }
  }
  // reproducible from the seed, and the seed matters
  REQUIRE(bigbird_random_blocks(layout, sq, sk) == table);
  bool differs = false;
  for (uint64_t seed = 12; seed < 20 && !differs; ++seed) {
    SparsityLayout other = layout;
    other.seed = seed;
    differs = bigbird_random_blocks(other, sq, sk) != table;
  }
  REQUIRE(differs);
  // more random blocks than key blocks: every key block, once
  SparsityLayout many = layout;
  many.random_blocks = 9;
  const std::vector<int64_t> all = bigbird_random_blocks(many, 64, 130);
  REQUIRE(all == std::vector<int64_t>{0, 1, 2});
  // not bigbird, or nothing to draw: no table
  REQUIRE(bigbird_random_blocks({.kind = SparsityKind::local, .window = 3}, 10, 10).empty());
  REQUIRE(bigbird_random_blocks(layout, 0, 10).empty());
}

TEST_CASE("layout: tile_visible is exact for local and bigbird and never misses for band",
          "[attention-layout]") {
  const int64_t sq = 150, sk = 170;
  const std::vector<SparsityLayout> layouts = {
      {.kind = SparsityKind::local, .window = 1},
      {.kind = SparsityKind::local, .window = 17},
      {.kind = SparsityKind::band, .window = 3, .dilation = 7},
      {.kind = SparsityKind::bigbird, .window = 5, .random_blocks = 1, .global_tokens = 2, .seed = 3},
  };
  for (const SparsityLayout& layout : layouts) {
    const std::vector<int64_t> table = bigbird_random_blocks(layout, sq, sk);
    const SparsityView view = sparsity_view(layout, table, sq);
    for (int64_t i0 = 0; i0 < sq; i0 += 13) {
      for (int64_t j0 = 0; j0 < sk; j0 += 11) {
        for (int64_t rows : {1, 8, 40}) {
          for (int64_t cols : {1, 16, 64}) {
            const int64_t i1 = std::min(sq, i0 + rows), j1 = std::min(sk, j0 + cols);
            bool any = false;
            for (int64_t i = i0; i < i1; ++i) {
              for (int64_t j = j0; j < j1; ++j) any = any || view.visible(i, j);
            }
            INFO("kind " << int(layout.kind) << ", tile [" << i0 << ", " << i1 << ") x [" << j0 << ", " << j1 << ")");
            if (layout.kind == SparsityKind::band) {
              if (any) REQUIRE(view.tile_visible(i0, i1, j0, j1));
            } else {
              REQUIRE(view.tile_visible(i0, i1, j0, j1) == any);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("layout: ALiBi slopes are the paper's geometric sequence", "[attention-layout]") {
  // H = 8: 1/2, 1/4, ..., 1/256
  for (int64_t h = 0; h < 8; ++h) REQUIRE(alibi_slope(h, 8) == Approx(std::pow(0.5, h + 1)));
  // H = 4: 1/4, 1/16, 1/64, 1/256
  REQUIRE(alibi_slope(0, 4) == Approx(0.25));
  REQUIRE(alibi_slope(3, 4) == Approx(1.0 / 256));
  const std::vector<double> bias = alibi_bias(2, 3, 4).to_host_f64();  // [2, 3, 4]
  REQUIRE(bias[0 * 12 + 2 * 4 + 0] == Approx(-2 * 1.0 / 16));  // head 0 (slope 2^-4), i 2, j 0
  REQUIRE(bias[1 * 12 + 0 * 4 + 3] == Approx(-3 * 1.0 / 256));  // head 1 (slope 2^-8), i 0, j 3
  REQUIRE(bias[1 * 12 + 1 * 4 + 1] == 0.0);
}

TEST_CASE("layout: ALiBi sizes whose product wraps are refused, never divided by", "[attention-layout]") {
  const int64_t big = int64_t{1} << 32;
  // heads x sq = 2^64 wraps to 0: the old bound divided by it.
  REQUIRE_THROWS_WITH(alibi_bias(big, big, 1), Catch::Contains("alibi_bias: heads x sq"));
  REQUIRE_THROWS_WITH(alibi_bias(2, big, big), Catch::Contains("alibi_bias: heads x sq x sk"));
  REQUIRE_THROWS_WITH(alibi_bias(2, int64_t{1} << 20, int64_t{1} << 20),
                      Catch::Contains("has 2199023255552 entries (at most 2^31)"));
  REQUIRE_THROWS_AS(alibi_bias(1, -1, 3), Error);
  REQUIRE(alibi_bias(1, 0, big).numel() == 0);
}

TEST_CASE("layout: bad sizes are one clear error", "[attention-layout]") {
  REQUIRE_THROWS_AS(sparsity_mask({.kind = SparsityKind::local, .window = 0}, 4, 4), Error);
  REQUIRE_THROWS_AS(sparsity_mask({.kind = SparsityKind::band, .window = 2, .dilation = 0}, 4, 4), Error);
  REQUIRE_THROWS_AS(sparsity_mask({.kind = SparsityKind::band, .window = int64_t{1} << 39,
                                   .dilation = int64_t{1} << 39}, 4, 4), Error);
  REQUIRE_THROWS_AS(sparsity_mask({.kind = SparsityKind::bigbird, .window = 2, .random_blocks = -1}, 4, 4), Error);
  REQUIRE_THROWS_AS(sparsity_mask({}, int64_t{1} << 20, int64_t{1} << 20), Error);
  REQUIRE_THROWS_AS(alibi_bias(0, 3, 3), Error);
}
