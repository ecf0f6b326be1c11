// CPU fused attention (FlashAttention's algorithm on tiles): the fast kernel. The same math
// as plain loops is attention_forward / attention_backward in ops/cpu_reference.cpp, and
// tests/ops/test_cpu_reference.cpp compares the two.
//
// Forward, per tile of queries: walk the key tiles, S = scale Q K^T on one GEMM, keep a running
// row max m and row sum l (online softmax), rescale the accumulator when m grows, add P V with a
// second GEMM. S is kept in base-2 units (scale log2(e) Q K^T), so every exponential is an exp2,
// three fewer FMA-unit instructions than an exp (ops/cpu_attention_item.h, ops/cpu_simd.h).
// Causal tiles entirely above the diagonal, and tiles the sparse layout rules out
// (Item::tile_visible, ops/cpu_attention_item.h), are never visited. Only out and the per-row
// log-sum-exp (natural: (m + log2 l) ln 2) are kept: O(S) statistics instead of the O(S^2)
// weights.
//
// Backward recomputes P = 2^(S - lse log2(e)) tile by tile and applies, with D_i = dO_i . O_i,
//   dV += P^T dO,  dP = dO V^T,  dS = P * (dP - D),  dQ += scale dS K,  dK += scale dS^T Q
// (with dropout, P and dP carry the keep mask Z / (1 - p)).
//
// Sizes: q [N, Sq, head_dim], k [N, Sk, head_dim], v [N, Sk, value_dim]; gradients are d_q, d_k,
// d_v, d_out. With interleaved heads every operand but the log-sum-exp is [B, S, H, width]
// instead (AttentionProblem), so rows are ld_qk, ld_v or ld_out apart (item_rows). On a CPU
// with AVX2 and FMA, f32 tiles up to head_dim 128 run on the kernels of
// ops/cpu_attention_tiles.h: products (a BLAS call costs more than the arithmetic of a
// 32 x 32 x 16 tile) and the softmax row passes (ops/cpu_attention_rows.h); their operands are
// laid out for L1 first (ops/cpu_attention_operands.h), and causal tiles on the diagonal are
// computed in bands (Item::row_bands). Otherwise, and for f64, products go to blas_gemm (one BLAS
// thread each) and rows to ops/cpu_simd.h. OpenMP runs over items, or runs
// of query tiles (autograd/threads.h). Working memory is per thread and kept between calls
// (scratch), so a tile allocates nothing. docs/attention.md tells what each choice gained.
#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>

#include "tapegrad/autograd/threads.h"
#include "tapegrad/ops/cpu_attention_item.h"
#include "tapegrad/ops/cpu_attention_operands.h"
#include "tapegrad/ops/cpu_attention_rows.h"
#include "tapegrad/ops/cpu_kernels.h"

