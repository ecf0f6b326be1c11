#pragma once
// What the fused attention kernels add to q k^T besides the mask: a block-sparse layout (which
// keys a query may see at all) and ALiBi's linear bias. Plain data and inline functions, compiled
// for the host and, through TG_HOST_DEVICE, for the CUDA kernels, so that every kernel, the dense
// mask the explicit path uses (sparsity_mask in ops/attention.h) and the tests read one
// definition. docs/attention.md draws each layout.
//
// Query i may see key j (on top of the mask and is_causal, which still apply):
//   full     always
//   local    |i - j| < window                        (with is_causal: the window keys up to i)
//   band     |i - j| < window * dilation and (i - j) divisible by dilation (local when dilation 1)
//   bigbird  local, or i < global_tokens, or j < global_tokens, or key block j / 64 is one of the
//            random_blocks blocks drawn for query block i / 64 (bigbird_random_blocks)
#include <cmath>
#include <cstdint>
#include <vector>

#include "tapegrad/autograd/portable.h"

namespace tg {

enum class SparsityKind : uint8_t { full, local, band, bigbird };

struct SparsityLayout {
  SparsityKind kind = SparsityKind::full;
  int64_t window = 0;         // local, band, bigbird
  int64_t dilation = 1;       // band
  int64_t random_blocks = 0;  // bigbird: per block of 64 queries
  int64_t global_tokens = 0;  // bigbird
  uint64_t seed = 0;          // bigbird: the Philox stream of the random blocks
};

// bigbird's blocks of queries and keys: fixed, not the kernels' tile sizes, so that the layout is
// the same on every device.
constexpr int64_t kSparseBlock = 64;

// The random key blocks of every query block, [query_blocks x min(random_blocks, key_blocks)]
// row-major, each row distinct and sorted: drawn from Philox(seed) by a partial Fisher-Yates
// shuffle, so the same (layout, sq, sk) always gives the same table. Empty unless bigbird.
std::vector<int64_t> bigbird_random_blocks(const SparsityLayout& layout, int64_t sq, int64_t sk);

// A layout with its random table, as the kernels read it (random points to host or device memory).
struct SparsityView {
  SparsityLayout layout;
  const int64_t* random = nullptr;  // bigbird_random_blocks' table
  int64_t random_per_block = 0;     // its row length

  TG_HOST_DEVICE bool full() const { return layout.kind == SparsityKind::full; }

  // Whether query i may see key j.
  TG_HOST_DEVICE bool visible(int64_t i, int64_t j) const {
    const int64_t distance = i > j ? i - j : j - i;
    switch (layout.kind) {
      case SparsityKind::full: return true;
      case SparsityKind::local: return distance < layout.window;
      case SparsityKind::band:
        return distance < layout.window * layout.dilation && distance % layout.dilation == 0;
      case SparsityKind::bigbird: {
        if (distance < layout.window || i < layout.global_tokens || j < layout.global_tokens) return true;
        if (random_per_block == 0) return false;  // (random may be null then)
        const int64_t* row = random + (i / kSparseBlock) * random_per_block;
        for (int64_t r = 0; r < random_per_block; ++r) {
          if (row[r] == j / kSparseBlock) return true;
        }
        return false;
      }
    }
    return true;
  }

  // Whether any query of [i0, i1) may see any key of [j0, j1) (both ranges non-empty): a tile the
  // kernels may skip when false. Exact for full, local and bigbird; for band it tests the band's
  // outer width, which a tile may straddle without holding a visible diagonal (visible() masks it).
  TG_HOST_DEVICE bool tile_visible(int64_t i0, int64_t i1, int64_t j0, int64_t j1) const {
    if (layout.kind == SparsityKind::full) return true;
    // the smallest |i - j| over the tile: 0 when the ranges overlap
    const int64_t gap = j0 >= i1 ? j0 - (i1 - 1) : (i0 >= j1 ? i0 - (j1 - 1) : 0);
    const int64_t reach =
        layout.kind == SparsityKind::band ? layout.window * layout.dilation : layout.window;
    if (gap < reach) return true;
    if (layout.kind != SparsityKind::bigbird) return false;
    if (i0 < layout.global_tokens || j0 < layout.global_tokens) return true;
    if (random_per_block == 0) return false;
    for (int64_t block = i0 / kSparseBlock; block <= (i1 - 1) / kSparseBlock; ++block) {
      const int64_t* row = random + block * random_per_block;
      for (int64_t r = 0; r < random_per_block; ++r) {
        const int64_t key_start = row[r] * kSparseBlock;
        if (key_start < j1 && key_start + kSparseBlock > j0) return true;
      }
    }
    return false;
  }
};

// The view of a layout over bigbird_random_blocks(layout, sq, sk) (on the host).
inline SparsityView sparsity_view(const SparsityLayout& layout, const std::vector<int64_t>& random,
                                  int64_t sq) {
  const int64_t query_blocks = (sq + kSparseBlock - 1) / kSparseBlock;
  if (random.empty() || query_blocks == 0) return SparsityView{layout};
  return SparsityView{layout, random.data(), static_cast<int64_t>(random.size()) / query_blocks};
}

// ALiBi (Press et al.): head h of H adds -slope_h |i - j| to score (i, j), slope_h = 2^(-8 (h+1) / H)
// (the paper's geometric sequence, used here for every H). With is_causal this is the paper's
// -slope (i - j); without, the symmetric form.
TG_HOST_DEVICE inline double alibi_slope(int64_t head, int64_t heads) {
  return exp2(-8.0 * static_cast<double>(head + 1) / static_cast<double>(heads));
}

}  // namespace tg
