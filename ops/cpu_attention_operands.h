#pragma once
// The operands of the CPU fused attention kernel (ops/cpu_attention.cpp) and the products between
// them: per-thread working memory (scratch), a tile product on the tile kernels or on BLAS
// (product), the keys transposed into panels (KeysOperand), strided rows packed next to each other
// to be read (Rows) or summed into (Sums), and the backward's two products that apply the next
// step as they store. Included by ops/cpu_attention.cpp alone; the kernel's loops are there.
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "tapegrad/ops/cpu_attention_item.h"
#include "tapegrad/ops/cpu_attention_tiles.h"
#include "tapegrad/ops/cpu_features.h"
#include "tapegrad/ops/cpu_kernels.h"

namespace tg::cpu::attention {

constexpr int64_t kTileLd = kKeyTile + 8;  // the backward's tiles (ops/cpu_attention.cpp: why)

// With AVX2, f32 products of at most this many multiply-adds run on the micro-kernels of
// ops/cpu_attention_tiles.h, larger ones on BLAS: whole 64 x 128 tiles up to head_dim and value_dim
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
  kDValueSums, kSlots
};

template <typename T>
T* scratch(Slot slot, int64_t count) {
  thread_local std::vector<T> buffers[kSlots];
  std::vector<T>& buffer = buffers[slot];
  if (buffer.size() < static_cast<size_t>(count)) buffer.resize(count);
  return buffer.data();
}

// C = alpha op(A) op(B) + beta C for one tile (row-major, as blas_gemm). Small f32 tiles on a CPU
// with AVX2: tiles::gemm_avx2, a transposed A read through its strides. Everything else (f64 for
// gradcheck, large tiles, CPUs without AVX2, where plain loops would lose to OpenBLAS's SSE kernels
// by 2x): BLAS. A transposed B (K or V of a key tile) comes through product_with_keys below.
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
  tiles::gemm_avx2(m, n, k, alpha, a, transpose_a ? 1 : lda, transpose_a ? lda : 1, b, ldb, beta,
                   c, ldc);
}

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

  // Key tile j0's transposed panel, [width, kKeyTile] (when transposed).
  const T* panel(int64_t j0) const { return data + j0 / kKeyTile * width * kKeyTile; }

  KeysOperand(Slot slot, const T* rows, int64_t ld_rows, int64_t count, int64_t width)
      : data(rows), ld(ld_rows), count(count), width(width) {
    if constexpr (std::is_same_v<T, float>) {
      if (!on_tiles(kQueryTile, kKeyTile, width) || count == 0) return;
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

// C (m x cols) = alpha A K_j^T + beta C for the keys [j0, j0 + cols) of `keys` (j0 a multiple of
// kKeyTile, cols at most kKeyTile), A m x k (lda).
template <typename T>
void product_with_keys(int64_t m, int64_t cols, int64_t k, T alpha, const T* a, int64_t lda,
                       const KeysOperand<T>& keys, int64_t j0, T beta, T* c, int64_t ldc) {
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

  Rows(Slot slot, const T* rows, int64_t ld_rows, int64_t count, int64_t width)
      : data(rows), ld(ld_rows) {
    if constexpr (std::is_same_v<T, float>) {
      if (ld_rows == width || !on_tiles(kQueryTile, kKeyTile, width)) return;
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
    tiles::exp2_gemm_avx2(rows, cols, width, alpha, q_i.row(0), q_i.ld, 1, keys.panel(j0), keys.ld,
                          shift, probs, kTileLd);
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
    tiles::softmax_grad_gemm_avx2(r1 - r0, seen, values.width, d_out_i.row(r0), d_out_i.ld, 1,
                                  values.panel(j0), values.ld, probs + r0 * kTileLd, kTileLd,
                                  row_dot + r0, d_probs + r0 * kTileLd, kTileLd);
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

}  // namespace tg::cpu::attention