namespace tg::cpu {
namespace {

using namespace attention;  // Item, the tile sizes and operands, the row passes

// Where item n's rows of an operand start: [N, S, width], or [B, S, H, width] when heads
// interleave (AttentionProblem::interleaved_heads = H), with rows `ld` apart (row_stride: H width
// for the output and its gradient; q, k, v and theirs may be packed wider, input_row_stride).
template <typename T>
T* item_rows(T* base, int64_t n, int64_t rows, int64_t width, int64_t heads, int64_t ld) {
  if (heads == 0) return base + n * rows * width;
  return base + (n / heads) * rows * ld + (n % heads) * width;
}
template <typename T>  // the same in an operand's data
T* item_rows(const Tensor& operand, int64_t n, int64_t rows, int64_t width, int64_t heads, int64_t ld) {
  return item_rows(operand.data_as<T>(), n, rows, width, heads, ld);
}
int64_t row_stride(int64_t width, int64_t heads) { return heads == 0 ? width : heads * width; }
int64_t input_row_stride(const AttentionProblem& p, int64_t width) {
  return p.interleaved_heads > 0 && p.qkv_row_stride > 0 ? p.qkv_row_stride
                                                         : row_stride(width, p.interleaved_heads);
}

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

// Runs body(index, next) for index < count (batch items, or runs of an item's query tiles) on
// OpenMP's threads; each body's GEMMs run on its own thread (OpenBLAS is single-threaded). A
// thread takes `group` consecutive indices at a time and runs them in order: `next` is the index
// it runs after this one (-1 at the end of a group), whose rows the body may prefetch.
template <typename Body>
void parallel_for(int64_t count, int64_t group, Body&& body) {
  const bool parallel = count > 1 && num_threads() > 1;
  if (!parallel) group = std::max<int64_t>(count, 1);  // one thread runs them all, in order
#pragma omp parallel for schedule(dynamic, group) if (parallel)
  for (int64_t index = 0; index < count; ++index) {
    body(index, (index + 1) % group != 0 && index + 1 < count ? index + 1 : -1);
  }
}

// The group of parallel_for: up to 8 units, while every thread still gets four groups or more
// (the dynamic schedule balances units of unequal cost: causal runs, padded items).
int64_t unit_group(int64_t units) {
  return std::clamp<int64_t>(units / (4 * num_threads()), 1, 8);
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

// Forward of one query tile (rows i0 ..) of one item: out and the row log-sum-exp.
template <typename T>
void forward_tile(const Item& item, int64_t i0, const KeysOperand<T>& keys, const Rows<T>& values,
                  const Tensor& out_tensor, const Tensor& lse_tensor) {
  const AttentionProblem& p = item.p;
  const int64_t heads = p.interleaved_heads, n = item.n, sq = item.sq;
  const int64_t head_dim = p.q.size(-1), value_dim = p.v.size(-1);
  const int64_t ld_qk = input_row_stride(p, head_dim), ld_out = row_stride(value_dim, heads);
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  const int64_t rows = std::min(kQueryTile, sq - i0);
  const Rows<T> q_i(kQueryRows, item_rows<T>(p.q, n, sq, head_dim, heads, ld_qk) + i0 * ld_qk, ld_qk,
                    rows, head_dim);
  T* scores = scratch<T>(kScores, rows * kKeyTile);
  T* acc = scratch<T>(kAccumulator, rows * value_dim);
  T* row_max = scratch<T>(kRowMax, rows);
  T* row_sum = scratch<T>(kRowSum, rows);
  T* correction = scratch<T>(kCorrection, rows);
  T* keep = scratch<T>(kKeep, kKeyTile);
  std::fill(acc, acc + rows * value_dim, T(0));
  std::fill(row_max, row_max + rows, kNegInf);
  std::fill(row_sum, row_sum + rows, T(0));

  const int64_t key_end = item.key_end(i0, rows);
  for (int64_t j0 = 0; j0 < key_end; j0 += kKeyTile) {
    const int64_t cols = std::min(kKeyTile, key_end - j0);
    if (!item.tile_visible(i0, rows, j0, cols)) continue;
    // S = scale log2(e) Q K^T, past the diagonal left out: mask_row below sets what is not
    // computed to -inf
    item.row_bands(i0, rows, j0, cols, [&](int64_t r0, int64_t r1, int64_t seen) {
      product_with_keys(r1 - r0, seen, head_dim, T(p.scale * kLog2e), q_i.row(r0), q_i.ld, keys, j0, T(0),
                        scores + r0 * cols, cols);
    });
    for (int64_t r = 0; r < rows; ++r) item.mask_row(i0 + r, j0, cols, scores + r * cols);
    online_softmax(scores, rows, cols, row_max, row_sum, correction);
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
  T* out = item_rows<T>(out_tensor, n, sq, value_dim, heads, ld_out) + i0 * ld_out;
  T* lse = lse_tensor.data_as<T>() + n * sq + i0;
  for (int64_t r = 0; r < rows; ++r) {
    const bool empty = row_sum[r] == T(0);  // a fully masked row: output 0, gradient 0
    const T inverse_sum = T(1) / row_sum[r];  // one division a row, not value_dim
    for (int64_t c = 0; c < value_dim; ++c) {
      out[r * ld_out + c] = empty ? T(0) : acc[r * value_dim + c] * inverse_sum;
    }
    lse[r] = empty ? kNegInf : (row_max[r] + std::log2(row_sum[r])) * T(kLn2);
  }
}

template <typename T>
void forward(const AttentionProblem& p, const Tensor& out_tensor, const Tensor& lse_tensor) {
  const int64_t heads = p.interleaved_heads;
  const int64_t batch = p.q.size(0) * (heads > 0 ? heads : 1), sq = p.q.size(1), sk = p.k.size(1);
  const int64_t head_dim = p.q.size(-1), value_dim = p.v.size(-1);
  const int64_t ld_qk = input_row_stride(p, head_dim), ld_v = input_row_stride(p, value_dim);
  const int64_t tiles = (sq + kQueryTile - 1) / kQueryTile;
  const bool* mask = p.mask.defined() ? p.mask.data_as<bool>() : nullptr;
  if (batch == 0 || tiles == 0) return;

  // Work units: each item's query tiles cut into `parts` runs, enough units to keep every thread
  // busy (dynamic schedule: causal tiles differ in cost). A unit transposes the keys it reads once
  // (KeysOperand), so whole items are the cheapest units where there are enough of them.
  const int64_t parts = std::clamp<int64_t>((4 * num_threads() + batch - 1) / batch, 1, tiles);
  const int64_t ld_out = row_stride(value_dim, heads);
  struct Unit {
    Item item;
    int64_t first_row, past_row, keys;  // its query rows, and the keys its last tile reads
  };
  const auto unit = [&](int64_t work) {
    const int64_t n = work / parts, part = work % parts;
    const int64_t first_tile = part * tiles / parts, past_tile = (part + 1) * tiles / parts;
    const Item item(p, n, sq, sk, mask);
    const int64_t last_i0 = (past_tile - 1) * kQueryTile;
    return Unit{item, first_tile * kQueryTile, std::min(past_tile * kQueryTile, sq),
                item.key_end(last_i0, std::min(kQueryTile, sq - last_i0))};
  };
  parallel_for(batch * parts, unit_group(batch * parts), [&](int64_t work, int64_t next_work) {
    if (next_work >= 0) {
      const Unit next = unit(next_work);
      const int64_t n = next.item.n, rows = next.past_row - next.first_row;
      const T* q = item_rows<T>(p.q, n, sq, head_dim, heads, ld_qk) + next.first_row * ld_qk;
      const T* out = item_rows<T>(out_tensor, n, sq, value_dim, heads, ld_out) + next.first_row * ld_out;
      prefetch<T>({{q, rows, head_dim, ld_qk},
                   {item_rows<T>(p.k, n, sk, head_dim, heads, ld_qk), next.keys, head_dim, ld_qk},
                   {item_rows<T>(p.v, n, sk, value_dim, heads, ld_v), next.keys, value_dim, ld_v}},
                  {{out, rows, value_dim, ld_out}});
    }
    const Unit u = unit(work);
    const int64_t n = u.item.n;
    const KeysOperand<T> keys(kKeysT, item_rows<T>(p.k, n, sk, head_dim, heads, ld_qk), ld_qk, u.keys,
                              head_dim);
    const Rows<T> values(kValueRows, item_rows<T>(p.v, n, sk, value_dim, heads, ld_v), ld_v, keys.count,
                         value_dim);
    for (int64_t i0 = u.first_row; i0 < u.past_row; i0 += kQueryTile) {
      if (const int64_t next = i0 + kQueryTile; next < u.past_row) {  // as in the backward
        const int64_t next_rows = std::min(kQueryTile, u.past_row - next);
        const T* q = item_rows<T>(p.q, n, sq, head_dim, heads, ld_qk) + next * ld_qk;
        const T* out = item_rows<T>(out_tensor, n, sq, value_dim, heads, ld_out) + next * ld_out;
        prefetch<T>({{q, next_rows, head_dim, ld_qk}}, {{out, next_rows, value_dim, ld_out}});
      }
      forward_tile(u.item, i0, keys, values, out_tensor, lse_tensor);
    }
  });
}

template <typename T>
void backward(const AttentionProblem& p, const Tensor& out_tensor, const Tensor& lse_tensor,
              const Tensor& grad_out, const Tensor& grad_q, const Tensor& grad_k,
              const Tensor& grad_v) {
  const int64_t heads = p.interleaved_heads;
  const int64_t batch = p.q.size(0) * (heads > 0 ? heads : 1), sq = p.q.size(1), sk = p.k.size(1);
  const int64_t head_dim = p.q.size(-1), value_dim = p.v.size(-1);
  const int64_t ld_qk = input_row_stride(p, head_dim), ld_v = input_row_stride(p, value_dim);
  const int64_t ld_out = row_stride(value_dim, heads);
  const bool* mask = p.mask.defined() ? p.mask.data_as<bool>() : nullptr;
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();

  // Items are independent; tiles of one item share dK and dV.
  parallel_for(batch, unit_group(batch), [&](int64_t n, int64_t next) {
    if (next >= 0) {
      const int64_t keys = Item(p, next, sq, sk, mask).key_end(0, sq);
      prefetch<T>({{item_rows<T>(p.q, next, sq, head_dim, heads, ld_qk), sq, head_dim, ld_qk},
                   {item_rows<T>(p.k, next, sk, head_dim, heads, ld_qk), keys, head_dim, ld_qk},
                   {item_rows<T>(p.v, next, sk, value_dim, heads, ld_v), keys, value_dim, ld_v},
                   {item_rows<T>(out_tensor, next, sq, value_dim, heads, ld_out), sq, value_dim, ld_out},
                   {item_rows<T>(grad_out, next, sq, value_dim, heads, ld_out), sq, value_dim, ld_out}},
                  {{item_rows<T>(grad_q, next, sq, head_dim, heads, ld_qk), sq, head_dim, ld_qk},
                   {item_rows<T>(grad_k, next, sk, head_dim, heads, ld_qk), keys, head_dim, ld_qk},
                   {item_rows<T>(grad_v, next, sk, value_dim, heads, ld_v), keys, value_dim, ld_v}});
    }
    const Item item(p, n, sq, sk, mask);
    const T* q = item_rows<T>(p.q, n, sq, head_dim, heads, ld_qk);
    const T* k = item_rows<T>(p.k, n, sk, head_dim, heads, ld_qk);
    const T* v = item_rows<T>(p.v, n, sk, value_dim, heads, ld_v);
    const T* out = item_rows<T>(out_tensor, n, sq, value_dim, heads, ld_out);
    const T* lse = lse_tensor.data_as<T>() + n * sq;
    const T* d_out = item_rows<T>(grad_out, n, sq, value_dim, heads, ld_out);
    T* d_q = item_rows<T>(grad_q, n, sq, head_dim, heads, ld_qk);
    T* d_k = item_rows<T>(grad_k, n, sk, head_dim, heads, ld_qk);
    T* d_v = item_rows<T>(grad_v, n, sk, value_dim, heads, ld_v);
    const int64_t keys_read = item.key_end(0, sq);  // by the item's last query tile
    const KeysOperand<T> keys(kKeysT, k, ld_qk, keys_read, head_dim);
    const KeysOperand<T> values(kValuesT, v, ld_v, keys_read, value_dim);
    const Rows<T> key_rows(kKeyRows, k, ld_qk, keys_read, head_dim);
    const int64_t query_tiles = (sq + kQueryTile - 1) / kQueryTile;  // each adds into dK and dV
    const Sums<T> d_k_sums(kDKeySums, d_k, ld_qk, keys_read, head_dim, query_tiles);
    const Sums<T> d_v_sums(kDValueSums, d_v, ld_v, keys_read, value_dim, query_tiles);

    // The tiles below have rows kTileLd apart, not 128: a product that reads P or dS transposed
    // walks down their columns, and 512 bytes apart those would fill few L1 sets.
    T* probs = scratch<T>(kScores, kQueryTile * kTileLd);
    T* dropped = scratch<T>(kDropped, kQueryTile * kTileLd);
    T* d_probs = scratch<T>(kDProbs, kQueryTile * kTileLd);
    T* row_dot = scratch<T>(kRowDot, kQueryTile);
    T* row_lse = scratch<T>(kRowLse, kQueryTile);  // the tile's log-sum-exps in base 2
    T* keep = scratch<T>(kKeep, kQueryTile * kTileLd);
    for (int64_t tile_start = 0; tile_start < sq; tile_start += kQueryTile) {
      if (const int64_t next_start = tile_start + kQueryTile; next_start < sq) {
        // The next tile's rows lie a row stride apart (with interleaved heads, kilobytes), where
        // the hardware prefetchers do not follow: asked for now, they arrive while this one computes.
        const int64_t next_rows = std::min(kQueryTile, sq - next_start);
        prefetch<T>({{q + next_start * ld_qk, next_rows, head_dim, ld_qk},
                     {d_out + next_start * ld_out, next_rows, value_dim, ld_out},
                     {out + next_start * ld_out, next_rows, value_dim, ld_out}},
                    {{d_q + next_start * ld_qk, next_rows, head_dim, ld_qk}});
      }
      // A query whose output gradient is zero adds nothing to dQ, dK or dV: dP = dO V^T and
      // D = dO . O vanish with dO, and so does dS. So the tile shrinks to its rows from the first
      // to the last with a nonzero dO, and a tile of none is skipped: padded queries, whose outputs
      // a model ignores, or the positions a forecaster does not read, cost nothing here.
      int64_t first = 0, past = std::min(kQueryTile, sq - tile_start);
      while (first < past && all_zero(d_out + (tile_start + first) * ld_out, value_dim)) ++first;
      while (past > first && all_zero(d_out + (tile_start + past - 1) * ld_out, value_dim)) --past;
      if (first == past) continue;
      const int64_t i0 = tile_start + first, rows = past - first;
      const Rows<T> q_i(kQueryRows, q + i0 * ld_qk, ld_qk, rows, head_dim);
      const Rows<T> d_out_i(kDOutRows, d_out + i0 * ld_out, ld_out, rows, value_dim);
      const int64_t key_end = item.key_end(i0, rows);
      const Sums<T> d_q_i(kDQuerySums, d_q + i0 * ld_qk, ld_qk, rows, head_dim,
                          (key_end + kKeyTile - 1) / kKeyTile);  // a product per key tile
      for (int64_t r = 0; r < rows; ++r) {  // D_i = dO_i . O_i
        const int64_t row = (i0 + r) * ld_out;
        row_dot[r] = dot(d_out + row, out + row, value_dim);
        row_lse[r] = lse[i0 + r] * T(kLog2e);
      }
      for (int64_t j0 = 0; j0 < key_end; j0 += kKeyTile) {
        const int64_t cols = std::min(kKeyTile, key_end - j0);
        if (!item.tile_visible(i0, rows, j0, cols)) continue;
        // P = 2^(S - lse log2(e)), on the tile kernels each block as it is stored, where nothing in
        // the tile is masked (and so no row is fully masked): as the three steps below
        if (!(item.tile_unmasked(i0, j0, cols) &&
              exp2_product(rows, cols, head_dim, T(p.scale * kLog2e), q_i, keys, j0, row_lse, probs))) {
          // Row and key bands of a tile on the causal diagonal (Item::row_bands); one band
          // elsewhere. S = scale log2(e) Q K^T: scores past a row band's `seen` are not computed,
          // mask_row sets them -inf
          item.row_bands(i0, rows, j0, cols, [&](int64_t r0, int64_t r1, int64_t seen) {
            product_with_keys(r1 - r0, seen, head_dim, T(p.scale * kLog2e), q_i.row(r0), q_i.ld, keys,
                              j0, T(0), probs + r0 * kTileLd, kTileLd);
          });
          for (int64_t r = 0; r < rows; ++r) {
            T* prob = probs + r * kTileLd;
            if (lse[i0 + r] == kNegInf) {  // a fully masked row: no probabilities, no gradient
              std::fill(prob, prob + cols, T(0));
            } else {
              item.mask_row(i0 + r, j0, cols, prob);
            }
          }
          probabilities(probs, rows, cols, kTileLd, row_lse);  // P = 2^(S - lse log2(e))
        }
        if (p.dropout_p > 0) {
          for (int64_t r = 0; r < rows; ++r) {
            T* factors = keep + r * kTileLd;
            item.keep_row(i0 + r, j0, cols, factors);
            const T* prob = probs + r * kTileLd;
            for (int64_t c = 0; c < cols; ++c) dropped[r * kTileLd + c] = prob[c] * factors[c];
          }
        }
        // dV_j += P~^T dO_i ; dP~ = dO_i V_j^T  (P~ = P without dropout)
        const T* kept_probs = p.dropout_p > 0 ? dropped : probs;
        item.key_bands(i0, rows, j0, cols, [&](int64_t c0, int64_t c1, int64_t from) {
          product(true, false, c1 - c0, value_dim, rows - from, T(1),
                  kept_probs + from * kTileLd + c0, kTileLd, d_out_i.row(from), d_out_i.ld, T(1),
                  d_v_sums.row(j0 + c0), d_v_sums.ld);
        });
        item.row_bands(i0, rows, j0, cols, [&](int64_t r0, int64_t r1, int64_t seen) {
          // dS = P (dO V^T - D): without dropout on the tile kernels, each block as it is stored
          if (!(p.dropout_p == 0 && softmax_grad_product(r0, r1, seen, d_out_i, values, j0, probs,
                                                         row_dot, d_probs))) {
            product_with_keys(r1 - r0, seen, value_dim, T(1), d_out_i.row(r0), d_out_i.ld, values, j0,
                              T(0), d_probs + r0 * kTileLd, kTileLd);
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
          }
          // dQ_i += scale dS K_j
          product(false, false, r1 - r0, head_dim, seen, T(p.scale), d_probs + r0 * kTileLd,
                  kTileLd, key_rows.row(j0), key_rows.ld, T(1), d_q_i.row(r0), d_q_i.ld);
        });
        // dK_j += scale dS^T Q_i
        item.key_bands(i0, rows, j0, cols, [&](int64_t c0, int64_t c1, int64_t from) {
          product(true, false, c1 - c0, head_dim, rows - from, T(p.scale),
                  d_probs + from * kTileLd + c0, kTileLd, q_i.row(from), q_i.ld, T(1),
                  d_k_sums.row(j0 + c0), d_k_sums.ld);
        });
      }
      d_q_i.add();
    }
    d_k_sums.add();
    d_v_sums.add();
  });
}

}  // namespace

// f16 / bf16 (mixed precision): the half tensors are converted to f32 once, the f32 kernel runs
// (f32 scores, softmax statistics and accumulators) and each result is rounded once into its
// half output. The log-sum-exp is f32 for half inputs (the op allocates it so).
namespace {

Tensor f32_copy(Kernels& kernels, const Tensor& t) {
  Tensor converted = empty(t.shape(), DType::f32, t.device());
  kernels.copy(t, converted);
  return converted;
}

AttentionProblem f32_problem(Kernels& kernels, const AttentionProblem& problem) {
  AttentionProblem converted = problem;
  converted.q = f32_copy(kernels, problem.q);
  converted.k = f32_copy(kernels, problem.k);
  converted.v = f32_copy(kernels, problem.v);
  converted.qkv_row_stride = 0;  // the copies are contiguous [B, S, H, width]
  return converted;
}

}  // namespace

void CpuKernels::attention_forward(const AttentionProblem& problem, const Tensor& out,
                                   const Tensor& logsumexp) {
  if (is_half(problem.q.dtype())) {
    const Tensor out32 = empty(out.shape(), DType::f32, out.device());
    forward<float>(f32_problem(*this, problem), out32, logsumexp);
    copy(out32, out);
    return;
  }
  dispatch_floating(problem.q.dtype(), "attention_forward",
                    [&](auto tag) { forward<decltype(tag)>(problem, out, logsumexp); });
}

void CpuKernels::attention_backward(const AttentionProblem& problem, const Tensor& out,
                                    const Tensor& logsumexp, const Tensor& grad_out,
                                    const Tensor& grad_q, const Tensor& grad_k,
                                    const Tensor& grad_v) {
  if (is_half(problem.q.dtype())) {
    const Tensor grad_q32 = f32_copy(*this, grad_q), grad_k32 = f32_copy(*this, grad_k),
                 grad_v32 = f32_copy(*this, grad_v);
    backward<float>(f32_problem(*this, problem), f32_copy(*this, out), logsumexp,
                    f32_copy(*this, grad_out), grad_q32, grad_k32, grad_v32);
    copy(grad_q32, grad_q);
    copy(grad_k32, grad_k);
    copy(grad_v32, grad_v);
    return;
  }
  dispatch_floating(problem.q.dtype(), "attention_backward", [&](auto tag) {
    backward<decltype(tag)>(problem, out, logsumexp, grad_out, grad_q, grad_k, grad_v);
  });
}

}  // namespace tg::cpu
