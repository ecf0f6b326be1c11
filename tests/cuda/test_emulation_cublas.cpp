// Tests of the emulated CUDA device's cuBLAS (tests/cuda/emulation/emulated_cublas.cpp) against
// GEMM by its definition, column-major. Entries are small integers, so every product is exact
// and results compare equal.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tapegrad/autograd/dtype.h"
#include "device_array.h"

namespace {

// C = alpha op(A) op(B) + beta C (beta == 0: C is not read), column-major.
template <typename T>
void reference_gemm(bool transa, bool transb, int m, int n, int k, T alpha, const T* a, int lda,
                    const T* b, int ldb, T beta, T* c, int ldc) {
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < m; ++i) {
      T sum = 0;
      for (int p = 0; p < k; ++p) sum += (transa ? a[i * lda + p] : a[p * lda + i]) * (transb ? b[p * ldb + j] : b[j * ldb + p]);
      c[j * ldc + i] = alpha * sum + (beta == T{0} ? T{0} : beta * c[j * ldc + i]);
    }
  }
}

template <typename T>
std::vector<T> small_integers(size_t count, unsigned seed) {
  std::mt19937 random(seed);
  std::vector<T> values(count);
  for (T& value : values) value = static_cast<T>(static_cast<int>(random() % 7) - 3);
  return values;
}

struct Handle {
  cublasHandle_t handle = nullptr;
  Handle() { REQUIRE(cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS); }
  ~Handle() { cublasDestroy(handle); }
};

cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float* alpha,
                    const float* a, int lda, const float* b, int ldb, const float* beta, float* c, int ldc) {
  return cublasSgemm(h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const double* alpha,
                    const double* a, int lda, const double* b, int ldb, const double* beta, double* c, int ldc) {
  return cublasDgemm(h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// op(A) is 5 x 3, op(B) 3 x 7; leading dimensions are padded by 2 to catch mixed-up strides.
template <typename T>
void check_all_transposes() {
  const Handle h;
  const int m = 5, n = 7, k = 3;
  const T alpha = 1.5, beta = -0.5;
  for (const bool transa : {false, true}) {
    for (const bool transb : {false, true}) {
      const int lda = (transa ? k : m) + 2, ldb = (transb ? n : k) + 2, ldc = m + 2;
      const std::vector<T> a = small_integers<T>(lda * (transa ? m : k), 1), b = small_integers<T>(ldb * (transb ? k : n), 2);
      std::vector<T> c = small_integers<T>(ldc * n, 3);
      const DeviceArray<T> device_a(a), device_b(b);
      DeviceArray<T> device_c(c);
      REQUIRE(gemm(h.handle, transa ? CUBLAS_OP_T : CUBLAS_OP_N, transb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha,
                   device_a.get(), lda, device_b.get(), ldb, &beta, device_c.get(), ldc) == CUBLAS_STATUS_SUCCESS);
      reference_gemm(transa, transb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
      INFO("transa " << transa << ", transb " << transb);
      CHECK(device_c.to_host() == c);
    }
  }
}

TEST_CASE("emulation: cublas sgemm and dgemm, all transpose combinations", "[cuda][emulation]") {
  check_all_transposes<float>();
  check_all_transposes<double>();
}

TEST_CASE("emulation: cublas strided batched and pointer-array batched gemm", "[cuda][emulation]") {
  const Handle h;
  const int m = 4, n = 3, k = 5, batch = 3;
  const long long stride_a = m * k + 1, stride_b = k * n, stride_c = m * n + 4;  // gaps between items
  const std::vector<double> a = small_integers<double>(stride_a * batch, 4), b = small_integers<double>(stride_b * batch, 5);
  const std::vector<double> c = small_integers<double>(stride_c * batch, 6);
  std::vector<double> expected = c;
  for (int i = 0; i < batch; ++i) {  // A transposed (stored k x m), B not
    reference_gemm(true, false, m, n, k, 2.0, a.data() + i * stride_a, k, b.data() + i * stride_b, k, 1.0,
                   expected.data() + i * stride_c, m);
  }
  const double alpha = 2.0, beta = 1.0;
  const DeviceArray<double> device_a(a), device_b(b);
  DeviceArray<double> strided_c(c);
  REQUIRE(cublasDgemmStridedBatched(h.handle, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, device_a.get(), k, stride_a,
                                    device_b.get(), k, stride_b, &beta, strided_c.get(), m, stride_c,
                                    batch) == CUBLAS_STATUS_SUCCESS);
  CHECK(strided_c.to_host() == expected);

  DeviceArray<double> batched_c(c);
  std::vector<const double*> a_items, b_items;
  std::vector<double*> c_items;
  for (int i = 0; i < batch; ++i) {
    a_items.push_back(device_a.get() + i * stride_a);
    b_items.push_back(device_b.get() + i * stride_b);
    c_items.push_back(batched_c.get() + i * stride_c);
  }
  const DeviceArray<const double*> a_array(a_items), b_array(b_items);
  const DeviceArray<double*> c_array(c_items);
  REQUIRE(cublasDgemmBatched(h.handle, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, a_array.get(), k, b_array.get(), k,
                             &beta, c_array.get(), m, batch) == CUBLAS_STATUS_SUCCESS);
  CHECK(batched_c.to_host() == expected);
  // The arrays of pointers must be device memory, as cuBLAS reads them on the GPU.
  CHECK(cublasDgemmBatched(h.handle, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, a_items.data(), k, b_array.get(), k,
                           &beta, c_array.get(), m, batch) == CUBLAS_STATUS_EXECUTION_FAILED);

  // The f32 versions, through the Ex entry points.
  const std::vector<float> a32(a.begin(), a.end()), b32(b.begin(), b.end()), c32(c.begin(), c.end());
  const DeviceArray<float> device_a32(a32), device_b32(b32);
  DeviceArray<float> device_c32(c32);
  const float alpha32 = 2.0f, beta32 = 1.0f;
  REQUIRE(cublasGemmStridedBatchedEx(h.handle, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha32, device_a32.get(),
                                     CUDA_R_32F, k, stride_a, device_b32.get(), CUDA_R_32F, k, stride_b, &beta32,
                                     device_c32.get(), CUDA_R_32F, m, stride_c, batch, CUBLAS_COMPUTE_32F_FAST_TF32,
                                     CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
  CHECK(device_c32.to_host() == std::vector<float>(expected.begin(), expected.end()));
}

// 16-bit A and B: products and sums in f32 (exact here), C rounded once, or kept in f32.
void check_half_gemm(cudaDataType type, uint16_t (*narrow)(float), float (*widen)(uint16_t)) {
  const Handle h;
  const int m = 6, n = 5, k = 4;
  const std::vector<float> a = small_integers<float>(m * k, 7), b = small_integers<float>(n * k, 8);
  const std::vector<float> c = small_integers<float>(m * n, 9);
  std::vector<uint16_t> a16, b16, c16;
  for (float value : a) a16.push_back(narrow(value));
  for (float value : b) b16.push_back(narrow(value));
  for (float value : c) c16.push_back(narrow(value));
  std::vector<float> expected = c;  // B transposed: stored n x k
  reference_gemm(false, true, m, n, k, 0.5f, a.data(), m, b.data(), n, 3.0f, expected.data(), m);
  const float alpha = 0.5f, beta = 3.0f;
  const DeviceArray<uint16_t> device_a(a16), device_b(b16);
  DeviceArray<uint16_t> device_c(c16);
  REQUIRE(cublasGemmEx(h.handle, CUBLAS_OP_N, CUBLAS_OP_T, m, n, k, &alpha, device_a.get(), type, m, device_b.get(),
                       type, n, &beta, device_c.get(), type, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
  std::vector<float> result;
  for (uint16_t bits : device_c.to_host()) result.push_back(widen(bits));
  CHECK(result == expected);

  // f32 C, and beta == 0 leaves a NaN in C unread.
  DeviceArray<float> c32(m * n, NAN);
  const float zero = 0.0f;
  reference_gemm(false, true, m, n, k, 0.5f, a.data(), m, b.data(), n, 0.0f, expected.data(), m);
  REQUIRE(cublasGemmEx(h.handle, CUBLAS_OP_N, CUBLAS_OP_T, m, n, k, &alpha, device_a.get(), type, m, device_b.get(),
                       type, n, &zero, c32.get(), CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
  CHECK(c32.to_host() == expected);

  // Batched with pointer arrays: one item, same result, rounded to 16 bits.
  DeviceArray<uint16_t> batched_c(m * n, narrow(NAN));
  const DeviceArray<const void*> a_array(std::vector<const void*>{device_a.get()}), b_array(std::vector<const void*>{device_b.get()});
  const DeviceArray<void*> c_array(std::vector<void*>{batched_c.get()});
  REQUIRE(cublasGemmBatchedEx(h.handle, CUBLAS_OP_N, CUBLAS_OP_T, m, n, k, &alpha, a_array.get(), type, m, b_array.get(),
                              type, n, &zero, c_array.get(), type, m, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
  result.clear();
  for (uint16_t bits : batched_c.to_host()) result.push_back(widen(bits));
  CHECK(result == expected);
}

TEST_CASE("emulation: cublas GemmEx with f16 and bf16 inputs", "[cuda][emulation]") {
  check_half_gemm(CUDA_R_16F, tg::f32_to_f16, tg::f16_to_f32);
  check_half_gemm(CUDA_R_16BF, tg::f32_to_bf16, tg::bf16_to_f32);
}

TEST_CASE("emulation: cublas argument checks and edge cases", "[cuda][emulation]") {
  const Handle h;
  const DeviceArray<float> a(12, 1.0f), b(12, 1.0f);
  DeviceArray<float> c(16, 2.0f);
  const float alpha = 1.0f, beta = 0.5f;
  // lda smaller than the rows of A
  CHECK(cublasSgemm(h.handle, CUBLAS_OP_N, CUBLAS_OP_N, 4, 3, 3, &alpha, a.get(), 3, b.get(), 3, &beta, c.get(), 4) ==
        CUBLAS_STATUS_INVALID_VALUE);
  CHECK(cublasSgemm(h.handle, CUBLAS_OP_N, CUBLAS_OP_N, -1, 3, 3, &alpha, a.get(), 4, b.get(), 3, &beta, c.get(), 4) ==
        CUBLAS_STATUS_INVALID_VALUE);
  CHECK(cublasGemmEx(h.handle, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &alpha, a.get(), CUDA_R_16F, 2, b.get(), CUDA_R_16BF,
                     2, &beta, c.get(), CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_NOT_SUPPORTED);
  CHECK(cublasGemmEx(h.handle, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &alpha, a.get(), CUDA_R_32F, 2, b.get(), CUDA_R_32F,
                     2, &beta, c.get(), CUDA_R_32F, 2, CUBLAS_COMPUTE_64F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_NOT_SUPPORTED);
  std::vector<float> host_a(12, 1.0f);
  CHECK(cublasSgemm(h.handle, CUBLAS_OP_N, CUBLAS_OP_N, 4, 3, 3, &alpha, host_a.data(), 4, b.get(), 3, &beta, c.get(),
                    4) == CUBLAS_STATUS_EXECUTION_FAILED);
  CHECK(c.to_host() == std::vector<float>(16, 2.0f));  // no failed call wrote C

  // k == 0: C = beta C. beta == 0 with a NaN in C: C = alpha A B, the NaN never read.
  REQUIRE(cublasSgemm(h.handle, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 0, &alpha, a.get(), 4, b.get(), 1, &beta, c.get(), 4) ==
          CUBLAS_STATUS_SUCCESS);
  CHECK(c.to_host() == std::vector<float>(16, 1.0f));
  DeviceArray<float> nan_c(16, NAN);
  const float zero = 0.0f;
  REQUIRE(cublasSgemm(h.handle, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 3, &alpha, a.get(), 4, b.get(), 3, &zero, nan_c.get(),
                      4) == CUBLAS_STATUS_SUCCESS);
  CHECK(nan_c.to_host() == std::vector<float>(16, 3.0f));

  int version = 0;
  CHECK(cublasGetVersion(h.handle, &version) == CUBLAS_STATUS_SUCCESS);
  CHECK(version > 0);
  CHECK(cublasSetMathMode(h.handle, CUBLAS_TF32_TENSOR_OP_MATH) == CUBLAS_STATUS_SUCCESS);
  CHECK(cublasSetStream(h.handle, nullptr) == CUBLAS_STATUS_SUCCESS);
  CHECK(std::string(cublasGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED)) == "CUBLAS_STATUS_NOT_SUPPORTED");
}

}  // namespace
