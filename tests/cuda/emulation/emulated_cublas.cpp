// cuBLAS on OpenBLAS for the emulated CUDA device (TEST HARNESS, see emulated_cuda.h). Every entry
// point becomes a Gemm (one problem, shared by all items of a batch) and a list of items; each
// item is one cblas call, column-major like cuBLAS. 16-bit operands are widened to f32 first.
#include <cblas.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "tapegrad/autograd/dtype.h"
#include "emulated_cuda.h"

struct cublasContext {};  // all work is synchronous and on the host: a handle holds nothing

namespace {

constexpr int kCublasVersion = 130000;  // 13.0.0, encoded as cublasGetVersion does

// C (m x n) = alpha op(A) op(B) + beta C, column-major, for every item of a call.
struct Gemm {
  const char* entry_point;  // for messages
  cublasOperation_t transa, transb;
  int m, n, k, lda, ldb, ldc;
  cudaDataType a_type, b_type, c_type;
  cublasComputeType_t compute;
  const void* alpha;
  const void* beta;
};

struct Item {
  const void* a;
  const void* b;
  void* c;
};

struct Stored {  // how a matrix is stored: rows x cols, column-major, with a leading dimension
  int rows, cols;
};

Stored stored_a(const Gemm& g) { return g.transa == CUBLAS_OP_N ? Stored{g.m, g.k} : Stored{g.k, g.m}; }
Stored stored_b(const Gemm& g) { return g.transb == CUBLAS_OP_N ? Stored{g.k, g.n} : Stored{g.n, g.k}; }

size_t element_bytes(cudaDataType type) {
  return type == CUDA_R_64F ? sizeof(double) : type == CUDA_R_32F ? sizeof(float) : sizeof(uint16_t);
}

size_t span_bytes(Stored matrix, int ld, cudaDataType type) {
  if (matrix.rows == 0 || matrix.cols == 0) return 0;
  return (static_cast<size_t>(ld) * (matrix.cols - 1) + matrix.rows) * element_bytes(type);
}

bool valid_operation(cublasOperation_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; }

// cuBLAS's argument checks, then its table of supported type combinations.
cublasStatus_t TG_CHECK(const Gemm& g) {
  if (!valid_operation(g.transa) || !valid_operation(g.transb) || g.m < 0 || g.n < 0 || g.k < 0 ||
      g.lda < std::max(1, stored_a(g).rows) || g.ldb < std::max(1, stored_b(g).rows) ||
      g.ldc < std::max(1, g.m) || g.alpha == nullptr || g.beta == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const bool all_same = g.a_type == g.b_type && g.b_type == g.c_type;
  const bool half_inputs = g.a_type == g.b_type && (g.a_type == CUDA_R_16F || g.a_type == CUDA_R_16BF);
  if (g.compute == CUBLAS_COMPUTE_64F && all_same && g.a_type == CUDA_R_64F) return CUBLAS_STATUS_SUCCESS;
  if ((g.compute == CUBLAS_COMPUTE_32F || g.compute == CUBLAS_COMPUTE_32F_FAST_TF32) &&
      ((all_same && g.a_type == CUDA_R_32F) || (half_inputs && (g.c_type == g.a_type || g.c_type == CUDA_R_32F)))) {
    return CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_NOT_SUPPORTED;
}

bool in_device_memory(const void* pointer, size_t bytes) {
  return bytes == 0 || emulation::detail::is_device_memory(pointer, bytes);
}

bool in_device_memory(const Gemm& g, const Item& item) {
  return in_device_memory(item.a, span_bytes(stored_a(g), g.lda, g.a_type)) &&
         in_device_memory(item.b, span_bytes(stored_b(g), g.ldb, g.b_type)) &&
         in_device_memory(item.c, span_bytes({g.m, g.n}, g.ldc, g.c_type));
}

// A 16-bit matrix as packed f32 (leading dimension = rows).
std::vector<float> widen(const void* matrix, cudaDataType type, Stored stored, int ld) {
  const auto* bits = static_cast<const uint16_t*>(matrix);
  std::vector<float> wide(static_cast<size_t>(stored.rows) * stored.cols);
  for (int col = 0; col < stored.cols; ++col) {
    for (int row = 0; row < stored.rows; ++row) {
      const uint16_t value = bits[static_cast<size_t>(col) * ld + row];
      wide[static_cast<size_t>(col) * stored.rows + row] =
          type == CUDA_R_16F ? tg::f16_to_f32(value) : tg::bf16_to_f32(value);
    }
  }
  return wide;
}

void narrow(const std::vector<float>& wide, cudaDataType type, int rows, int cols, void* matrix, int ld) {
  auto* bits = static_cast<uint16_t*>(matrix);
  for (int col = 0; col < cols; ++col) {
    for (int row = 0; row < rows; ++row) {
      const float value = wide[static_cast<size_t>(col) * rows + row];
      bits[static_cast<size_t>(col) * ld + row] = type == CUDA_R_16F ? tg::f32_to_f16(value) : tg::f32_to_bf16(value);
    }
  }
}

CBLAS_TRANSPOSE cblas_operation(cublasOperation_t op) { return op == CUBLAS_OP_N ? CblasNoTrans : CblasTrans; }

void multiply(const Gemm& g, const Item& item) {
  if (g.m == 0 || g.n == 0) return;
  const CBLAS_TRANSPOSE ta = cblas_operation(g.transa), tb = cblas_operation(g.transb);
  if (g.compute == CUBLAS_COMPUTE_64F) {
    cblas_dgemm(CblasColMajor, ta, tb, g.m, g.n, g.k, *static_cast<const double*>(g.alpha),
                static_cast<const double*>(item.a), g.lda, static_cast<const double*>(item.b), g.ldb,
                *static_cast<const double*>(g.beta), static_cast<double*>(item.c), g.ldc);
    return;
  }
  const float alpha = *static_cast<const float*>(g.alpha), beta = *static_cast<const float*>(g.beta);
  if (g.a_type == CUDA_R_32F) {
    cblas_sgemm(CblasColMajor, ta, tb, g.m, g.n, g.k, alpha, static_cast<const float*>(item.a), g.lda,
                static_cast<const float*>(item.b), g.ldb, beta, static_cast<float*>(item.c), g.ldc);
    return;
  }
  const Stored a = stored_a(g), b = stored_b(g);
  const std::vector<float> a32 = widen(item.a, g.a_type, a, g.lda), b32 = widen(item.b, g.b_type, b, g.ldb);
  const int a_ld = std::max(1, a.rows), b_ld = std::max(1, b.rows);
  if (g.c_type == CUDA_R_32F) {
    cblas_sgemm(CblasColMajor, ta, tb, g.m, g.n, g.k, alpha, a32.data(), a_ld, b32.data(), b_ld, beta,
                static_cast<float*>(item.c), g.ldc);
    return;
  }
  // beta == 0: C is write-only, as in cuBLAS (a NaN there must not leak into the result).
  std::vector<float> c32 = beta != 0 ? widen(item.c, g.c_type, {g.m, g.n}, g.ldc)
                                     : std::vector<float>(static_cast<size_t>(g.m) * g.n);
  cblas_sgemm(CblasColMajor, ta, tb, g.m, g.n, g.k, alpha, a32.data(), a_ld, b32.data(), b_ld, beta,
              c32.data(), g.m);
  narrow(c32, g.c_type, g.m, g.n, item.c, g.ldc);
}

// Checks everything, then multiplies each item; item_at(i) gives item i's matrices.
template <typename ItemAt>
cublasStatus_t run(cublasHandle_t handle, const Gemm& g, int batch, ItemAt item_at) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (const cublasStatus_t status = TG_CHECK(g); status != CUBLAS_STATUS_SUCCESS) return status;
  for (int i = 0; i < batch; ++i) {
    if (!in_device_memory(g, item_at(i))) {
      std::fprintf(stderr, "CUDA emulation: %s: A, B or C of item %d is not in device memory\n", g.entry_point, i);
      return CUBLAS_STATUS_EXECUTION_FAILED;
    }
  }
  for (int i = 0; i < batch; ++i) multiply(g, item_at(i));
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t strided(cublasHandle_t handle, const Gemm& g, const void* a, long long stride_a,
                       const void* b, long long stride_b, void* c, long long stride_c, int batch) {
  const auto offset = [](int i, long long stride, cudaDataType type) {
    return i * stride * static_cast<long long>(element_bytes(type));
  };
  return run(handle, g, batch, [&](int i) {
    return Item{static_cast<const char*>(a) + offset(i, stride_a, g.a_type),
                static_cast<const char*>(b) + offset(i, stride_b, g.b_type),
                static_cast<char*>(c) + offset(i, stride_c, g.c_type)};
  });
}

// The pointer arrays are read on the device by cuBLAS, so they must be device memory too.
template <typename A, typename B, typename C>
cublasStatus_t batched(cublasHandle_t handle, const Gemm& g, const A* const a[], const B* const b[],
                       C* const c[], int batch) {
  const size_t array_bytes = sizeof(void*) * static_cast<size_t>(std::max(batch, 0));
  if (!in_device_memory(a, array_bytes) || !in_device_memory(b, array_bytes) || !in_device_memory(c, array_bytes)) {
    std::fprintf(stderr, "CUDA emulation: %s: the arrays of pointers are not in device memory\n", g.entry_point);
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  return run(handle, g, batch, [&](int i) { return Item{a[i], b[i], c[i]}; });
}

}  // namespace

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t) {
  return handle == nullptr ? CUBLAS_STATUS_NOT_INITIALIZED : CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetVersion(cublasHandle_t handle, int* version) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (version == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *version = kCublasVersion;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  return mode == CUBLAS_DEFAULT_MATH || mode == CUBLAS_TF32_TENSOR_OP_MATH ? CUBLAS_STATUS_SUCCESS
                                                                           : CUBLAS_STATUS_INVALID_VALUE;
}

const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "the operation completed successfully";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid value was used as an argument";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
  }
  return "unknown error";
}

cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                           int m, int n, int k, const float* alpha, const float* A, int lda,
                           const float* B, int ldb, const float* beta, float* C, int ldc) {
  const Gemm g{"cublasSgemm", transa, transb, m, n, k, lda, ldb, ldc, CUDA_R_32F, CUDA_R_32F,
               CUDA_R_32F, CUBLAS_COMPUTE_32F, alpha, beta};
  return strided(handle, g, A, 0, B, 0, C, 0, 1);
}

