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
// by returning false: for f16 / bf16, and when the fast paths are off (cpu/features.h).
// tests/cpu/fast/test_linear.cpp compares the two.
#include <algorithm>

#include "tapegrad/cpu/features.h"
#include "tapegrad/cpu/kernels.h"

namespace tg::cpu {
namespace {

// A block of rows: G's, x's and dx's rows together at most this many bytes (half of a 1 MB L2).
constexpr int64_t kBlockBytes = 512 << 10;

template <typename T>
void linear_backward_rows(const Tensor& g_t, const Tensor& x_t, const Tensor& w_t,
                          const Tensor& dx_t, const Tensor& dw_t, const Tensor& db_t,
                          CpuKernels& kernels) {
  const int64_t m = g_t.size(0), n = g_t.size(1), k = x_t.size(1);
  const T* g = g_t.data_as<T>();
  const T* x = x_t.data_as<T>();
  const T* w = dx_t.defined() ? w_t.data_as<T>() : nullptr;  // read for dx only
  T* dx = dx_t.defined() ? dx_t.data_as<T>() : nullptr;
  T* dw = dw_t.defined() ? dw_t.data_as<T>() : nullptr;
  T* db = db_t.defined() ? db_t.data_as<T>() : nullptr;
  const double flops = 2.0 * static_cast<double>(m) * n * k * ((dx ? 1 : 0) + (dw ? 1 : 0));
  const bool parallel = num_threads() > 1 && flops > kParallelFlops && !in_parallel_region();
  const int64_t threads = parallel ? std::min<int64_t>(num_threads(), (m + 15) / 16) : 1;
  const int64_t share = ((m + threads - 1) / threads + 15) / 16 * 16;  // rows a thread
  const int64_t row_bytes = (n + 2 * k) * static_cast<int64_t>(sizeof(T));
  // Blocks only while dW stays in L2 too (above); else the share is one block, the products.
  const bool dw_fits = n * k * static_cast<int64_t>(sizeof(T)) <= kBlockBytes;
  const int64_t block = dw_fits ? std::max<int64_t>(16, kBlockBytes / row_bytes / 16 * 16) : share;
  const int64_t partial = n * k + n;  // one thread's dW and db
  const size_t scratch_bytes = static_cast<size_t>((threads - 1) * partial) * sizeof(T);
  T* scratch = scratch_bytes > 0 ? static_cast<T*>(kernels.allocate(scratch_bytes)) : nullptr;

  // One piece a thread, each with its own partial dW and db (piece 0 writes dW and db): the
  // pieces are fixed by the thread count, whichever thread runs each.
  parallel_for(threads, 1, [&](int64_t first_piece, int64_t past_piece) {
    for (int64_t t = first_piece; t < past_piece; ++t) {
      T* my_dw = !dw ? nullptr : t == 0 ? dw : scratch + (t - 1) * partial;
      T* my_db = !db ? nullptr : t == 0 ? db : scratch + (t - 1) * partial + n * k;
      if (my_dw) std::fill(my_dw, my_dw + n * k, T(0));
      if (my_db) std::fill(my_db, my_db + n, T(0));
      const int64_t first = std::min(m, t * share), past = std::min(m, first + share);
      // Rows r0 .. r1 of G, none of them zero: dx's rows, and their terms of dW and db
      const auto add_rows = [&](int64_t r0, int64_t r1) {
        const T* g_rows = g + r0 * n;
        if (dx) blas_gemm(false, false, r1 - r0, k, n, T(1), g_rows, n, w, k, T(0), dx + r0 * k, k);
        if (my_dw) {
          blas_gemm(true, false, n, k, r1 - r0, T(1), g_rows, n, x + r0 * k, k, T(1), my_dw, k);
        }
        if (my_db) {
          for (int64_t r = 0; r < r1 - r0; ++r) {
            for (int64_t j = 0; j < n; ++j) my_db[j] += g_rows[r * n + j];
          }
        }
      };
      for (int64_t b0 = first; b0 < past; b0 += block) {
        const int64_t b1 = std::min(past, b0 + block);
        for (int64_t r = b0; r < b1;) {  // the block in runs: zero rows, then rows with a gradient
          int64_t run = r;
          while (run < b1 && all_zero(g + run * n, n)) ++run;
          if (dx) std::fill(dx + r * k, dx + run * k, T(0));
          r = run;
          while (run < b1 && !all_zero(g + run * n, n)) ++run;
          if (run > r) add_rows(r, run);
          r = run;
        }
      }
    }
  });
  // dW and db += the other threads' shares, in thread order
  for (int64_t t = 1; t < threads; ++t) {
    const T* other = scratch + (t - 1) * partial;
    if (dw) {
      in_pieces(n * k, n * k * static_cast<int64_t>(sizeof(T)), [&](int64_t first, int64_t past) {
        for (int64_t i = first; i < past; ++i) dw[i] += other[i];
      });
    }
    if (db) {
      for (int64_t j = 0; j < n; ++j) db[j] += other[n * k + j];
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
    linear_backward_rows<decltype(tag)>(g, x, weight, dx, dw, db, *this);
  });
  return true;
}

}  // namespace tg::cpu
