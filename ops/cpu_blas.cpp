// CPU kernels on OpenBLAS: batched GEMM (threaded by OpenMP, see gemm_batch), and the row
// gather/scatter behind embeddings.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <vector>

#include "tapegrad/autograd/threads.h"
#include "tapegrad/ops/cpu_kernels.h"

extern "C" void openblas_set_num_threads(int);

namespace tg::cpu {

namespace {

void gemm_one(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k, double alpha,
              const float* a, int64_t lda, const float* b, int64_t ldb, double beta, float* c,
              int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, static_cast<float>(alpha), a, lda, b, ldb,
              static_cast<float>(beta), c, ldc);
}

void gemm_one(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k, double alpha,
              const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
              int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// Below this many FLOPs a product runs on the calling thread: forking costs more than it saves.
constexpr double kParallelFlops = 1 << 21;

// Threads. OpenBLAS (the pthreads build) has its own pool, and libgomp's idle workers keep
// spinning for a while after each OpenMP region (its default wait policy). A GEMM on OpenBLAS's
// pool right after an elementwise or attention region on OpenMP's puts three busy threads on two
// cores: a training step measured 5x slower at 2 threads than at 1. So there is one pool:
// OpenBLAS runs single-threaded here, and OpenMP splits the work, over the batch items, or for
// fewer items than threads over blocks of rows of C (columns when C is wide), one call a block.
template <typename T>
void gemm_batch(const GemmBatch& g) {
  const CBLAS_TRANSPOSE ta = g.transpose_a ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = g.transpose_b ? CblasTrans : CblasNoTrans;
  const auto* a = static_cast<const T*>(g.a);
  const auto* b = static_cast<const T*>(g.b);
  auto* c = static_cast<T*>(g.c);
  const int64_t items = static_cast<int64_t>(g.a_offsets.size());
  const int threads = num_threads();
  const double flops = 2.0 * static_cast<double>(g.m) * g.n * g.k * items;
  if (threads <= 1 || flops < kParallelFlops || omp_in_parallel()) {
    for (int64_t i = 0; i < items; ++i) {
      gemm_one(ta, tb, g.m, g.n, g.k, g.alpha, a + g.a_offsets[i], g.lda, b + g.b_offsets[i],
               g.ldb, g.beta, c + g.c_offsets[i], g.ldc);
    }
    return;
  }
  openblas_set_num_threads(1);
  if (items >= threads) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < items; ++i) {
      gemm_one(ta, tb, g.m, g.n, g.k, g.alpha, a + g.a_offsets[i], g.lda, b + g.b_offsets[i],
               g.ldb, g.beta, c + g.c_offsets[i], g.ldc);
    }
  } else {
    // Blocks of rows of C = rows of op(A), or of columns of C = columns of op(B), in multiples
    // of 16 (whole register tiles).
    const bool by_rows = g.m >= g.n;
    const int64_t extent = by_rows ? g.m : g.n;
    const int64_t blocks = items * threads;
    const int64_t block = ((extent + threads - 1) / threads + 15) / 16 * 16;
#pragma omp parallel for schedule(static)
    for (int64_t work = 0; work < blocks; ++work) {
      const int64_t i = work / threads, start = (work % threads) * block;
      const int64_t size = std::min(block, extent - start);
      if (size <= 0) continue;
      const T* item_a = a + g.a_offsets[i];
      const T* item_b = b + g.b_offsets[i];
      T* item_c = c + g.c_offsets[i];
      if (by_rows) {  // row r of op(A) starts at a + r * lda, or a + r when A is transposed
        gemm_one(ta, tb, size, g.n, g.k, g.alpha, item_a + (g.transpose_a ? start : start * g.lda),
                 g.lda, item_b, g.ldb, g.beta, item_c + start * g.ldc, g.ldc);
      } else {        // column j of op(B) starts at b + j, or b + j * ldb when B is transposed
        gemm_one(ta, tb, g.m, size, g.k, g.alpha, item_a, g.lda,
                 item_b + (g.transpose_b ? start * g.ldb : start), g.ldb, g.beta, item_c + start, g.ldc);
      }
    }
  }
  openblas_set_num_threads(threads);
}

}  // namespace

void CpuKernels::gemm(const GemmBatch& g) {
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
    for (int64_t r = 0; r < index.numel(); ++r) {
      std::copy_n(rows + picked[r] * width, width, result + r * width);
    }
  });
}

void CpuKernels::index_add_rows(const Tensor& src, const Tensor& index, const Tensor& table) {
  dispatch_floating(src.dtype(), "index_add_rows", [&](auto tag) {
    using T = decltype(tag);
    const int64_t width = table.size(1);
    const T* rows = src.data_as<T>();
    const int64_t* picked = index.data_as<int64_t>();
    T* result = table.data_as<T>();
    for (int64_t r = 0; r < index.numel(); ++r) {
      for (int64_t k = 0; k < width; ++k) result[picked[r] * width + k] += rows[r * width + k];
    }
  });
}

// ---- f16 / bf16 GEMM ---------------------------------------------------------------------------
// OpenBLAS 0.3.21 has no half GEMM, so the operands are converted to f32 and multiplied with
// sgemm: the products accumulate in f32 and each element of C is rounded once. op(A) and C go
// kHalfRowBlock rows at a time, so the f32 scratch stays small; B is converted once per item, and
// once in all when the items share it (a weight broadcast over a batch).
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
    const CBLAS_TRANSPOSE ta = g.transpose_a ? CblasTrans : CblasNoTrans;
    const CBLAS_TRANSPOSE tb = g.transpose_b ? CblasTrans : CblasNoTrans;
    // op(B) is k x n, stored k x n or (transposed) n x k; it keeps its layout in f32.
    const int64_t b_rows = g.transpose_b ? g.n : g.k, b_cols = g.transpose_b ? g.k : g.n;
    const int64_t block = std::min(kHalfRowBlock, g.m);
    std::vector<float> b32(b_rows * b_cols), a32(block * g.k), c32(block * g.n);
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
        cblas_sgemm(CblasRowMajor, ta, tb, rows, g.n, g.k, static_cast<float>(g.alpha), a32.data(),
                    g.transpose_a ? rows : g.k, b32.data(), b_cols, static_cast<float>(g.beta),
                    c32.data(), g.n);
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t col = 0; col < g.n; ++col) c_block[r * g.ldc + col] = convert<H>(c32[r * g.n + col]);
        }
      }
    }
  });
}

}  // namespace tg::cpu
