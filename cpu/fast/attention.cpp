// CPU fused attention (FlashAttention's algorithm on tiles): the fast kernel. The same math
// as plain loops is attention_forward / attention_backward in cpu/reference.cpp, and
// tests/cpu/test_reference.cpp compares the two; under tg::Textbook (autograd/textbook.h) the
// entry points at the end of this file run those loops instead.
//
// Forward, per tile of queries: walk the key tiles, S = scale Q K^T on one GEMM, keep a running
// row max m and row sum l (online softmax), rescale the accumulator when m grows, add P V with a
// second GEMM. S is kept in base-2 units (scale log2(e) Q K^T), so every exponential is an exp2,
// three fewer FMA-unit instructions than an exp (kLog2e below, cpu/fast/simd.h).
// Causal tiles entirely above the diagonal, and tiles the sparse layout rules out
// (Item::tile_visible below), are never visited. Only out and the per-row
// log-sum-exp (natural: (m + log2 l) ln 2) are kept: O(S) statistics instead of the O(S^2)
// weights.
//
// Backward recomputes P = 2^(S - lse log2(e)) tile by tile and applies, with D_i = dO_i . O_i,
//   dV += P^T dO,  dP = dO V^T,  dS = P * (dP - D),  dQ += scale dS K,  dK += scale dS^T Q
// (with dropout, P and dP carry the keep mask Z / (1 - p)). A learned relative bias (T5's,
// AttentionProblem::relative_bias) is added to S with ALiBi's (Item::mask_row); its gradient is dS
// summed along each diagonal j - i (Item::add_relative_grad).
//
// Sizes: q [B, H, Sq, head_dim], k [B, H, Sk, head_dim], v [B, H, Sk, value_dim], item
// n = b H + h (AttentionProblem); gradients are d_q, d_k, d_v, d_out, shaped as q, k, v and out.
// An item's rows of an operand lie the operand's stride on S apart (item_rows): head_dim apart in
// a contiguous q, H head_dim for heads split from a projection, 3 H head_dim in a packed one (such
// heads are copied a batch element at a time, position by position: copy_heads). On
// a CPU with AVX2 and FMA, f32 tiles up to head_dim 128 run on the kernels of
// cpu/fast/attention_tiles.h: products (a BLAS call costs more than the arithmetic of a
// 32 x 32 x 16 tile) and the softmax row passes; their operands are laid out for L1 first
// (KeysOperand, Rows, Sums), and causal tiles on the diagonal are computed in bands
// (Item::row_bands). A few query rows (incremental decoding: one new position against the KV
// cache) read the keys where they lie, one dot product per (query, key), eight keys at a time
// (tiles::key_dots_avx2). Otherwise, and for f64, products go to blas_gemm (one BLAS thread each) and
// rows to cpu/fast/simd.h. The thread pool runs over items, runs of query tiles or batch elements,
// above kParallelAttentionFlops (runtime/threads.h).
// Working memory is per thread and kept between calls (scratch), so a tile allocates nothing.
// docs/attention.md tells what each choice gained.
//
// The file reads top-down: the tile sizes and one batch item (Item), the operands and products,
// the softmax row passes, work units and prefetching, then forward, backward and the entry points.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <numeric>
#include <type_traits>
#include <vector>

#include "tapegrad/autograd/attention_layout.h"
#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/autograd/textbook.h"
#include "tapegrad/cpu/fast/attention_tiles.h"
#include "tapegrad/cpu/fast/simd.h"
#include "tapegrad/cpu/kernels.h"
#include "tapegrad/cpu/reference.h"
#include "tapegrad/runtime/features.h"
#include "tapegrad/runtime/threads.h"

namespace tg::cpu {
namespace {

// ---- Tile sizes and base-2 units ----------------------------------------------------------------

// The kernel keeps scores in base-2 units, log2(e) times the softmax's (S = scale log2(e) Q K^T,
// ALiBi's bias likewise), so that its exponentials are exp2 (cpu/fast/simd.h); the log-sum-exp it
// stores is natural, as every kernel's.
constexpr double kLog2e = 1.4426950408889634;
constexpr double kLn2 = 0.6931471805599453;

constexpr int64_t kQueryTile = 64;  // queries a tile
constexpr int64_t kKeyTile = 128;   // keys a tile
// The rows (or keys) of a band of a causal tile on the diagonal (Item::row_bands): two 6-row
// blocks of the tile products. Each row of a band computes on average 5.5 scores past the
// diagonal, against 31.5 for a whole 64-row tile.
constexpr int64_t kCausalBand = 12;
// A forward unit of at most this many query rows reads K and V in place (forward_unit).
constexpr int64_t kFewQueryRows = 4;

// ---- One batch item -----------------------------------------------------------------------------
// One batch item of the kernel, as its forward and backward see it: which scores a query may take
// (masks, the causal diagonal, the sparse layout, ALiBi's bias), how far the keys go, the bands of
// a causal tile on the diagonal, and the dropout factors. Bands and dropout rows are cut to the
// tile sizes above.

// What one batch item needs: sizes, masks, the sparse layout, ALiBi and dropout, shared by forward
// and backward.
struct Item {
  const AttentionProblem& p;
  int64_t n, sq, sk;
  const bool* mask;
  SparsityView sparsity;
  double alibi_slope = 0;  // 0: no ALiBi; in the kernel's base-2 units (times log2 e)
  // The learned relative bias (AttentionProblem::relative_bias): where this item's head's row
  // starts, -1 without one; query i and key j read entry j - i + sq - 1 of it.
  int64_t relative_row = -1;
  // A padding mask (one row for every query) that is true up to its last visible key hides
  // nothing of what the key loop reads (key_end stops there), so mask_row skips it.
  bool mask_hides_nothing = false;

