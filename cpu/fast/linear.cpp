// The backward of a linear layer in one pass over the output gradient (Kernels::linear_backward):
// dx = G W, dW = G^T x, db = the column sums of G.
//
// As three separate products, each reads all of G (M x N: 6 MB for timeseries' q, k, v
// projection), and by the time the second starts, the first has pushed the start of G out of
// L2. Here each thread takes a contiguous share of G's rows and walks it in blocks small enough
// that a block of G, x and dx stays in L2 while the block's three results are computed: G is read
// from memory once. That holds while dW (N x K) stays in L2 too, for every block adds into it:
// past kBlockBytes of dW (a 768-wide layer) each block would stream dW through memory again, half
// the products' speed at 3072 x 768, so then a thread's share is one block. The price: each
// thread past the first sums its share of dW and db into a buffer of its own ((threads - 1) x
// (N K + N) entries, from the allocator, so the peak counts it), and the buffers are added at the
// end. So dW's sums run in another order than one product over all rows, and depend on the thread
// count (within rounding).
//
// A row of G that is zero adds nothing to dW or db, and its row of dx is zero: so a block goes
// in runs, zero rows (dx's rows set to 0) and rows with a gradient (the products). Positions a
// model does not read give such rows: all but the last of a forecaster that predicts from the last
// position, and padding that a mean over the real positions weighs 0. As with the attention's
// queries (docs/attention.md), the result is the products' up to the order of the sums, except
// that a NaN or infinity of x in a row whose gradient is zero no longer reaches dW (0 * inf).
//
// The plain path is the three products (ops/matmul.cpp), which this kernel leaves to the caller
// by returning false: for f16 / bf16, and when the fast paths are off (runtime/features.h).
// tests/cpu/fast/test_linear.cpp compares the two.
#include <algorithm>

#include "tapegrad/cpu/kernels.h"
#include "tapegrad/runtime/features.h"

