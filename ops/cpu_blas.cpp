// CPU kernels on OpenBLAS: batched GEMM, and the row gather/scatter behind embeddings.
#include <cblas.h>

#include <algorithm>
#include <vector>

#include "ops/cpu_kernels.h"

namespace tg::cpu {

void CpuKernels::gemm(const GemmBatch& g) {
  const CBLAS_TRANSPOSE ta = g.transpose_a ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = g.transpose_b ? CblasTrans : CblasNoTrans;
  const int64_t items = static_cast<int64_t>(g.a_offsets.size());
  if (g.dtype == DType::f32) {
    const auto* a = static_cast<const float*>(g.a);
    const auto* b = static_cast<const float*>(g.b);
    auto* c = static_cast<float*>(g.c);
    for (int64_t i = 0; i < items; ++i) {
      cblas_sgemm(CblasRowMajor, ta, tb, g.m, g.n, g.k, static_cast<float>(g.alpha),
                  a + g.a_offsets[i], g.lda, b + g.b_offsets[i], g.ldb,
                  static_cast<float>(g.beta), c + g.c_offsets[i], g.ldc);
    }
  } else if (g.dtype == DType::f64) {
    const auto* a = static_cast<const double*>(g.a);
    const auto* b = static_cast<const double*>(g.b);
    auto* c = static_cast<double*>(g.c);
    for (int64_t i = 0; i < items; ++i) {
      cblas_dgemm(CblasRowMajor, ta, tb, g.m, g.n, g.k, g.alpha, a + g.a_offsets[i], g.lda,
                  b + g.b_offsets[i], g.ldb, g.beta, c + g.c_offsets[i], g.ldc);
    }
  } else if (is_half(g.dtype)) {
    gemm_half(g);
  } else {
    fail("kernel 'gemm' on cpu: dtype ", dtype_name(g.dtype), " is not supported (f32, f64, f16, bf16)");
  }
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