  Item(const AttentionProblem& problem, int64_t item, int64_t sq, int64_t sk, const bool* mask)
      : p(problem), n(item), sq(sq), sk(sk), mask(mask),
        sparsity(sparsity_view(p.sparsity, p.sparsity_random, sq)) {
    if (p.alibi_heads > 0) alibi_slope = tg::alibi_slope(n % p.alibi_heads, p.alibi_heads) * kLog2e;
    if (p.relative_bias.defined()) relative_row = (n % p.relative_bias.size(0)) * (sq + sk - 1);
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
  // -slope |i - j| and the learned relative bias added (base-2 units), then -inf where i may not
  // attend j: past the diagonal when causal, outside the sparse layout, or false in the mask.
  template <typename T>
  void mask_row(int64_t i, int64_t j0, int64_t cols, T* row) const {
    constexpr T kNegInf = -std::numeric_limits<T>::infinity();
    if (alibi_slope != 0) {
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t j = j0 + c;
        row[c] -= T(alibi_slope * static_cast<double>(i > j ? i - j : j - i));
      }
    }
    if (relative_row >= 0) {  // key j0 + c is at offset j0 + c - i: one contiguous run
      const T* bias = p.relative_bias.data_as<T>() + relative_row + j0 - i + sq - 1;
      for (int64_t c = 0; c < cols; ++c) row[c] += T(kLog2e) * bias[c];
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
  // as it is: no ALiBi or relative bias, no mask that hides a key the walk reads, no sparse
  // layout, and, when causal, the tile wholly on or below the diagonal (its first row already sees
  // its last key).
  bool tile_unmasked(int64_t i0, int64_t j0, int64_t cols) const {
    return alibi_slope == 0 && relative_row < 0 && (!mask || mask_hides_nothing) &&
           sparsity.full() && (!p.causal || i0 + 1 - j0 >= cols);
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
  // Backward: the gradient of the relative bias, dS_ij added to entry j - i + sq - 1 of this
  // item's row (the item's one thread owns it), for dS of query i against keys j0 .. j0+cols-1.
  template <typename T>
  void add_relative_grad(int64_t i, int64_t j0, int64_t cols, const T* d_scores) const {
    if (relative_row < 0 || !p.relative_bias_grad.defined()) return;
    T* grad = p.relative_bias_grad.data_as<T>() + n * (sq + sk - 1) + j0 - i + sq - 1;
    for (int64_t c = 0; c < cols; ++c) grad[c] += d_scores[c];
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

// ---- Working memory and the tile products -------------------------------------------------------
// The operands of the kernel and the products between them: per-thread working memory (scratch),
// a tile product on the tile kernels or on BLAS (product), the keys transposed into panels
// (KeysOperand), strided rows packed next to each other to be read (Rows) or summed into (Sums),
// and the backward's two products that apply the next step as they store.

constexpr int64_t kTileLd = kKeyTile + 8;  // the backward's tiles (BackwardScratch below: why)

// With AVX2, f32 products of at most this many multiply-adds run on the micro-kernels of
// cpu/fast/attention_tiles.h, larger ones on BLAS: whole 64 x 128 tiles up to head_dim and value_dim
// 128. Measured on one AVX2 core (8 causal items of 512), the micro-kernels beat OpenBLAS up to
// head_dim 128 (forward 8.4 against 10.2 ms at 128, 4.3 against 5.8 at 64); at 256 the two are
// even, and BLAS keeps those.
constexpr int64_t kSmallProduct = kQueryTile * kKeyTile * 128;

// The per-thread working memory of the kernel, one buffer per use, grown on demand and kept for
// the next call: the tiles of scores, probabilities and their gradients, the accumulators and row
// statistics. Contents are garbage on entry.
enum Slot {
  kScores, kAccumulator, kRowMax, kRowSum, kCorrection, kKeep, kDropped, kDProbs, kRowDot, kRowLse,
  kKeysT, kValuesT, kKeyRows, kValueRows, kQueryRows, kDOutRows, kDQuerySums, kDKeySums,
  kDValueSums, kHeadsQ, kHeadsK, kHeadsV, kHeadsOut, kHeadsDOut, kHeadsDQ, kHeadsDK, kHeadsDV,
  kSlots
};

template <typename T>
T* scratch(Slot slot, int64_t count) {
  thread_local std::vector<T> buffers[kSlots];
  std::vector<T>& buffer = buffers[slot];
  if (buffer.size() < static_cast<size_t>(count)) buffer.resize(count);
  return buffer.data();
}

// C = alpha op(A) op(B) + beta C for one tile (row-major, as blas_gemm). Small f32 tiles on a CPU
// with AVX2: tiles::gemm_avx2 (gemm_avx512 where tiles::avx512_tiles()), a transposed A read
// through its strides. Everything else (f64 for gradcheck, large tiles, CPUs without AVX2, where
// plain loops would lose to OpenBLAS's SSE kernels by 2x): BLAS. A transposed B (K or V of a key
// tile) comes through product_with_keys below.
inline void product(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k,
                    double alpha, const double* a, int64_t lda, const double* b, int64_t ldb,
                    double beta, double* c, int64_t ldc) {
  blas_gemm(transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

inline bool on_tiles(int64_t m, int64_t n, int64_t k) {
  return m * n * k <= kSmallProduct && fast_paths_enabled();
}

inline void product(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k,
                    float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                    float beta, float* c, int64_t ldc) {
  if (transpose_b || !on_tiles(m, n, k)) {
    return blas_gemm(transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  const auto gemm = tiles::avx512_tiles() ? tiles::gemm_avx512 : tiles::gemm_avx2;
  gemm(m, n, k, alpha, a, transpose_a ? 1 : lda, transpose_a ? lda : 1, b, ldb, beta, c, ldc);
}

// ---- The operands as the products read them -----------------------------------------------------

// The first `count` rows of one item's K (or V), [count, width] with rows `ld` apart, as the B
// operand of the products against their transpose: S = Q K^T and dP = dO V^T. The tile kernels
// want B stored k x n, so on them the rows are transposed once, into per-thread scratch, and each
// key tile's product reads its part in place: a query tile then costs no copy. The transpose is
// kept as one [width, kKeyTile] panel per key tile: a single [width, count] matrix would put the
// rows a tile's product reads count floats apart, and at a multiple of 1 KB (count 256, 512, ...)
// they all fall in the same few L1 sets and evict each other. BLAS takes a transposed B as it is
// (f64, CPUs without AVX2, widths past 128).
template <typename T>
struct KeysOperand {
  const T* data;
  int64_t ld, count, width;
  bool transposed = false;
  bool few_queries = false;  // read in place by a few query rows (product_with_keys: dots)

  // Key tile j0's transposed panel, [width, kKeyTile] (when transposed).
  const T* panel(int64_t j0) const { return data + j0 / kKeyTile * width * kKeyTile; }

  KeysOperand(Slot slot, const T* rows, int64_t ld_rows, int64_t count, int64_t width,
              bool few_queries = false)
      : data(rows), ld(ld_rows), count(count), width(width), few_queries(few_queries) {
    if constexpr (std::is_same_v<T, float>) {
      if (few_queries || !on_tiles(kQueryTile, kKeyTile, width) || count == 0) return;
      const int64_t tiles = (count + kKeyTile - 1) / kKeyTile;
      float* panels = scratch<float>(slot, tiles * width * kKeyTile);
      for (int64_t tile = 0; tile < tiles; ++tile) {
        const int64_t j0 = tile * kKeyTile;
        tiles::transpose_avx2(std::min(kKeyTile, count - j0), width, rows + j0 * ld_rows, ld_rows,
                              panels + tile * width * kKeyTile, kKeyTile);
      }
      data = panels;
      ld = kKeyTile;
      transposed = true;
    }
  }
};

// a . b over n entries, in four interleaved partial sums (which the compiler keeps in one vector):
// one running sum would be a chain of n dependent additions.
template <typename T>
T dot(const T* a, const T* b, int64_t n) {
  T partial[4] = {0, 0, 0, 0};
  int64_t c = 0;
  for (; c + 4 <= n; c += 4) {
    for (int64_t lane = 0; lane < 4; ++lane) partial[lane] += a[c + lane] * b[c + lane];
  }
  for (; c < n; ++c) partial[0] += a[c] * b[c];
  return (partial[0] + partial[1]) + (partial[2] + partial[3]);
}

// C (m x cols) = alpha A K_j^T + beta C for the keys [j0, j0 + cols) of `keys` (j0 a multiple of
// kKeyTile, cols at most kKeyTile), A m x k (lda).
template <typename T>
void product_with_keys(int64_t m, int64_t cols, int64_t k, T alpha, const T* a, int64_t lda,
                       const KeysOperand<T>& keys, int64_t j0, T beta, T* c, int64_t ldc) {
  if (keys.few_queries) {  // a dot product per (query, key), each key row read where it lies
    if constexpr (std::is_same_v<T, float>) {
      if (beta == T(0) && fast_paths_enabled()) {
        return tiles::key_dots_avx2(m, cols, k, alpha, a, lda, keys.data + j0 * keys.ld, keys.ld, c, ldc);
      }
    }
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t col = 0; col < cols; ++col) {
        const T product = alpha * dot(a + r * lda, keys.data + (j0 + col) * keys.ld, k);
        c[r * ldc + col] = beta == T(0) ? product : product + beta * c[r * ldc + col];
      }
    }
    return;
  }
  if (keys.transposed) {
    return product(false, false, m, cols, k, alpha, a, lda, keys.panel(j0), keys.ld, beta, c, ldc);
  }
  product(false, true, m, cols, k, alpha, a, lda, keys.data + j0 * keys.ld, keys.ld, beta, c, ldc);
}

// `count` rows of `width` entries, `ld` apart, as the tile products read them. With interleaved
// heads rows are H * width apart, a multiple of 1 KB at width 32 and 8 heads: then the rows of a
// 64- or 128-row operand all fall in a few L1 sets and evict each other while a product walks
// them (the 128 x 32 x 64 product P^T dO runs 8% slower with dO so laid out than contiguous). So
// on the tile kernels such rows are copied once, next to each other, into per-thread scratch;
// elsewhere (or already contiguous) they are read where they are.
template <typename T>
struct Rows {
  const T* data;
  int64_t ld;

  Rows(Slot slot, const T* rows, int64_t ld_rows, int64_t count, int64_t width,
       bool in_place = false)
      : data(rows), ld(ld_rows) {
    if constexpr (std::is_same_v<T, float>) {
      if (in_place || ld_rows == width || !on_tiles(kQueryTile, kKeyTile, width)) return;
      float* packed = scratch<float>(slot, count * width);
      for (int64_t r = 0; r < count; ++r) {  // not std::copy: a memmove call a row costs more
        for (int64_t c = 0; c < width; ++c) packed[r * width + c] = rows[r * ld_rows + c];
      }
      data = packed;
      ld = width;
    }
  }
  const T* row(int64_t r) const { return data + r * ld; }
};

// The backward's two products that take the next step along as each block is stored, on the tile
// kernels (keys transposed, so f32 with AVX2): P = 2^(alpha Q_i K_j^T - shift) for a tile, and
// dS = P (dO_i V_j^T - D) for rows [r0, r1) against the first `seen` keys of tile j0, a pass over
// the tile fewer each. They return false, having done nothing, where the tile kernels do not run;
// the caller then takes the steps one at a time.
template <typename T>
bool exp2_product(int64_t rows, int64_t cols, int64_t width, T alpha, const Rows<T>& q_i,
                  const KeysOperand<T>& keys, int64_t j0, const T* shift, T* probs) {
  if constexpr (std::is_same_v<T, float>) {
    if (!keys.transposed) return false;
    const auto exp2_gemm = tiles::avx512_tiles() ? tiles::exp2_gemm_avx512 : tiles::exp2_gemm_avx2;
    exp2_gemm(rows, cols, width, alpha, q_i.row(0), q_i.ld, 1, keys.panel(j0), keys.ld, shift, probs,
              kTileLd);
    return true;
  }
  return false;
}
template <typename T>
bool softmax_grad_product(int64_t r0, int64_t r1, int64_t seen, const Rows<T>& d_out_i,
                          const KeysOperand<T>& values, int64_t j0, const T* probs,
                          const T* row_dot, T* d_probs) {
  if constexpr (std::is_same_v<T, float>) {
    if (!values.transposed) return false;
    const auto softmax_grad_gemm =
        tiles::avx512_tiles() ? tiles::softmax_grad_gemm_avx512 : tiles::softmax_grad_gemm_avx2;
    softmax_grad_gemm(r1 - r0, seen, values.width, d_out_i.row(r0), d_out_i.ld, 1, values.panel(j0),
                      values.ld, probs + r0 * kTileLd, kTileLd, row_dot + r0, d_probs + r0 * kTileLd,
                      kTileLd);
    return true;
  }
  return false;
}

// The write side of Rows: `count` rows of a gradient, `width` entries each, `ld` apart, that the
// tile products add into (C += ...) again and again: dK and dV once per query tile, dQ once per
// key tile. Strided like the rows above, they cost those products about a tenth of their speed
// (P^T dO into rows 3 KB apart, cycling over 16 tiles, in cache: 97 against 109 GFLOP/s). So
// on the tile kernels, when the rows take at least kRevisits products, the sums go to zeroed
// per-thread scratch, rows next to each other, and add() puts them into the gradient once.
// Fewer revisits do not pay for the extra pass; there, and contiguous already, they add in place.
constexpr int64_t kRevisits = 4;

template <typename T>
struct Sums {
  T *target, *data;
  int64_t ld_target, ld, count, width;

  Sums(Slot slot, T* rows, int64_t ld_rows, int64_t count, int64_t width, int64_t revisits)
      : target(rows), data(rows), ld_target(ld_rows), ld(ld_rows), count(count), width(width) {
    if constexpr (std::is_same_v<T, float>) {
      const bool strided = ld_rows != width && on_tiles(kQueryTile, kKeyTile, width);
      if (!strided || revisits < kRevisits) return;
      data = scratch<float>(slot, count * width);
      std::fill(data, data + count * width, 0.0f);
      ld = width;
    }
  }
  T* row(int64_t r) const { return data + r * ld; }
  void add() const {
    if (data == target) return;
    for (int64_t r = 0; r < count; ++r) {
      T* out = target + r * ld_target;
      const T* sum = data + r * width;
      for (int64_t c = 0; c < width; ++c) out[c] += sum[c];
    }
  }
};

// ---- The softmax row passes ---------------------------------------------------------------------
// The softmax row passes over a tile of scores, rows `ld` apart: the forward's online-softmax step
// and the backward's P = 2^(S - lse) and dS = P * (dP - D). Scores and log-sum-exps are in base-2
// units here (the kernel multiplies Q K^T by scale log2(e)), so that every exponential is an exp2.
// Each pass is a plain loop over cpu/fast/simd.h's row helpers (SSE2 lanes in f32, std::exp2 in
// f64), and f32 on a CPU with AVX2 takes the tile version of cpu/fast/attention_tiles.h instead,
// which tests/cpu/fast/test_attention_tiles.cpp checks against double.

// One step of the online softmax, a row at a time: with m the row's running max and
// m' = max(m, the row's max), the row becomes 2^(s - m'), its sum l becomes
// l 2^(m - m') + the row's new sum, and correction[r] = 2^(m - m') is what the caller rescales
// the row's accumulator by. A row with nothing visible yet (m' = -inf) becomes 0 and keeps m and l.
// The correction is 1 there, and also on a row's first visible tile (m = -inf): until then its l
// and accumulator are sums of zero probabilities, 0 (or NaN from 0 * NaN in V), which
// 2^-inf = 0 would leave as they are. The AVX2 and AVX-512 versions take all the rows' maxima
// first.
template <typename T>
void online_softmax(T* scores, int64_t rows, int64_t cols, T* row_max, T* row_sum, T* correction) {
  if constexpr (std::is_same_v<T, float>) {
    if (fast_paths_enabled()) {
      const auto step = tiles::avx512_tiles() ? tiles::online_softmax_avx512 : tiles::online_softmax_avx2;
      return step(scores, rows, cols, row_max, row_sum, correction);
    }
  }
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  for (int64_t r = 0; r < rows; ++r) {
    T* s = scores + r * cols;
    const T new_max = std::max(row_max[r], simd::row_max_of(s, cols));
    correction[r] = T(1);
    if (new_max == kNegInf) {  // nothing visible in this row yet
      std::fill(s, s + cols, T(0));
      continue;
    }
    // 1 when the max stays, or on the first visible tile (above)
    if (new_max != row_max[r] && row_max[r] != kNegInf) correction[r] = std::exp2(row_max[r] - new_max);
    row_sum[r] = row_sum[r] * correction[r] + simd::exp2_shifted_row(s, cols, new_max);
    row_max[r] = new_max;
  }
}

// P = 2^(S - lse) in every row whose lse is finite (the others, fully masked, are zero already).
template <typename T>
void probabilities(T* scores, int64_t rows, int64_t cols, int64_t ld, const T* lse) {
  if constexpr (std::is_same_v<T, float>) {
    if (fast_paths_enabled()) return tiles::exp2_rows_avx2(scores, rows, cols, ld, lse);
  }
  for (int64_t r = 0; r < rows; ++r) {
    if (lse[r] == -std::numeric_limits<T>::infinity()) continue;
    simd::exp2_shifted_row(scores + r * ld, cols, lse[r]);
  }
}

// dS = P * (dP - D) in place of dP, D a row's dO . O.
template <typename T>
void softmax_backward(T* d_probs, const T* probs, int64_t rows, int64_t cols, int64_t ld, const T* dot) {
  if constexpr (std::is_same_v<T, float>) {
    if (fast_paths_enabled()) {
      return tiles::softmax_backward_rows_avx2(d_probs, probs, rows, cols, ld, dot);
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    T* d = d_probs + r * ld;
    const T* p = probs + r * ld;
    for (int64_t c = 0; c < cols; ++c) d[c] = p[c] * (d[c] - dot[r]);
  }
}

// ---- Work units and prefetching -----------------------------------------------------------------

// Attention of at most this many flops in all (its products, counted as if no key were masked)
// runs on the calling thread (the thread policy: runtime/threads.h): a sampled token's attention
// over a short context would otherwise wake the pool for microseconds of work.
constexpr double kParallelAttentionFlops = kParallelFlops;

// The flops of one batch item's products: forward S = Q K^T and O = P V; the backward recomputes
// S and forms dV, dP, dQ and dK.
double attention_item_flops(const AttentionProblem& p, bool backward) {
  const double sq = static_cast<double>(p.q.size(2)), sk = static_cast<double>(p.k.size(2));
  const double dq = static_cast<double>(p.q.size(3)), dv = static_cast<double>(p.v.size(3));
  return 2 * sq * sk * (backward ? 3 * dq + 2 * dv : dq + dv);
}

// Runs body(index, next) for index < count (batch items, or runs of an item's query tiles), on
// the thread pool when `flops` (all the units') is above kParallelAttentionFlops; each body's
// GEMMs run on its own thread (OpenBLAS is single-threaded). A thread takes a chunk of
// consecutive indices and runs them in order (the pool's dynamic claiming balances units of
// unequal cost: causal runs, padded items): `next` is the index it runs after this one (-1 at the
// end of its chunk), whose rows the body may prefetch.
template <typename Body>
void for_each_unit(int64_t count, double flops, Body&& body) {
  const int64_t grain = grain_for(flops / static_cast<double>(count), kParallelAttentionFlops);
  parallel_for(count, grain, [&](int64_t first, int64_t past) {
    for (int64_t index = first; index < past; ++index) {
      body(index, index + 1 < past ? index + 1 : -1);
    }
  });
}

// The threads for_each_unit runs units of `flops` in all on: the pool's above
// kParallelAttentionFlops, outside a parallel region; else the calling thread.
inline int64_t unit_threads(double flops) {
  const bool split = num_threads() > 1 && flops > kParallelAttentionFlops && !in_parallel_region();
  return split ? num_threads() : 1;
}

// Short sequences make many small work units whose rows (a head's slice of each position) lie
// spread over megabytes, where the hardware prefetchers do not follow: at 64 items of 64 positions
// and head_dim 16 the kernel ran a third slower than on the same items already in cache. So a
// unit asks for the next unit's rows while it computes, when they are at most this many bytes
// (a part of L2; larger units reuse their rows many times, and a prefetch would evict them).
constexpr int64_t kPrefetchBytes = 128 << 10;

// One operand of a work unit: `count` rows of `width` entries, `ld` apart.
template <typename T>
struct RowSpan {
  const T* rows;
  int64_t count, width, ld;
  int64_t bytes() const { return count * width * static_cast<int64_t>(sizeof(T)); }
};

// Asks the cache for every line of the spans (the gradients' for writing), if they are small.
template <typename T>
void prefetch(std::initializer_list<RowSpan<T>> reads, std::initializer_list<RowSpan<T>> writes = {}) {
  int64_t bytes = 0;
  for (const RowSpan<T>& span : reads) bytes += span.bytes();
  for (const RowSpan<T>& span : writes) bytes += span.bytes();
  if (bytes > kPrefetchBytes) return;
  constexpr int64_t kLine = 64 / sizeof(T);
  const auto lines = [](const RowSpan<T>& span, auto fetch) {
    for (int64_t r = 0; r < span.count; ++r) {
      const T* row = span.rows + r * span.ld;
      for (int64_t c = 0; c < span.width; c += kLine) fetch(row + c);
      fetch(row + span.width - 1);  // a row that starts inside a line ends in one more
    }
  };
  for (const RowSpan<T>& span : reads) lines(span, [](const T* at) { __builtin_prefetch(at, 0, 2); });
  for (const RowSpan<T>& span : writes) lines(span, [](const T* at) { __builtin_prefetch(at, 1, 2); });
}

// ---- Where an item's rows lie -------------------------------------------------------------------

// Item n's rows of one tensor: the first, how far apart they lie, and the entries of each.
template <typename T>
struct ItemRows {
  T* first;
  int64_t ld, width;
  T* row(int64_t i) const { return first + i * ld; }
  // Rows [i, i + count), as prefetch takes them.
  RowSpan<std::remove_const_t<T>> span(int64_t i, int64_t count) const {
    return {row(i), count, width, ld};
  }
};

// Item n's rows of a [B, H, S, width] tensor t (n = b H + h), found from t's strides.
template <typename T>
ItemRows<T> item_rows(const Tensor& t, int64_t n) {
  const Shape &shape = t.shape(), &strides = t.strides();
  T* base = t.data_as<std::remove_const_t<T>>();
  return {base + (n / shape[1]) * strides[0] + (n % shape[1]) * strides[1], strides[2], shape[3]};
}

// ---- Forward ------------------------------------------------------------------------------------

// Item n's rows in every tensor the forward reads or writes.
template <typename T>
struct ForwardRows {
  ItemRows<const T> q, k, v;
  ItemRows<T> out;
  T* lse;  // [Sq]

  ForwardRows(const AttentionProblem& p, const Tensor& out_tensor, const Tensor& lse_tensor,
              int64_t n, int64_t sq)
      : q(item_rows<const T>(p.q, n)),
        k(item_rows<const T>(p.k, n)),
        v(item_rows<const T>(p.v, n)),
        out(item_rows<T>(out_tensor, n)),
        lse(lse_tensor.data_as<T>() + n * sq) {}
};

// The per-thread working memory of a forward query tile of `rows` queries: its scores against a key
// tile, the accumulator of P V ([rows, value_dim]), the rows' running max, sum and rescaling
// factor, and a row's dropout factors.
template <typename T>
struct ForwardScratch {
  int64_t value_dim;
  T *scores, *acc, *row_max, *row_sum, *correction, *keep;

  ForwardScratch(int64_t rows, int64_t value_dim)
      : value_dim(value_dim),
        scores(scratch<T>(kScores, rows * kKeyTile)),
        acc(scratch<T>(kAccumulator, rows * value_dim)),
        row_max(scratch<T>(kRowMax, rows)),
        row_sum(scratch<T>(kRowSum, rows)),
        correction(scratch<T>(kCorrection, rows)),
        keep(scratch<T>(kKeep, kKeyTile)) {}
};

// One key tile (keys j0 .., `cols` of them) of a forward query tile (rows i0 ..): the scores, the
// online softmax step, the accumulator rescaled and P V added.
template <typename T>
void forward_key_tile(const Item& item, const Rows<T>& q_i, const KeysOperand<T>& keys,
                      const Rows<T>& values, const ForwardScratch<T>& buf, int64_t i0, int64_t rows,
                      int64_t j0, int64_t cols) {
  const AttentionProblem& p = item.p;
  const int64_t head_dim = keys.width, value_dim = buf.value_dim;
  T *scores = buf.scores, *acc = buf.acc, *correction = buf.correction, *keep = buf.keep;
  // S = scale log2(e) Q K^T, past the diagonal left out: mask_row below sets what is not
  // computed to -inf
  item.row_bands(i0, rows, j0, cols, [&](int64_t r0, int64_t r1, int64_t seen) {
    product_with_keys(r1 - r0, seen, head_dim, T(p.scale * kLog2e), q_i.row(r0), q_i.ld, keys, j0,
                      T(0), scores + r0 * cols, cols);
  });
  for (int64_t r = 0; r < rows; ++r) item.mask_row(i0 + r, j0, cols, scores + r * cols);
  online_softmax(scores, rows, cols, buf.row_max, buf.row_sum, correction);
  for (int64_t r = 0; r < rows; ++r) {
    if (correction[r] != T(1)) {
      for (int64_t c = 0; c < value_dim; ++c) acc[r * value_dim + c] *= correction[r];
    }
    if (p.dropout_p > 0) {  // the normaliser above counts every probability; out drops some
      T* s = scores + r * cols;
      item.keep_row(i0 + r, j0, cols, keep);
      for (int64_t c = 0; c < cols; ++c) s[c] *= keep[c];
    }
  }
  item.row_bands(i0, rows, j0, cols, [&](int64_t r0, int64_t r1, int64_t seen) {  // O += P V
    product(false, false, r1 - r0, value_dim, seen, T(1), scores + r0 * cols, cols,
            values.row(j0), values.ld, T(1), acc + r0 * value_dim, value_dim);
  });
}

// out_i = acc_i / l_i and the natural log-sum-exp (m_i + log2 l_i) ln 2 of the query tile's rows
// i0 .. i0 + rows - 1.
template <typename T>
void store_rows(const ForwardRows<T>& data, const ForwardScratch<T>& buf, int64_t i0,
                int64_t rows) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  const int64_t value_dim = buf.value_dim, ld_out = data.out.ld;
  const T *acc = buf.acc, *row_max = buf.row_max, *row_sum = buf.row_sum;
  T* out = data.out.row(i0);
  T* lse = data.lse + i0;
  for (int64_t r = 0; r < rows; ++r) {
    const bool empty = row_sum[r] == T(0);  // a fully masked row: output 0, gradient 0
    const T inverse_sum = T(1) / row_sum[r];  // one division a row, not value_dim
    for (int64_t c = 0; c < value_dim; ++c) {
      out[r * ld_out + c] = empty ? T(0) : acc[r * value_dim + c] * inverse_sum;
    }
    lse[r] = empty ? kNegInf : (row_max[r] + std::log2(row_sum[r])) * T(kLn2);
  }
}

// Forward of one query tile (rows i0 ..) of one item: out and the row log-sum-exp.
template <typename T>
void forward_tile(const Item& item, const ForwardRows<T>& data, int64_t i0,
                  const KeysOperand<T>& keys, const Rows<T>& values) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  const int64_t rows = std::min(kQueryTile, item.sq - i0), value_dim = data.v.width;
  const Rows<T> q_i(kQueryRows, data.q.row(i0), data.q.ld, rows, data.q.width);
  const ForwardScratch<T> buf(rows, value_dim);
  std::fill(buf.acc, buf.acc + rows * value_dim, T(0));
  std::fill(buf.row_max, buf.row_max + rows, kNegInf);
  std::fill(buf.row_sum, buf.row_sum + rows, T(0));

  const int64_t key_end = item.key_end(i0, rows);
  for (int64_t j0 = 0; j0 < key_end; j0 += kKeyTile) {
    const int64_t cols = std::min(kKeyTile, key_end - j0);
    if (!item.tile_visible(i0, rows, j0, cols)) continue;
    forward_key_tile(item, q_i, keys, values, buf, i0, rows, j0, cols);
  }
  store_rows(data, buf, i0, rows);
}

// A work unit of the forward: a run of one item's query tiles.
struct Unit {
  Item item;
  int64_t first_row, past_row, keys;  // its query rows, and the keys its last tile reads
};

// Asks the cache for the rows the next unit reads and writes.
template <typename T>
void prefetch_unit(const Unit& next, const ForwardRows<T>& data) {
  const int64_t rows = next.past_row - next.first_row;
  prefetch<T>({data.q.span(next.first_row, rows), data.k.span(0, next.keys),
               data.v.span(0, next.keys)},
              {data.out.span(next.first_row, rows)});
}

// The forward of one unit: its query tiles in order, on keys and values laid out once for all;
// a unit of at most kFewQueryRows queries (incremental decoding's newest position) reads them where
// they are instead, since laying them out would cost as much as its products.
template <typename T>
void forward_unit(const Unit& u, const ForwardRows<T>& data) {
  const bool few = u.past_row - u.first_row <= kFewQueryRows;
  const KeysOperand<T> keys(kKeysT, data.k.first, data.k.ld, u.keys, data.k.width, few);
  const Rows<T> values(kValueRows, data.v.first, data.v.ld, keys.count, data.v.width, few);
  for (int64_t i0 = u.first_row; i0 < u.past_row; i0 += kQueryTile) {
    if (const int64_t next = i0 + kQueryTile; next < u.past_row) {  // as in the backward
      const int64_t next_rows = std::min(kQueryTile, u.past_row - next);
      prefetch<T>({data.q.span(next, next_rows)}, {data.out.span(next, next_rows)});
    }
    forward_tile(u.item, data, i0, keys, values);
  }
}

// ---- Heads split from a projection --------------------------------------------------------------
// Heads split from a projection ([B, S, H, width] viewed as [B, H, S, width], or the packed
// [B, S, 3, H, width] of packed_self_attention) keep one position's heads side by side and one
// head's positions a whole row of the projection apart: a head's 128 bytes in every 1.5 KiB at
// charlm's sizes. Read head by head, as the units above read them, those rows come from memory
// one line at a time; the hardware prefetchers do not follow them and the prefetch of a whole
// unit ahead did not help. Measured at one thread on an AVX2 core, the forward ran 30-40% slower
// on such rows than on [B, H, S, width] tensors (charlm's attention 7.0 against 5.0 ms,
// textcls-mid's 9.2 against 6.7). So where one batch element's rows of q, k and v take at most
// kUnpackBytes (L2 holds them), a unit is a whole batch element: its rows are copied once,
// position by position (in address order, which the prefetchers follow), into per-thread memory
// laid out [H, S, width], and its heads run on the copies. The backward does the same with q, k,
// v, out and dO, and sums dQ, dK and dV in such memory, added into the gradients at the end:
// forward and backward together then ran 7-16% faster than with the forward's copies alone.
constexpr int64_t kUnpackBytes = 512 << 10;

// Whether the forward runs on batch elements unpacked as above: heads nearer each other than
// positions in some operand, q, k and v of the same batch and heads, more than a few queries
// (one decoded position reads its few rows in place), and at least two batch elements a thread.
template <typename T>
bool unpack_heads(const AttentionProblem& p, int64_t threads) {
  const Tensor* operands[] = {&p.q, &p.k, &p.v};
  bool split = false;
  int64_t bytes = 0;
  for (const Tensor* t : operands) {
    if (t->size(0) != p.q.size(0) || t->size(1) != p.q.size(1)) return false;
    split |= t->strides()[1] < t->strides()[2];
    bytes += t->size(1) * t->size(2) * t->size(3) * static_cast<int64_t>(sizeof(T));
  }
  return split && bytes <= kUnpackBytes && p.q.size(2) > kFewQueryRows &&
         p.q.size(0) >= 2 * threads;
}

// Calls visit(row, copy, width) for batch element b's rows of each operand and their places in
// per-thread memory laid out [H, S, width] (copies[o] for operand o): position by position, and
// within a position operand by operand and head by head, the order in which a projection's rows
// lie in memory.
template <typename T, size_t N, typename Visit>
void walk_heads(const std::array<const Tensor*, N>& operands, const std::array<T*, N>& copies,
                int64_t b, Visit&& visit) {
  int64_t positions = 0;
  for (const Tensor* t : operands) positions = std::max(positions, t->size(2));
  for (int64_t s = 0; s < positions; ++s) {
    for (size_t o = 0; o < N; ++o) {
      const Tensor& t = *operands[o];
      const int64_t heads = t.size(1), rows = t.size(2), width = t.size(3);
      if (s >= rows) continue;
      const Shape& strides = t.strides();
      T* row = t.data_as<T>() + b * strides[0] + s * strides[2];
      for (int64_t h = 0; h < heads; ++h) {
        visit(row + h * strides[1], copies[o] + (h * rows + s) * width, width);
      }
    }
  }
}

// Per-thread memory for batch element b's rows of each operand, [H, S, width] (slots[o]).
template <typename T, size_t N>
std::array<T*, N> heads_memory(const std::array<const Tensor*, N>& operands,
                               const std::array<Slot, N>& slots) {
  std::array<T*, N> memory{};
  for (size_t o = 0; o < N; ++o) {
    memory[o] = scratch<T>(slots[o], operands[o]->numel() / operands[o]->size(0));
  }
  return memory;
}

// Batch element b's rows of the operands, copied (walk_heads' order) into heads_memory.
template <typename T, size_t N>
std::array<T*, N> copy_heads(const std::array<const Tensor*, N>& operands,
                             const std::array<Slot, N>& slots, int64_t b) {
  const std::array<T*, N> copies = heads_memory<T>(operands, slots);
  walk_heads<T>(operands, copies, b, [](const T* row, T* copy, int64_t width) {
    for (int64_t c = 0; c < width; ++c) copy[c] = row[c];  // (a memmove call a row costs more)
  });
  return copies;
}

// Item (b, h)'s rows of t in its copy.
template <typename T>
ItemRows<T> copied_rows(T* copy, const Tensor& t, int64_t h) {
  const int64_t rows = t.size(2), width = t.size(3);
  return {copy + h * rows * width, width, width};
}

// The forward with a unit a batch element: its heads, one after the other, on copy_heads' copies.
template <typename T>
void forward_on_copies(const AttentionProblem& p, const Tensor& out_tensor,
                       const Tensor& lse_tensor, double flops) {
  const int64_t heads = p.q.size(1), sq = p.q.size(2), sk = p.k.size(2);
  const int64_t last_i0 = (sq - 1) / kQueryTile * kQueryTile;  // the last query tile's first row
  const bool* mask = p.mask.defined() ? p.mask.data_as<bool>() : nullptr;
  for_each_unit(p.q.size(0), flops, [&](int64_t b, int64_t) {
    const std::array<T*, 3> copies =
        copy_heads<T>(std::array{&p.q, &p.k, &p.v}, {kHeadsQ, kHeadsK, kHeadsV}, b);
    for (int64_t h = 0; h < heads; ++h) {
      ForwardRows<T> rows(p, out_tensor, lse_tensor, b * heads + h, sq);
      rows.q = copied_rows<const T>(copies[0], p.q, h);
      rows.k = copied_rows<const T>(copies[1], p.k, h);
      rows.v = copied_rows<const T>(copies[2], p.v, h);
      const Item item(p, b * heads + h, sq, sk, mask);
      forward_unit(Unit{item, 0, sq, item.key_end(last_i0, sq - last_i0)}, rows);
    }
  });
}

template <typename T>
void forward(const AttentionProblem& p, const Tensor& out_tensor, const Tensor& lse_tensor) {
  const int64_t batch = p.q.size(0) * p.q.size(1), sq = p.q.size(2), sk = p.k.size(2);
  const int64_t tiles = (sq + kQueryTile - 1) / kQueryTile;
  const bool* mask = p.mask.defined() ? p.mask.data_as<bool>() : nullptr;
  if (batch == 0 || tiles == 0) return;

  // Work units: each item's query tiles cut into `parts` runs, enough units to keep every thread
  // busy (dynamic claiming: causal tiles differ in cost). A unit transposes the keys it reads once
  // (KeysOperand), so whole items are the cheapest units where there are enough of them, and the
  // only ones when the attention runs on the calling thread alone.
  const double flops = batch * attention_item_flops(p, false);
  const int64_t threads = unit_threads(flops);
  if (unpack_heads<T>(p, threads)) return forward_on_copies<T>(p, out_tensor, lse_tensor, flops);
  const int64_t parts = std::clamp<int64_t>((4 * threads + batch - 1) / batch, 1, tiles);
  const auto unit = [&](int64_t work) {
    const int64_t n = work / parts, part = work % parts;
    const int64_t first_tile = part * tiles / parts, past_tile = (part + 1) * tiles / parts;
    const Item item(p, n, sq, sk, mask);
    const int64_t last_i0 = (past_tile - 1) * kQueryTile;
    return Unit{item, first_tile * kQueryTile, std::min(past_tile * kQueryTile, sq),
                item.key_end(last_i0, std::min(kQueryTile, sq - last_i0))};
  };
  const auto rows_of = [&](int64_t n) {
    return ForwardRows<T>(p, out_tensor, lse_tensor, n, sq);
  };
  for_each_unit(batch * parts, flops, [&](int64_t work, int64_t next_work) {
    if (next_work >= 0) {
      const Unit next = unit(next_work);
      prefetch_unit(next, rows_of(next.item.n));
    }
    const Unit u = unit(work);
    forward_unit(u, rows_of(u.item.n));
  });
}

// ---- Backward -----------------------------------------------------------------------------------

// Item n's rows in every tensor the backward reads or writes.
template <typename T>
struct BackwardRows {
  ItemRows<const T> q, k, v, out, d_out;
  const T* lse;  // [Sq]
  ItemRows<T> d_q, d_k, d_v;
};

// Asks the cache for the rows the next item reads and writes: all its queries, and the keys it
// sees.
template <typename T>
void prefetch_item(const BackwardRows<T>& data, int64_t sq, int64_t keys) {
  prefetch<T>({data.q.span(0, sq), data.k.span(0, keys), data.v.span(0, keys), data.out.span(0, sq),
               data.d_out.span(0, sq)},
              {data.d_q.span(0, sq), data.d_k.span(0, keys), data.d_v.span(0, keys)});
}

// The backward's per-thread working tiles. They have rows kTileLd apart, not 128: a product that
// reads P or dS transposed walks down their columns, and 512 bytes apart those would fill few L1
// sets.
template <typename T>
struct BackwardScratch {
  T* probs = scratch<T>(kScores, kQueryTile * kTileLd);
  T* dropped = scratch<T>(kDropped, kQueryTile * kTileLd);
  T* d_probs = scratch<T>(kDProbs, kQueryTile * kTileLd);
  T* row_dot = scratch<T>(kRowDot, kQueryTile);
  T* row_lse = scratch<T>(kRowLse, kQueryTile);  // the tile's log-sum-exps in base 2
  T* keep = scratch<T>(kKeep, kQueryTile * kTileLd);
};

// An item's keys and values as the backward's products read them (K and V transposed for
// S = Q K^T and dP = dO V^T, K as it is for dQ = dS K), and the sums of dK and dV, into which every
// query tile adds: the first `count` keys, those the item's last query tile reads.
template <typename T>
struct BackwardKeys {
  KeysOperand<T> keys, values;
  Rows<T> key_rows;
  Sums<T> d_k, d_v;

  BackwardKeys(const BackwardRows<T>& data, int64_t count, int64_t query_tiles)
      : keys(kKeysT, data.k.first, data.k.ld, count, data.k.width),
        values(kValuesT, data.v.first, data.v.ld, count, data.v.width),
        key_rows(kKeyRows, data.k.first, data.k.ld, count, data.k.width),
        d_k(kDKeySums, data.d_k.first, data.d_k.ld, count, data.d_k.width, query_tiles),
        d_v(kDValueSums, data.d_v.first, data.d_v.ld, count, data.d_v.width, query_tiles) {}
};

// A query tile of the backward, cut to queries [i0, i0 + rows), which see the keys before key_end:
// their q and dO rows as the products read them, and the sums of their dQ (a product per key tile
// adds into them).
template <typename T>
struct QueryTile {
  int64_t i0, rows, key_end;
  Rows<T> q, d_out;
  Sums<T> d_q;

  QueryTile(const Item& item, const BackwardRows<T>& data, int64_t i0, int64_t rows)
      : i0(i0), rows(rows), key_end(item.key_end(i0, rows)),
        q(kQueryRows, data.q.row(i0), data.q.ld, rows, data.q.width),
        d_out(kDOutRows, data.d_out.row(i0), data.d_out.ld, rows, data.d_out.width),
        d_q(kDQuerySums, data.d_q.row(i0), data.d_q.ld, rows, data.d_q.width,
            (key_end + kKeyTile - 1) / kKeyTile) {}  // a product per key tile
};

// P = 2^(S - lse log2(e)) of the query tile against keys j0 .. j0 + cols - 1 into buf.probs.
template <typename T>
void tile_probabilities(const Item& item, const T* lse, const QueryTile<T>& tile,
                        const KeysOperand<T>& keys, const BackwardScratch<T>& buf, int64_t j0,
                        int64_t cols) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  const AttentionProblem& p = item.p;
  const int64_t i0 = tile.i0, rows = tile.rows, head_dim = keys.width;
  T* probs = buf.probs;
  // P = 2^(S - lse log2(e)), on the tile kernels each block as it is stored, where nothing in
  // the tile is masked (and so no row is fully masked): as the three steps below
  if (item.tile_unmasked(i0, j0, cols) && exp2_product(rows, cols, head_dim, T(p.scale * kLog2e),
                                                       tile.q, keys, j0, buf.row_lse, probs)) {
    return;
  }
  // Row and key bands of a tile on the causal diagonal (Item::row_bands); one band
  // elsewhere. S = scale log2(e) Q K^T: scores past a row band's `seen` are not computed,
  // mask_row sets them -inf
  item.row_bands(i0, rows, j0, cols, [&](int64_t r0, int64_t r1, int64_t seen) {
    product_with_keys(r1 - r0, seen, head_dim, T(p.scale * kLog2e), tile.q.row(r0), tile.q.ld,
                      keys, j0, T(0), probs + r0 * kTileLd, kTileLd);
  });
  for (int64_t r = 0; r < rows; ++r) {
    T* prob = probs + r * kTileLd;
    if (lse[i0 + r] == kNegInf) {  // a fully masked row: no probabilities, no gradient
      std::fill(prob, prob + cols, T(0));
    } else {
      item.mask_row(i0 + r, j0, cols, prob);
    }
  }
  probabilities(probs, rows, cols, kTileLd, buf.row_lse);  // P = 2^(S - lse log2(e))
}

// With dropout: the tile's factors Z / (1 - p) into buf.keep, and P~ = P Z into buf.dropped.
template <typename T>
void drop_probabilities(const Item& item, const QueryTile<T>& tile, const BackwardScratch<T>& buf,
                        int64_t j0, int64_t cols) {
  T* dropped = buf.dropped;
  for (int64_t r = 0; r < tile.rows; ++r) {
    T* factors = buf.keep + r * kTileLd;
    item.keep_row(tile.i0 + r, j0, cols, factors);
    const T* prob = buf.probs + r * kTileLd;
    for (int64_t c = 0; c < cols; ++c) dropped[r * kTileLd + c] = prob[c] * factors[c];
  }
}

// dS = P (dP - D) in buf.d_probs (0 past the diagonal), and dQ_i += scale dS K_j, band by band.
template <typename T>
void add_query_gradient(const Item& item, const QueryTile<T>& tile, const BackwardKeys<T>& kv,
                        const BackwardScratch<T>& buf, int64_t j0, int64_t cols) {
  const AttentionProblem& p = item.p;
  const int64_t head_dim = kv.keys.width, value_dim = kv.values.width;
  const T *probs = buf.probs, *keep = buf.keep, *row_dot = buf.row_dot;
  T* d_probs = buf.d_probs;
  item.row_bands(tile.i0, tile.rows, j0, cols, [&](int64_t r0, int64_t r1, int64_t seen) {
    // dS = P (dO V^T - D): without dropout on the tile kernels, each block as it is stored
    if (!(p.dropout_p == 0 && softmax_grad_product(r0, r1, seen, tile.d_out, kv.values, j0, probs,
                                                   row_dot, d_probs))) {
      product_with_keys(r1 - r0, seen, value_dim, T(1), tile.d_out.row(r0), tile.d_out.ld,
                        kv.values, j0, T(0), d_probs + r0 * kTileLd, kTileLd);
      if (p.dropout_p > 0) {  // dP = dP~ * Z / (1 - p)
        for (int64_t r = r0; r < r1; ++r) {
          for (int64_t c = 0; c < seen; ++c) d_probs[r * kTileLd + c] *= keep[r * kTileLd + c];
        }
      }
      softmax_backward(d_probs + r0 * kTileLd, probs + r0 * kTileLd, r1 - r0, seen, kTileLd,
                       row_dot + r0);
    }
    for (int64_t r = r0; r < r1; ++r) {  // past the diagonal (P = 0 there)
      std::fill(d_probs + r * kTileLd + seen, d_probs + r * kTileLd + cols, T(0));
      item.add_relative_grad(tile.i0 + r, j0, seen, d_probs + r * kTileLd);
    }
    // dQ_i += scale dS K_j
    product(false, false, r1 - r0, head_dim, seen, T(p.scale), d_probs + r0 * kTileLd, kTileLd,
            kv.key_rows.row(j0), kv.key_rows.ld, T(1), tile.d_q.row(r0), tile.d_q.ld);
  });
}

// One key tile (keys j0 .., `cols` of them) of a backward query tile: P (P~ with dropout), then
// dV_j += P~^T dO_i, dS and dQ_i, and dK_j += scale dS^T Q_i.
template <typename T>
void backward_key_tile(const Item& item, const T* lse, const QueryTile<T>& tile,
                       const BackwardKeys<T>& kv, const BackwardScratch<T>& buf, int64_t j0,
                       int64_t cols) {
  const AttentionProblem& p = item.p;
  const int64_t i0 = tile.i0, rows = tile.rows;
  const int64_t head_dim = kv.keys.width, value_dim = kv.values.width;
  tile_probabilities(item, lse, tile, kv.keys, buf, j0, cols);
  if (p.dropout_p > 0) drop_probabilities(item, tile, buf, j0, cols);
  // dV_j += P~^T dO_i ; dP~ = dO_i V_j^T  (P~ = P without dropout)
  const T* kept_probs = p.dropout_p > 0 ? buf.dropped : buf.probs;
  item.key_bands(i0, rows, j0, cols, [&](int64_t c0, int64_t c1, int64_t from) {
    product(true, false, c1 - c0, value_dim, rows - from, T(1),
            kept_probs + from * kTileLd + c0, kTileLd, tile.d_out.row(from), tile.d_out.ld, T(1),
            kv.d_v.row(j0 + c0), kv.d_v.ld);
  });
  add_query_gradient(item, tile, kv, buf, j0, cols);
  // dK_j += scale dS^T Q_i
  const T* d_probs = buf.d_probs;
  item.key_bands(i0, rows, j0, cols, [&](int64_t c0, int64_t c1, int64_t from) {
    product(true, false, c1 - c0, head_dim, rows - from, T(p.scale),
            d_probs + from * kTileLd + c0, kTileLd, tile.q.row(from), tile.q.ld, T(1),
            kv.d_k.row(j0 + c0), kv.d_k.ld);
  });
}

// The backward of the query tile from tile_start: cut to the rows that have a gradient, D_i and
// the base-2 log-sum-exps of its rows, each key tile it sees, then its dQ sums into the gradient.
template <typename T>
void backward_query_tile(const Item& item, const BackwardRows<T>& data, const BackwardKeys<T>& kv,
                         const BackwardScratch<T>& buf, int64_t tile_start) {
  // A query whose output gradient is zero adds nothing to dQ, dK or dV: dP = dO V^T and
  // D = dO . O vanish with dO, and so does dS. So the tile shrinks to its rows from the first
  // to the last with a nonzero dO, and a tile of none is skipped: padded queries, whose outputs
  // a model ignores, or the positions a forecaster does not read, cost nothing here.
  const int64_t value_dim = data.d_out.width;
  int64_t first = 0, past = std::min(kQueryTile, item.sq - tile_start);
  while (first < past && all_zero(data.d_out.row(tile_start + first), value_dim)) ++first;
  while (past > first && all_zero(data.d_out.row(tile_start + past - 1), value_dim)) --past;
  if (first == past) return;
  const QueryTile<T> tile(item, data, tile_start + first, past - first);
  for (int64_t r = 0; r < tile.rows; ++r) {  // D_i = dO_i . O_i
    const int64_t i = tile.i0 + r;
    buf.row_dot[r] = dot(data.d_out.row(i), data.out.row(i), value_dim);
    buf.row_lse[r] = data.lse[i] * T(kLog2e);
  }
  for (int64_t j0 = 0; j0 < tile.key_end; j0 += kKeyTile) {
    const int64_t cols = std::min(kKeyTile, tile.key_end - j0);
    if (!item.tile_visible(tile.i0, tile.rows, j0, cols)) continue;
    backward_key_tile(item, data.lse, tile, kv, buf, j0, cols);
  }
  tile.d_q.add();
}

// The backward of one item: its query tiles in order, which share the sums of dK and dV.
template <typename T>
void backward_item(const Item& item, const BackwardRows<T>& data) {
  const int64_t sq = item.sq;
  const int64_t keys_read = item.key_end(0, sq);  // by the item's last query tile
  const int64_t query_tiles = (sq + kQueryTile - 1) / kQueryTile;  // each adds into dK and dV
  const BackwardKeys<T> kv(data, keys_read, query_tiles);
  const BackwardScratch<T> buf;
  for (int64_t tile_start = 0; tile_start < sq; tile_start += kQueryTile) {
    if (const int64_t next_start = tile_start + kQueryTile; next_start < sq) {
      // The next tile's rows lie a row stride apart (with interleaved heads, kilobytes), where
      // the hardware prefetchers do not follow: asked for now, they arrive while this one computes.
      const int64_t next_rows = std::min(kQueryTile, sq - next_start);
      prefetch<T>({data.q.span(next_start, next_rows), data.d_out.span(next_start, next_rows),
                   data.out.span(next_start, next_rows)},
                  {data.d_q.span(next_start, next_rows)});
    }
    backward_query_tile(item, data, kv, buf, tile_start);
  }
  kv.d_k.add();
  kv.d_v.add();
}

// The backward with a unit a batch element, as the forward's (forward_on_copies): q, k, v, out
// and dO copied, dQ, dK and dV summed in zeroed per-thread memory of the same layout and added
// into the gradients at the end, in the same order.
template <typename T>
void backward_on_copies(const AttentionProblem& p, const Tensor& out_tensor, const T* lse,
                        const Tensor& grad_out, const std::array<const Tensor*, 3>& grads,
                        double flops) {
  const int64_t heads = p.q.size(1), sq = p.q.size(2), sk = p.k.size(2);
  const bool* mask = p.mask.defined() ? p.mask.data_as<bool>() : nullptr;
  for_each_unit(p.q.size(0), flops, [&](int64_t b, int64_t) {
    const std::array<T*, 5> copies =
        copy_heads<T>(std::array{&p.q, &p.k, &p.v, &out_tensor, &grad_out},
                      {kHeadsQ, kHeadsK, kHeadsV, kHeadsOut, kHeadsDOut}, b);
    const std::array<T*, 3> sums = heads_memory<T>(grads, {kHeadsDQ, kHeadsDK, kHeadsDV});
    for (int o = 0; o < 3; ++o) std::fill_n(sums[o], grads[o]->numel() / grads[o]->size(0), T(0));
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t n = b * heads + h;
      const BackwardRows<T> rows{copied_rows<const T>(copies[0], p.q, h),
                                 copied_rows<const T>(copies[1], p.k, h),
                                 copied_rows<const T>(copies[2], p.v, h),
                                 copied_rows<const T>(copies[3], out_tensor, h),
                                 copied_rows<const T>(copies[4], grad_out, h),
                                 lse + n * sq,
                                 copied_rows<T>(sums[0], *grads[0], h),
                                 copied_rows<T>(sums[1], *grads[1], h),
                                 copied_rows<T>(sums[2], *grads[2], h)};
      backward_item(Item(p, n, sq, sk, mask), rows);
    }
    walk_heads<T>(grads, sums, b, [](T* row, const T* sum, int64_t width) {
      for (int64_t c = 0; c < width; ++c) row[c] += sum[c];
    });
  });
}

template <typename T>
void backward(const AttentionProblem& p, const Tensor& out_tensor, const Tensor& lse_tensor,
              const Tensor& grad_out, const Tensor& grad_q, const Tensor& grad_k,
              const Tensor& grad_v) {
  const int64_t batch = p.q.size(0) * p.q.size(1), sq = p.q.size(2), sk = p.k.size(2);
  const bool* mask = p.mask.defined() ? p.mask.data_as<bool>() : nullptr;
  const auto rows_of = [&](int64_t n) {
    return BackwardRows<T>{item_rows<const T>(p.q, n),      item_rows<const T>(p.k, n),
                           item_rows<const T>(p.v, n),      item_rows<const T>(out_tensor, n),
                           item_rows<const T>(grad_out, n), lse_tensor.data_as<T>() + n * sq,
                           item_rows<T>(grad_q, n),         item_rows<T>(grad_k, n),
                           item_rows<T>(grad_v, n)};
  };
  // Items are independent; tiles of one item share dK and dV.
  const double flops = batch * attention_item_flops(p, true);
  if (unpack_heads<T>(p, unit_threads(flops))) {
    return backward_on_copies<T>(p, out_tensor, lse_tensor.data_as<T>(), grad_out,
                                 {&grad_q, &grad_k, &grad_v}, flops);
  }
  for_each_unit(batch, flops, [&](int64_t n, int64_t next) {
    if (next >= 0) prefetch_item(rows_of(next), sq, Item(p, next, sq, sk, mask).key_end(0, sq));
    const Item item(p, n, sq, sk, mask);
    backward_item(item, rows_of(n));
  });
}

}  // namespace

// ---- f16 / bf16 and the entry points -------------------------------------------------------------
// f16 / bf16 (mixed precision): the half tensors are converted to f32 once, the f32 kernel runs
// (f32 scores, softmax statistics and accumulators) and each result is rounded once into its
// half output. The log-sum-exp is f32 for half inputs (the op allocates it so).
namespace {

// An f32 tensor of t's shape whose dims lie in memory in the order of t's strides, largest first:
// an f32 copy of heads split from a projection ([B, H, S, width] over [B, S, H, width]) keeps
// them interleaved, as the f32 copies of the output and gradients are.
Tensor f32_like(const Tensor& t) {
  Shape order(t.dim());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return t.strides()[a] > t.strides()[b]; });
  Shape sizes, inverse(t.dim());
  for (int64_t d = 0; d < t.dim(); ++d) {
    sizes.push_back(t.size(order[d]));
    inverse[order[d]] = d;
  }
  return empty(sizes, DType::f32, t.device()).permute(inverse);
}

Tensor f32_copy(Kernels& kernels, const Tensor& t) {
  Tensor converted = f32_like(t);
  kernels.copy(t, converted);
  return converted;
}

AttentionProblem f32_problem(Kernels& kernels, const AttentionProblem& problem) {
  AttentionProblem converted = problem;
  converted.q = f32_copy(kernels, problem.q);
  converted.k = f32_copy(kernels, problem.k);
  converted.v = f32_copy(kernels, problem.v);
  return converted;
}

// The kernel finds rows from the strides of [B, H, S, width] tensors whose last dim has stride 1.
void check_rows(const char* kernel, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    TG_CHECK(t->dim() == 4 && (t->size(3) <= 1 || t->strides()[3] == 1), "kernel '", kernel,
             "' on cpu: q, k, v, the output and the gradients must be [B, H, S, width] with ",
             "stride 1 on the last dim, got ", shape_str(t->shape()));
  }
}

// The tiled kernel in T, or under tg::Textbook (autograd/textbook.h) the plain loops it is tested
// against (cpu/reference.cpp), which recompute the probabilities and need no out or lse.
template <typename T>
void forward_or_reference(const AttentionProblem& p, const Tensor& out, const Tensor& lse) {
  if (textbook_mode()) return reference::attention_forward(p, out, lse);
  forward<T>(p, out, lse);
}

template <typename T>
void backward_or_reference(const AttentionProblem& p, const Tensor& out, const Tensor& lse,
                           const Tensor& grad_out, const Tensor& grad_q, const Tensor& grad_k,
                           const Tensor& grad_v) {
  if (textbook_mode()) return reference::attention_backward(p, grad_out, grad_q, grad_k, grad_v);
  backward<T>(p, out, lse, grad_out, grad_q, grad_k, grad_v);
}

}  // namespace

void CpuKernels::attention_forward(const AttentionProblem& problem, const Tensor& out,
                                   const Tensor& logsumexp) {
  check_rows("attention_forward", {&problem.q, &problem.k, &problem.v, &out});
  if (fast_paths_enabled()) tiles::avx512_tiles();  // a bad TAPEGRAD_ATTENTION_TILES: its error, here
  if (is_half(problem.q.dtype())) {
    const Tensor out32 = f32_like(out);
    forward_or_reference<float>(f32_problem(*this, problem), out32, logsumexp);
    copy(out32, out);
    return;
  }
  dispatch_floating(problem.q.dtype(), "attention_forward",
                    [&](auto tag) { forward_or_reference<decltype(tag)>(problem, out, logsumexp); });
}

void CpuKernels::attention_backward(const AttentionProblem& problem, const Tensor& out,
                                    const Tensor& logsumexp, const Tensor& grad_out,
                                    const Tensor& grad_q, const Tensor& grad_k,
                                    const Tensor& grad_v) {
  check_rows("attention_backward", {&problem.q, &problem.k, &problem.v, &out, &grad_out, &grad_q,
                                    &grad_k, &grad_v});
  if (fast_paths_enabled()) tiles::avx512_tiles();  // a bad TAPEGRAD_ATTENTION_TILES: its error, here
  if (is_half(problem.q.dtype())) {
    const Tensor grad_q32 = f32_copy(*this, grad_q), grad_k32 = f32_copy(*this, grad_k),
                 grad_v32 = f32_copy(*this, grad_v);
    backward_or_reference<float>(f32_problem(*this, problem), f32_copy(*this, out), logsumexp,
                                 f32_copy(*this, grad_out), grad_q32, grad_k32, grad_v32);
    copy(grad_q32, grad_q);
    copy(grad_k32, grad_k);
    copy(grad_v32, grad_v);
    return;
  }
  dispatch_floating(problem.q.dtype(), "attention_backward", [&](auto tag) {
    backward_or_reference<decltype(tag)>(problem, out, logsumexp, grad_out, grad_q, grad_k, grad_v);
  });
}

}  // namespace tg::cpu
