// CPU kernels on OpenBLAS: batched GEMM, and the row gather/scatter behind embeddings.
#include <cblas.h>

#include <algorithm>

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
  } else {
    fail("kernel 'gemm' on cpu: dtype ", dtype_name(g.dtype), " is not supported (f32, f64)");
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

}  // namespace tg::cpu
