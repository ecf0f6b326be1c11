#pragma once
// One batch item of the CPU fused attention kernel (ops/cpu_attention.cpp), as its forward and
// backward see it: which scores a query may take (masks, the causal diagonal, the sparse layout,
// ALiBi's bias), how far the keys go, the bands of a causal tile on the diagonal, and the dropout
// factors. The kernel's tile sizes are here too, since bands and dropout rows are cut to them.
#include <algorithm>
#include <cstdint>
#include <limits>

#include "tapegrad/autograd/attention_layout.h"
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/rng.h"

namespace tg::cpu::attention {

// The kernel keeps scores in base-2 units, log2(e) times the softmax's (S = scale log2(e) Q K^T,
// ALiBi's bias likewise), so that its exponentials are exp2 (ops/cpu_simd.h); the log-sum-exp it
// stores is natural, as every kernel's.
constexpr double kLog2e = 1.4426950408889634;
constexpr double kLn2 = 0.6931471805599453;

constexpr int64_t kQueryTile = 64;  // queries a tile
constexpr int64_t kKeyTile = 128;   // keys a tile
// The rows (or keys) of a band of a causal tile on the diagonal (Item::row_bands): two 6-row
// blocks of the tile products. Each row of a band computes on average 5.5 scores past the
// diagonal, against 31.5 for a whole 64-row tile.
constexpr int64_t kCausalBand = 12;

// What one batch item needs: sizes, masks, the sparse layout, ALiBi and dropout, shared by forward
// and backward.
struct Item {
  const AttentionProblem& p;
  int64_t n, sq, sk;
  const bool* mask;
  SparsityView sparsity;
  double alibi_slope = 0;  // 0: no ALiBi; in the kernel's base-2 units (times log2 e)
  // A padding mask (one row for every query) that is true up to its last visible key hides
  // nothing of what the key loop reads (key_end stops there), so mask_row skips it.
  bool mask_hides_nothing = false;

  Item(const AttentionProblem& problem, int64_t item, int64_t sq, int64_t sk, const bool* mask)
      : p(problem), n(item), sq(sq), sk(sk), mask(mask),
        sparsity(sparsity_view(p.sparsity, p.sparsity_random, sq)) {
    if (p.alibi_heads > 0) alibi_slope = tg::alibi_slope(n % p.alibi_heads, p.alibi_heads) * kLog2e;
    if (mask && p.mask_row_stride == 0) {
      const bool* allowed = mask + p.mask_offsets[n];
      const int64_t end = padding_end(sk);
      mask_hides_nothing = true;
      for (int64_t j = 0; j < end; ++j) mask_hides_nothing &= allowed[j * p.mask_col_stride];
    }
  }
  // With a padding mask (row stride 0): `end` moved down past the keys the mask hides there.
  int64_t padding_end(int64_t end) const {
    const bool* allowed = mask + p.mask_offsets[n];
    while (end > 0 && !allowed[(end - 1) * p.mask_col_stride]) --end;
    return end;
  }

