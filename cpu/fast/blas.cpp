// CPU kernels on OpenBLAS: the one BLAS wrapper (blas_gemm; a product of a few rows runs as GEMVs),
// batched GEMM (split over the thread pool, see gemm_batch), and the row gather/scatter behind
// embeddings.
//
// The plain twin of CpuKernels::gemm is reference::gemm (cpu/reference.cpp), the triple loop with
// its sums in double; tests/cpu/test_reference.cpp compares them, and under tg::Textbook
// (autograd/textbook.h) CpuKernels::gemm runs it instead. What OpenBLAS buys is the
// machine's GEMM peak (`tapegrad bench --workload sgemm`, bench/RESULTS.md), against one multiply-
// add a cycle or less for the loop.
#include <cblas.h>

#include <algorithm>
#include <vector>

#include "tapegrad/autograd/textbook.h"
#include "tapegrad/cpu/kernels.h"
#include "tapegrad/cpu/reference.h"
#include "tapegrad/runtime/threads.h"

namespace tg::cpu {

namespace {

// A product of at most kGemvRows rows of C runs as that many matrix-vector products. OpenBLAS's
// GEMM packs all of op(B) on every call, which a row or two of A cannot pay back: one row of
// [1, 128] x [128, 512] took 23 us as a GEMM and 4.8 us as a GEMV (one Zen 3 thread), and a
// decoded token's projections, MLP and head are such rows. At 4 rows the GEMM catches up (its
// register tile holds 4 rows), and from 6 on it is ahead.
constexpr int64_t kGemvRows = 3;

void blas_gemv(bool transpose, int64_t rows, int64_t cols, float alpha, const float* a,
               int64_t lda, const float* x, int64_t incx, float beta, float* y) {
  cblas_sgemv(CblasRowMajor, transpose ? CblasTrans : CblasNoTrans, rows, cols, alpha, a, lda, x,
              incx, beta, y, 1);
}

void blas_gemv(bool transpose, int64_t rows, int64_t cols, double alpha, const double* a,
               int64_t lda, const double* x, int64_t incx, double beta, double* y) {
  cblas_dgemv(CblasRowMajor, transpose ? CblasTrans : CblasNoTrans, rows, cols, alpha, a, lda, x,
              incx, beta, y, 1);
}

// C = alpha op(A) op(B) + beta C a row at a time: C's row r is alpha op(B)^T a_r + beta c_r, where
// a_r is row r of op(A) (a column of A, lda apart, when A is transposed) and op(B)^T is B as
// stored when B is transposed, else B^T. With beta 0 the row is zeroed first, so that whatever C
// held (NaN too) is overwritten, as the GEMM overwrites it.
template <typename T>
void gemm_by_rows(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, T alpha,
                  const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  const int64_t a_step = transpose_a ? lda : 1;  // between one row's entries of op(A)
  for (int64_t r = 0; r < m; ++r) {
    const T* a_row = transpose_a ? a + r : a + r * lda;
    T* c_row = c + r * ldc;
    if (beta == T(0)) std::fill_n(c_row, n, T(0));
    if (transpose_b) blas_gemv(false, n, k, alpha, b, ldb, a_row, a_step, beta, c_row);
    else blas_gemv(true, k, n, alpha, b, ldb, a_row, a_step, beta, c_row);
  }
}

}  // namespace

// The only calls into BLAS on the CPU: every GEMM (batched ops, attention tiles, half precision)
// comes here, on one BLAS thread (runtime/threads.h).
void blas_gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
               const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
               int64_t ldc) {
  pin_blas_to_one_thread();
  if (m <= kGemvRows && n > 0 && k > 0) {
    return gemm_by_rows(transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  cblas_sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans,
              transpose_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void blas_gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, double alpha,
               const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
               int64_t ldc) {
  pin_blas_to_one_thread();
  if (m <= kGemvRows && n > 0 && k > 0) {
    return gemm_by_rows(transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  cblas_dgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans,
              transpose_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

namespace {

// One pool (runtime/threads.h): parallel_for splits the work and each piece is one single-threaded
// BLAS call. The pieces are the batch items, or, for fewer items than threads, each item's C cut
// into `threads` blocks of rows (columns when C is wide), in multiples of 16 (whole register
// tiles). Products of at most kParallelFlops in all, one thread, or a call from inside a parallel
// loop: one piece an item, on the calling thread.
template <typename T>
void gemm_batch(const GemmBatch& g) {
  const auto* a = static_cast<const T*>(g.a);
  const auto* b = static_cast<const T*>(g.b);
  auto* c = static_cast<T*>(g.c);
  const int64_t items = static_cast<int64_t>(g.a_offsets.size());
  const int threads = num_threads();
  const double flops = 2.0 * static_cast<double>(g.m) * g.n * g.k * items;
  const bool parallel = threads > 1 && flops > kParallelFlops && !in_parallel_region();
  const int64_t blocks = parallel && items < threads ? threads : 1;  // pieces an item
  const bool by_rows = g.m >= g.n;
  const int64_t extent = by_rows ? g.m : g.n;
  const int64_t block = blocks == 1 ? extent : ((extent + blocks - 1) / blocks + 15) / 16 * 16;
  const auto piece = [&](int64_t work) {  // block work % blocks of item work / blocks
    const int64_t i = work / blocks, start = (work % blocks) * block;
    const int64_t size = std::min(block, extent - start);
    if (size <= 0) return;
    const T* item_a = a + g.a_offsets[i];
    const T* item_b = b + g.b_offsets[i];
    T* item_c = c + g.c_offsets[i];
    if (by_rows) {  // row r of op(A) starts at a + r * lda, or a + r when A is transposed
      blas_gemm(g.transpose_a, g.transpose_b, size, g.n, g.k, T(g.alpha),
                item_a + (g.transpose_a ? start : start * g.lda), g.lda, item_b, g.ldb, T(g.beta),
                item_c + start * g.ldc, g.ldc);
    } else {        // column j of op(B) starts at b + j, or b + j * ldb when B is transposed
      blas_gemm(g.transpose_a, g.transpose_b, g.m, size, g.k, T(g.alpha), item_a, g.lda,
                item_b + (g.transpose_b ? start * g.ldb : start), g.ldb, T(g.beta), item_c + start,
                g.ldc);
    }
  };
  parallel_for(items * blocks, parallel ? 1 : items * blocks, [&](int64_t first, int64_t past) {
    for (int64_t work = first; work < past; ++work) piece(work);
  });
}

}  // namespace

void CpuKernels::gemm(const GemmBatch& g) {
  // Under tg::Textbook (autograd/textbook.h), the triple loop that this kernel is tested against.
  if (textbook_mode() && !is_half(g.dtype)) return reference::gemm(g);
  if (g.dtype == DType::f32) return gemm_batch<float>(g);
  if (g.dtype == DType::f64) return gemm_batch<double>(g);
  if (is_half(g.dtype)) return gemm_half(g);
  fail("kernel 'gemm' on cpu: dtype ", dtype_name(g.dtype), " is not supported (f32, f64, f16, bf16)");
}

void CpuKernels::index_select_rows(const Tensor& table, const Tensor& index, const Tensor& out) {
  dispatch_floating(table.dtype(), "index_select_rows", [&](auto tag) {
    using T = decltype(tag);
    const int64_t width = table.size(1);
    const T* rows = table.data_as<T>();
    const int64_t* picked = index.data_as<int64_t>();
    T* result = out.data_as<T>();
    const int64_t count = index.numel();
    in_pieces(count, count * width * static_cast<int64_t>(sizeof(T)), [&](int64_t first, int64_t past) {
      for (int64_t r = first; r < past; ++r) std::copy_n(rows + picked[r] * width, width, result + r * width);
    });
  });
}

void CpuKernels::index_add_rows(const Tensor& src, const Tensor& index, const Tensor& table) {
  dispatch_floating(src.dtype(), "index_add_rows", [&](auto tag) {
    using T = decltype(tag);
    const int64_t width = table.size(1);
    const T* rows = src.data_as<T>();
    const int64_t* picked = index.data_as<int64_t>();
    T* result = table.data_as<T>();
    // Split by columns, not rows: two rows may add into the same table row (a repeated index),
    // while each column of the table belongs to one thread. Every entry adds its rows in order.
    const int64_t count = index.numel();
    in_pieces(width, count * width * static_cast<int64_t>(sizeof(T)), [&](int64_t first, int64_t past) {
      for (int64_t r = 0; r < count; ++r) {
        for (int64_t k = first; k < past; ++k) result[picked[r] * width + k] += rows[r * width + k];
      }
    });
  });
}

// ---- f16 / bf16 GEMM ---------------------------------------------------------------------------
// OpenBLAS 0.3.21 has no half GEMM, so the operands are converted to f32 and multiplied with
// the f32 GEMM: the products accumulate in f32 and each element of C is rounded once. op(A) and
// C go kHalfRowBlock rows at a time, so the f32 scratch stays small; B is converted once per
// item, and once in all when the items share it (a weight broadcast over a batch).
namespace {

constexpr int64_t kHalfRowBlock = 256;

// dst[r * cols + c] = src[r * ld + c] as f32, for a rows x cols block.
template <typename H>
void block_to_f32(const H* src, int64_t ld, int64_t rows, int64_t cols, float* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] = convert<float>(src[r * ld + c]);
  }
}

}  // namespace

void gemm_half(const GemmBatch& g) {
  dispatch_half(g.dtype, "gemm", [&](auto tag) {
    using H = decltype(tag);
    const auto* a = static_cast<const H*>(g.a);
    const auto* b = static_cast<const H*>(g.b);
    auto* c = static_cast<H*>(g.c);
    // op(B) is k x n, stored k x n or (transposed) n x k; it keeps its layout in f32.
    const int64_t b_rows = g.transpose_b ? g.n : g.k, b_cols = g.transpose_b ? g.k : g.n;
    const int64_t block = std::min(kHalfRowBlock, g.m);
    std::vector<float> b32(b_rows * b_cols), a32(block * g.k), c32(block * g.n);
    // The f32 product of one block, threaded like any other (gemm_batch).
    GemmBatch block32{.dtype = DType::f32, .transpose_a = g.transpose_a, .transpose_b = g.transpose_b,
                      .m = 0, .n = g.n, .k = g.k, .lda = 0, .ldb = b_cols, .ldc = g.n,
                      .alpha = g.alpha, .beta = g.beta, .a = a32.data(), .b = b32.data(),
                      .c = c32.data(), .a_offsets = {0}, .b_offsets = {0}, .c_offsets = {0}};
    int64_t converted_b = -1;
    for (size_t i = 0; i < g.a_offsets.size(); ++i) {
      if (g.b_offsets[i] != converted_b) {
        block_to_f32(b + g.b_offsets[i], g.ldb, b_rows, b_cols, b32.data());
        converted_b = g.b_offsets[i];
      }
      for (int64_t r0 = 0; r0 < g.m; r0 += block) {
        const int64_t rows = std::min(block, g.m - r0);
        // Rows r0 .. r0 + rows of op(A): rows of A, or a block of columns when A is transposed.
        const H* a_block = a + g.a_offsets[i] + (g.transpose_a ? r0 : r0 * g.lda);
        if (g.transpose_a) block_to_f32(a_block, g.lda, g.k, rows, a32.data());
        else block_to_f32(a_block, g.lda, rows, g.k, a32.data());
        H* c_block = c + g.c_offsets[i] + r0 * g.ldc;
        if (g.beta != 0) block_to_f32(c_block, g.ldc, rows, g.n, c32.data());
        block32.m = rows;
        block32.lda = g.transpose_a ? rows : g.k;
        if (textbook_mode()) reference::gemm(block32);  // the triple loop (autograd/textbook.h)
        else gemm_batch<float>(block32);
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t col = 0; col < g.n; ++col) c_block[r * g.ldc + col] = convert<H>(c32[r * g.n + col]);
        }
      }
    }
  });
}

}  // namespace tg::cpu