cublasStatus_t cublasDgemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                           int m, int n, int k, const double* alpha, const double* A, int lda,
                           const double* B, int ldb, const double* beta, double* C, int ldc) {
  const Gemm g{"cublasDgemm", transa, transb, m, n, k, lda, ldb, ldc, CUDA_R_64F, CUDA_R_64F,
               CUDA_R_64F, CUBLAS_COMPUTE_64F, alpha, beta};
  return strided(handle, g, A, 0, B, 0, C, 0, 1);
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k,
                                         const float* alpha, const float* A, int lda,
                                         long long strideA, const float* B, int ldb,
                                         long long strideB, const float* beta, float* C, int ldc,
                                         long long strideC, int batchCount) {
  const Gemm g{"cublasSgemmStridedBatched", transa, transb, m, n, k, lda, ldb, ldc, CUDA_R_32F,
               CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, alpha, beta};
  return strided(handle, g, A, strideA, B, strideB, C, strideC, batchCount);
}

cublasStatus_t cublasDgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k,
                                         const double* alpha, const double* A, int lda,
                                         long long strideA, const double* B, int ldb,
                                         long long strideB, const double* beta, double* C, int ldc,
                                         long long strideC, int batchCount) {
  const Gemm g{"cublasDgemmStridedBatched", transa, transb, m, n, k, lda, ldb, ldc, CUDA_R_64F,
               CUDA_R_64F, CUDA_R_64F, CUBLAS_COMPUTE_64F, alpha, beta};
  return strided(handle, g, A, strideA, B, strideB, C, strideC, batchCount);
}