  // The scores of query i against keys j0 .. j0+cols-1 as the softmax takes them: ALiBi's bias
  // -slope |i - j| added (base-2 units), then -inf where i may not attend j: past the diagonal when causal,
  // outside the sparse layout, or false in the mask.
  template <typename T>
  void mask_row(int64_t i, int64_t j0, int64_t cols, T* row) const {
    constexpr T kNegInf = -std::numeric_limits<T>::infinity();
    if (alibi_slope != 0) {
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t j = j0 + c;
        row[c] -= T(alibi_slope * static_cast<double>(i > j ? i - j : j - i));
      }
    }
    if (p.causal) {
      for (int64_t c = std::max<int64_t>(i + 1 - j0, 0); c < cols; ++c) row[c] = kNegInf;
    }
    if (sparsity.layout.kind == SparsityKind::local) {  // a window: two ranges, no test per key
      const int64_t first = std::clamp<int64_t>(i - sparsity.layout.window + 1 - j0, 0, cols);
      const int64_t past = std::clamp<int64_t>(i + sparsity.layout.window - j0, 0, cols);
      std::fill(row, row + first, kNegInf);
      std::fill(row + past, row + cols, kNegInf);
    } else if (!sparsity.full()) {
      for (int64_t c = 0; c < cols; ++c) {
        if (!sparsity.visible(i, j0 + c)) row[c] = kNegInf;
      }
    }
    if (mask && !mask_hides_nothing) {
      const bool* allowed = mask + p.mask_offsets[n] + i * p.mask_row_stride + j0 * p.mask_col_stride;
      if (p.mask_col_stride == 1) {  // the usual layout: a select the compiler vectorises
        for (int64_t c = 0; c < cols; ++c) row[c] = allowed[c] ? row[c] : kNegInf;
      } else {
        for (int64_t c = 0; c < cols; ++c) {
          if (!allowed[c * p.mask_col_stride]) row[c] = kNegInf;
        }
      }
    }
  }
  // Whether mask_row leaves every score of the tile of query rows i0 .. and keys [j0, j0 + cols)
  // as it is: no ALiBi, no mask that hides a key the walk reads, no sparse layout, and, when
  // causal, the tile wholly on or below the diagonal (its first row already sees its last key).
  bool tile_unmasked(int64_t i0, int64_t j0, int64_t cols) const {
    return alibi_slope == 0 && (!mask || mask_hides_nothing) && sparsity.full() &&
           (!p.causal || i0 + 1 - j0 >= cols);
  }
  // Whether the tile of query rows [i0, i0 + rows) and keys [j0, j0 + cols) has a key some query
  // may see under the sparse layout: the kernels skip the others, so local attention costs O(S W).
  bool tile_visible(int64_t i0, int64_t rows, int64_t j0, int64_t cols) const {
    return sparsity.tile_visible(i0, i0 + rows, j0, j0 + cols);
  }
  // Causal tiles that cross the diagonal are computed in bands of kCausalBand query rows (or
  // keys), each only as far as it is visible, instead of in full and then masked; elsewhere one
  // band is the whole tile. row_bands calls body(r0, r1, seen) for query rows [i0 + r0, i0 + r1),
  // which see keys j0 .. j0 + seen - 1 of the tile (seen > 0); key_bands calls body(c0, c1, from)
  // for keys [j0 + c0, j0 + c1), seen from query row i0 + from on (from < rows).
  template <typename Body>
  void row_bands(int64_t i0, int64_t rows, int64_t j0, int64_t cols, Body&& body) const {
    const int64_t band = causal_band(i0, rows, j0, cols);
    for (int64_t r0 = 0; r0 < rows; r0 += band) {
      const int64_t r1 = std::min(rows, r0 + band);
      const int64_t seen = p.causal ? std::clamp<int64_t>(i0 + r1 - j0, 0, cols) : cols;
      if (seen > 0) body(r0, r1, seen);
    }
  }
  template <typename Body>
  void key_bands(int64_t i0, int64_t rows, int64_t j0, int64_t cols, Body&& body) const {
    const int64_t band = causal_band(i0, rows, j0, cols);
    for (int64_t c0 = 0; c0 < cols; c0 += band) {
      const int64_t from = p.causal ? std::max<int64_t>(j0 + c0 - i0, 0) : 0;
      if (from < rows) body(c0, std::min(cols, c0 + band), from);
    }
  }
  int64_t causal_band(int64_t i0, int64_t rows, int64_t j0, int64_t cols) const {
    return p.causal && i0 + 1 - j0 < cols ? kCausalBand : std::max(rows, cols);
  }
  // The dropout factors of probabilities (i, j0 .. j0+cols-1): 0 if dropped, else 1 / (1 - p).
  template <typename T>
  void keep_row(int64_t i, int64_t j0, int64_t cols, T* factors) const {
    float uniforms[kKeyTile];
    philox_uniform_fill(p.seed, p.offset, (n * sq + i) * sk + j0, cols, uniforms);
    const T kept = T(1.0 / (1.0 - p.dropout_p));
    for (int64_t c = 0; c < cols; ++c) factors[c] = uniforms[c] >= p.dropout_p ? kept : T(0);
  }
  // The keys that query rows [i0, i0 + rows) can see at all end here: at the diagonal when causal,
  // and after the last visible key of a mask that is the same for every query (a padding mask,
  // row stride 0), so that the padding at the end of a short sequence costs nothing. Keys past it
  // would only add probabilities of 0.
  int64_t key_end(int64_t i0, int64_t rows) const {
    const int64_t end = p.causal ? std::min(sk, i0 + rows) : sk;
    return mask && p.mask_row_stride == 0 ? padding_end(end) : end;
  }
};

}  // namespace tg::cpu::attention