namespace tg::cpu {
namespace {

// A block of rows: G's, x's and dx's rows together at most this many bytes (half of a 1 MB L2).
constexpr int64_t kBlockBytes = 512 << 10;

// The operands, as pointers: dx, dW and db are null where not asked for (w is read for dx only).
template <typename T>
struct Operands {
  int64_t m, n, k;  // G is m x n, x is m x k, W is n x k
  const T* g;
  const T* x;
  const T* w;
  T* dx;
  T* dw;
  T* db;
};

// How G's rows are cut: `threads` pieces of `share` rows (a multiple of 16; the last may be
// shorter), each walked in blocks of `block` rows.
struct RowPlan {
  int64_t threads, share, block;
};

template <typename T>
RowPlan plan_rows(const Operands<T>& a) {
  const double flops =
      2.0 * static_cast<double>(a.m) * a.n * a.k * ((a.dx ? 1 : 0) + (a.dw ? 1 : 0));
  const bool parallel = num_threads() > 1 && flops > kParallelFlops && !in_parallel_region();
  const int64_t threads = parallel ? std::min<int64_t>(num_threads(), (a.m + 15) / 16) : 1;
  const int64_t share = ((a.m + threads - 1) / threads + 15) / 16 * 16;
  const int64_t row_bytes = (a.n + 2 * a.k) * static_cast<int64_t>(sizeof(T));
  // Blocks only while dW stays in L2 too (above); else the share is one block, the products.
  const bool dw_fits = a.n * a.k * static_cast<int64_t>(sizeof(T)) <= kBlockBytes;
  const int64_t block =
      dw_fits ? std::max<int64_t>(16, kBlockBytes / row_bytes / 16 * 16) : share;
  return {threads, share, block};
}

// Rows r0 .. r1 of G, none of them zero: their rows of dx, and their terms added to dw and db
// (a piece's own dW and db, or null).
template <typename T>
void add_rows(const Operands<T>& a, int64_t r0, int64_t r1, T* dw, T* db) {
  const int64_t n = a.n, k = a.k;
  const T* g_rows = a.g + r0 * n;
  if (a.dx) {
    blas_gemm(false, false, r1 - r0, k, n, T(1), g_rows, n, a.w, k, T(0), a.dx + r0 * k, k);
  }
  if (dw) blas_gemm(true, false, n, k, r1 - r0, T(1), g_rows, n, a.x + r0 * k, k, T(1), dw, k);
  if (!db) return;
  for (int64_t r = 0; r < r1 - r0; ++r) {
    for (int64_t j = 0; j < n; ++j) db[j] += g_rows[r * n + j];
  }
}

// Rows b0 .. b1 of G in runs: zero rows (dx's rows set to 0), then rows with a gradient.
template <typename T>
void add_block(const Operands<T>& a, int64_t b0, int64_t b1, T* dw, T* db) {
  const int64_t n = a.n, k = a.k;
  for (int64_t r = b0; r < b1;) {
    int64_t run = r;
    while (run < b1 && all_zero(a.g + run * n, n)) ++run;
    if (a.dx) std::fill(a.dx + r * k, a.dx + run * k, T(0));
    r = run;
    while (run < b1 && !all_zero(a.g + run * n, n)) ++run;
    if (run > r) add_rows(a, r, run, dw, db);
    r = run;
  }
}

// One piece, rows first .. past: dw and db (the piece's own, or null) start at 0 and get its
// terms, a block at a time.
template <typename T>
void add_piece(const Operands<T>& a, int64_t first, int64_t past, int64_t block, T* dw, T* db) {
  if (dw) std::fill(dw, dw + a.n * a.k, T(0));
  if (db) std::fill(db, db + a.n, T(0));
  for (int64_t b0 = first; b0 < past; b0 += block) {
    add_block(a, b0, std::min(past, b0 + block), dw, db);
  }
}

template <typename T>
void linear_backward_rows(const Operands<T>& a, CpuKernels& kernels) {
  const RowPlan plan = plan_rows(a);
  const int64_t dw_size = a.n * a.k, partial = dw_size + a.n;  // one piece's dW and db
  const size_t scratch_bytes = static_cast<size_t>((plan.threads - 1) * partial) * sizeof(T);
  T* scratch = scratch_bytes > 0 ? static_cast<T*>(kernels.allocate(scratch_bytes)) : nullptr;

  // One piece a thread, each with its own partial dW and db (piece 0 writes dW and db): the
  // pieces are fixed by the thread count, whichever thread runs each.
  parallel_for(plan.threads, 1, [&](int64_t first_piece, int64_t past_piece) {
    for (int64_t t = first_piece; t < past_piece; ++t) {
      T* own = t == 0 ? nullptr : scratch + (t - 1) * partial;
      T* dw = !a.dw ? nullptr : t == 0 ? a.dw : own;
      T* db = !a.db ? nullptr : t == 0 ? a.db : own + dw_size;
      const int64_t first = std::min(a.m, t * plan.share);
      add_piece(a, first, std::min(a.m, first + plan.share), plan.block, dw, db);
    }
  });
  // dW and db += the other pieces', in piece order
  const int64_t dw_bytes = dw_size * static_cast<int64_t>(sizeof(T));
  for (int64_t t = 1; t < plan.threads; ++t) {
    const T* other = scratch + (t - 1) * partial;
    if (a.dw) {
      in_pieces(dw_size, dw_bytes, [&](int64_t first, int64_t past) {
        for (int64_t i = first; i < past; ++i) a.dw[i] += other[i];
      });
    }
    if (a.db) {
      for (int64_t j = 0; j < a.n; ++j) a.db[j] += other[dw_size + j];
    }
  }
  if (scratch) kernels.deallocate(scratch, scratch_bytes);
}

}  // namespace

bool CpuKernels::linear_backward(const Tensor& g, const Tensor& x, const Tensor& weight,
                                 const Tensor& dx, const Tensor& dw, const Tensor& db) {
  if (!fast_paths_enabled() || (g.dtype() != DType::f32 && g.dtype() != DType::f64)) return false;
  if (g.size(0) == 0 || g.size(1) == 0 || x.size(1) == 0) return false;  // the products' edge cases
  dispatch_floating(g.dtype(), "linear_backward", [&](auto tag) {
    using T = decltype(tag);
    const auto data = [](const Tensor& t) { return t.defined() ? t.data_as<T>() : nullptr; };
    const T* w = dx.defined() ? data(weight) : nullptr;  // read for dx only
    const Operands<T> operands{g.size(0), g.size(1), x.size(1), data(g), data(x), w,
                               data(dx), data(dw), data(db)};
    linear_backward_rows(operands, *this);
  });
  return true;
}

}  // namespace tg::cpu