cublasStatus_t cublasSgemmBatched(cublasHandle_t handle, cublasOperation_t transa,
                                  cublasOperation_t transb, int m, int n, int k, const float* alpha,
                                  const float* const Aarray[], int lda, const float* const Barray[],
                                  int ldb, const float* beta, float* const Carray[], int ldc,
                                  int batchCount) {
  const Gemm g{"cublasSgemmBatched", transa, transb, m, n, k, lda, ldb, ldc, CUDA_R_32F, CUDA_R_32F,
               CUDA_R_32F, CUBLAS_COMPUTE_32F, alpha, beta};
  return batched(handle, g, Aarray, Barray, Carray, batchCount);
}

cublasStatus_t cublasDgemmBatched(cublasHandle_t handle, cublasOperation_t transa,
                                  cublasOperation_t transb, int m, int n, int k, const double* alpha,
                                  const double* const Aarray[], int lda, const double* const Barray[],
                                  int ldb, const double* beta, double* const Carray[], int ldc,
                                  int batchCount) {
  const Gemm g{"cublasDgemmBatched", transa, transb, m, n, k, lda, ldb, ldc, CUDA_R_64F, CUDA_R_64F,
               CUDA_R_64F, CUBLAS_COMPUTE_64F, alpha, beta};
  return batched(handle, g, Aarray, Barray, Carray, batchCount);
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                            int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
                            int lda, const void* B, cudaDataType Btype, int ldb, const void* beta,
                            void* C, cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                            cublasGemmAlgo_t) {
  const Gemm g{"cublasGemmEx", transa, transb, m, n, k, lda, ldb, ldc, Atype, Btype, Ctype,
               computeType, alpha, beta};
  return strided(handle, g, A, 0, B, 0, C, 0, 1);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                          cublasOperation_t transb, int m, int n, int k,
                                          const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long strideA, const void* B,
                                          cudaDataType Btype, int ldb, long long strideB,
                                          const void* beta, void* C, cudaDataType Ctype, int ldc,
                                          long long strideC, int batchCount,
                                          cublasComputeType_t computeType, cublasGemmAlgo_t) {
  const Gemm g{"cublasGemmStridedBatchedEx", transa, transb, m, n, k, lda, ldb, ldc, Atype, Btype,
               Ctype, computeType, alpha, beta};
  return strided(handle, g, A, strideA, B, strideB, C, strideC, batchCount);
}

cublasStatus_t cublasGemmBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                   cublasOperation_t transb, int m, int n, int k, const void* alpha,
                                   const void* const Aarray[], cudaDataType Atype, int lda,
                                   const void* const Barray[], cudaDataType Btype, int ldb,
                                   const void* beta, void* const Carray[], cudaDataType Ctype,
                                   int ldc, int batchCount, cublasComputeType_t computeType,
                                   cublasGemmAlgo_t) {
  const Gemm g{"cublasGemmBatchedEx", transa, transb, m, n, k, lda, ldb, ldc, Atype, Btype, Ctype,
               computeType, alpha, beta};
  return batched(handle, g, Aarray, Barray, Carray, batchCount);
}
