// CUDA kernels on cuBLAS: batched GEMM, and the row gather/scatter behind embeddings.
// The CPU twins are in cpu/fast/blas.cpp.
//
// Row-major GEMM on a column-major library. GemmBatch is row-major: C (m x n) = alpha op(A) op(B)
// + beta C, with row r of C at c + r * ldc. cuBLAS is column-major, and a row-major matrix with
// leading dimension ld is, byte for byte, the column-major matrix of its transpose with the same
// ld. So we ask cuBLAS for C^T (n x m, column-major, ldc) = op(B)^T op(A)^T: the operands swap
// places (B first, then A), m and n swap, and each keeps its own transpose flag, because the
// column-major view of B's memory is already B^T. Nothing is copied or transposed in memory.
//
// The batch runs as one cuBLAS call:
//   - one item: a plain gemm;
//   - uniform offsets (item i at offset[0] + i * stride, for each of A, B and C; a stride of 0
//     shares one matrix, e.g. a weight broadcast over a batch): a strided-batched gemm;
//   - anything else: a batched gemm over arrays of device pointers, copied to the device first.
// f16 and bf16 go through the *Ex entry points: inputs and C in 16 bits, products accumulated in
// f32 (CUBLAS_COMPUTE_32F, f32 alpha and beta), each element of C rounded once, as on the CPU.
// f32 may use TF32 tensor cores only when tg::math_modes().allow_tf32 is on.
#include <climits>
#include <cstdint>
#include <mutex>
#include <vector>

#include "tapegrad/cuda/device_types.h"
#include "tapegrad/cuda/kernels.h"

namespace tg::cuda {
namespace {

constexpr unsigned kThreads = 256;

// ---- cuBLAS handles ---------------------------------------------------------------------------

// The device's cuBLAS handle, created on first use (the device must be current). Handles live as
// long as the process: destroying them at exit could run after the CUDA runtime has shut down.
cublasHandle_t cublas_handle(int device_index) {
  TG_CHECK(device_index >= 0 && device_index < kMaxCudaDevices, "gemm: no device cuda:", device_index);
  static std::mutex mutex;
  static cublasHandle_t handles[kMaxCudaDevices] = {};
  std::lock_guard lock(mutex);
  if (handles[device_index] == nullptr) {
    check_cublas(cublasCreate(&handles[device_index]), "cublasCreate");
  }
  return handles[device_index];
}

// ---- The batch's shape in cuBLAS's terms ------------------------------------------------------

// One GEMM as cuBLAS sees it (after the swap described at the top): C^T = op(B)^T op(A)^T.
struct ColumnMajorGemm {
  cublasOperation_t op_first, op_second;  // for B (first operand) and A (second)
  int rows, cols, depth;                  // n, m, k
  int ld_first, ld_second, ldc;           // ldb, lda, ldc
};

int as_int(int64_t value, const char* what) {
  TG_CHECK(value >= 0 && value <= INT_MAX, "kernel 'gemm' on cuda: ", what, " = ", value,
           " does not fit cuBLAS's int");
  return static_cast<int>(value);
}

ColumnMajorGemm column_major(const GemmBatch& g) {
  ColumnMajorGemm s;
  s.op_first = g.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  s.op_second = g.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  s.rows = as_int(g.n, "n");
  s.cols = as_int(g.m, "m");
  s.depth = as_int(g.k, "k");
  s.ld_first = as_int(g.ldb, "ldb");
  s.ld_second = as_int(g.lda, "lda");
  s.ldc = as_int(g.ldc, "ldc");
  return s;
}

// The common stride of offsets (offset[i] = offset[0] + i * stride), or -1 when there is none.
int64_t uniform_stride(const std::vector<int64_t>& offsets) {
  if (offsets.size() < 2) return 0;
  const int64_t stride = offsets[1] - offsets[0];
  if (stride < 0) return -1;
  for (size_t i = 2; i < offsets.size(); ++i) {
    if (offsets[i] - offsets[i - 1] != stride) return -1;
  }
  return stride;
}

// How cuBLAS stores and computes each dtype.
struct CublasTypes {
  cudaDataType data;                 // for the *Ex calls
  cublasComputeType_t compute;
};

CublasTypes cublas_types(DType dtype) {
  switch (dtype) {
    case DType::f16: return {CUDA_R_16F, CUBLAS_COMPUTE_32F};
    case DType::bf16: return {CUDA_R_16BF, CUBLAS_COMPUTE_32F};
    case DType::f64: return {CUDA_R_64F, CUBLAS_COMPUTE_64F};
    default: return {CUDA_R_32F, CUBLAS_COMPUTE_32F};
  }
}

// ---- The three kinds of call, for element type T (float, double, or Half/BFloat16 via *Ex) ----

// alpha and beta as cuBLAS wants them: in T for f32/f64, in f32 for the half types.
template <typename T>
using scalar_t = compute_t<T>;

template <typename T>
void gemm_single(cublasHandle_t handle, const ColumnMajorGemm& s, DType dtype, scalar_t<T> alpha,
                 const T* a, const T* b, scalar_t<T> beta, T* c) {
  if constexpr (std::is_same_v<T, float>) {
    check_cublas(cublasSgemm(handle, s.op_first, s.op_second, s.rows, s.cols, s.depth, &alpha, b,
                             s.ld_first, a, s.ld_second, &beta, c, s.ldc), "cublasSgemm");
  } else if constexpr (std::is_same_v<T, double>) {
    check_cublas(cublasDgemm(handle, s.op_first, s.op_second, s.rows, s.cols, s.depth, &alpha, b,
                             s.ld_first, a, s.ld_second, &beta, c, s.ldc), "cublasDgemm");
  } else {
    const CublasTypes types = cublas_types(dtype);
    check_cublas(cublasGemmEx(handle, s.op_first, s.op_second, s.rows, s.cols, s.depth, &alpha, b,
                              types.data, s.ld_first, a, types.data, s.ld_second, &beta, c,
                              types.data, s.ldc, types.compute, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx");
  }
}

// Item i: A at a + i * stride_a, and so on.
template <typename T>
void gemm_strided(cublasHandle_t handle, const ColumnMajorGemm& s, DType dtype, scalar_t<T> alpha,
                  const T* a, long long stride_a, const T* b, long long stride_b, scalar_t<T> beta,
                  T* c, long long stride_c, int items) {
  if constexpr (std::is_same_v<T, float>) {
    check_cublas(cublasSgemmStridedBatched(handle, s.op_first, s.op_second, s.rows, s.cols, s.depth,
                                           &alpha, b, s.ld_first, stride_b, a, s.ld_second, stride_a,
                                           &beta, c, s.ldc, stride_c, items),
                 "cublasSgemmStridedBatched");
  } else if constexpr (std::is_same_v<T, double>) {
    check_cublas(cublasDgemmStridedBatched(handle, s.op_first, s.op_second, s.rows, s.cols, s.depth,
                                           &alpha, b, s.ld_first, stride_b, a, s.ld_second, stride_a,
                                           &beta, c, s.ldc, stride_c, items),
                 "cublasDgemmStridedBatched");
  } else {
    const CublasTypes types = cublas_types(dtype);
    check_cublas(cublasGemmStridedBatchedEx(handle, s.op_first, s.op_second, s.rows, s.cols,
                                            s.depth, &alpha, b, types.data, s.ld_first, stride_b, a,
                                            types.data, s.ld_second, stride_a, &beta, c, types.data,
                                            s.ldc, stride_c, items, types.compute,
                                            CUBLAS_GEMM_DEFAULT),
                 "cublasGemmStridedBatchedEx");
  }
}

// Item i: A at a_items[i], B at b_items[i], C at c_items[i] (arrays in device memory).
template <typename T>
void gemm_pointers(cublasHandle_t handle, const ColumnMajorGemm& s, DType dtype, scalar_t<T> alpha,
                   const T* const* a_items, const T* const* b_items, scalar_t<T> beta,
                   T* const* c_items, int items) {
  if constexpr (std::is_same_v<T, float>) {
    check_cublas(cublasSgemmBatched(handle, s.op_first, s.op_second, s.rows, s.cols, s.depth,
                                    &alpha, b_items, s.ld_first, a_items, s.ld_second, &beta,
                                    c_items, s.ldc, items),
                 "cublasSgemmBatched");
  } else if constexpr (std::is_same_v<T, double>) {
    check_cublas(cublasDgemmBatched(handle, s.op_first, s.op_second, s.rows, s.cols, s.depth,
                                    &alpha, b_items, s.ld_first, a_items, s.ld_second, &beta,
                                    c_items, s.ldc, items),
                 "cublasDgemmBatched");
  } else {
    const CublasTypes types = cublas_types(dtype);
    check_cublas(cublasGemmBatchedEx(handle, s.op_first, s.op_second, s.rows, s.cols, s.depth,
                                     &alpha, reinterpret_cast<const void* const*>(b_items),
                                     types.data, s.ld_first,
                                     reinterpret_cast<const void* const*>(a_items), types.data,
                                     s.ld_second, &beta, reinterpret_cast<void* const*>(c_items),
                                     types.data, s.ldc, items, types.compute, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmBatchedEx");
  }
}

// ---- Embedding rows ---------------------------------------------------------------------------

// out[r, k] = table[index[r], k], one thread an element of out.
template <typename T>
__global__ void index_select_rows_kernel(const T* table, const int64_t* index, int64_t count,
                                         int64_t width, T* out) {
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < count;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / width, k = e % width;
    out[e] = table[index[r] * width + k];
  }
}

// table[index[r], k] += src[r, k], one thread an element of src. Rows that repeat an index add
// into the same place, so the additions are atomic (their order, and so the last bits, may vary).
template <typename T>
__global__ void index_add_rows_kernel(const T* src, const int64_t* index, int64_t count,
                                      int64_t width, T* table) {
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < count;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / width, k = e % width;
    atomicAdd(&table[index[r] * width + k], src[e]);
  }
}

// The checks both embedding kernels make: 2-d contiguous table, contiguous i64 index, rows of
// `rows` (out or src) [index.numel(), width] in the table's dtype.
void check_rows(const char* kernel, const Tensor& table, const Tensor& index, const Tensor& rows) {
  TG_CHECK(table.dim() == 2 && table.is_contiguous(), "kernel '", kernel,
           "' on cuda: the table must be a contiguous matrix, got shape ", shape_str(table.shape()));
  TG_CHECK(index.dtype() == DType::i64 && index.is_contiguous(), "kernel '", kernel,
           "' on cuda: the index must be contiguous i64, not ", dtype_name(index.dtype()));
  TG_CHECK(rows.dtype() == table.dtype() && rows.is_contiguous() &&
               rows.numel() == index.numel() * table.size(1),
           "kernel '", kernel, "' on cuda: the rows must be contiguous ", dtype_name(table.dtype()),
           " with ", index.numel(), " x ", table.size(1), " elements, got ", dtype_name(rows.dtype()),
           " of shape ", shape_str(rows.shape()));
}

}  // namespace

// ---- The Kernels methods ----------------------------------------------------------------------

void CudaKernels::gemm(const GemmBatch& g) {
  DeviceGuard guard(device_index());
  if (g.dtype != DType::f32 && g.dtype != DType::f64 && !is_half(g.dtype)) {
    fail("kernel 'gemm' on cuda: dtype ", dtype_name(g.dtype),
         " is not supported (f32, f64, f16, bf16)");
  }
  const size_t items = g.a_offsets.size();
  TG_CHECK(g.b_offsets.size() == items && g.c_offsets.size() == items,
           "kernel 'gemm' on cuda: ", items, " A offsets but ", g.b_offsets.size(), " B and ",
           g.c_offsets.size(), " C offsets");
  if (items == 0 || g.m == 0 || g.n == 0) return;
  const ColumnMajorGemm shape = column_major(g);
  const int item_count = as_int(static_cast<int64_t>(items), "the batch size");

  cublasHandle_t handle = cublas_handle(device_index());
  const bool tf32 = g.dtype == DType::f32 && math_modes().allow_tf32;
  check_cublas(cublasSetMathMode(handle, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
               "cublasSetMathMode");

  dispatch_floating_or_half(g.dtype, "gemm", [&](auto tag) {
    using T = decltype(tag);
    const auto alpha = static_cast<scalar_t<T>>(g.alpha);
    const auto beta = static_cast<scalar_t<T>>(g.beta);
    const T* a = static_cast<const T*>(g.a);
    const T* b = static_cast<const T*>(g.b);
    T* c = static_cast<T*>(g.c);

    if (items == 1) {
      gemm_single<T>(handle, shape, g.dtype, alpha, a + g.a_offsets[0], b + g.b_offsets[0], beta,
                     c + g.c_offsets[0]);
      return;
    }
    const int64_t stride_a = uniform_stride(g.a_offsets), stride_b = uniform_stride(g.b_offsets),
                  stride_c = uniform_stride(g.c_offsets);
    if (stride_a >= 0 && stride_b >= 0 && stride_c >= 0) {
      gemm_strided<T>(handle, shape, g.dtype, alpha, a + g.a_offsets[0], stride_a,
                      b + g.b_offsets[0], stride_b, beta, c + g.c_offsets[0], stride_c, item_count);
      return;
    }
    // Arrays of item pointers, [A items | B items | C items], built here and copied over. The
    // scratch tensor goes back to the caching allocator at the end of this call; only work queued
    // after the gemm on the same stream can reuse it.
    std::vector<const void*> host(3 * items);
    for (size_t i = 0; i < items; ++i) {
      host[i] = a + g.a_offsets[i];
      host[items + i] = b + g.b_offsets[i];
      host[2 * items + i] = c + g.c_offsets[i];
    }
    static_assert(sizeof(const void*) == sizeof(int64_t));
    const Tensor pointers = empty({static_cast<int64_t>(3 * items)}, DType::i64,
                                  Device{DeviceType::cuda, device_index()});
    copy_from_host(host.data(), pointers);
    const auto* items_on_device = static_cast<const T* const*>(pointers.data());
    gemm_pointers<T>(handle, shape, g.dtype, alpha, items_on_device, items_on_device + items, beta,
                     const_cast<T* const*>(items_on_device + 2 * items), item_count);
  });
}

void CudaKernels::index_select_rows(const Tensor& table, const Tensor& index, const Tensor& out) {
  DeviceGuard guard(device_index());
  check_rows("index_select_rows", table, index, out);
  const int64_t width = table.size(1), count = index.numel() * width;
  if (count == 0) return;
  dispatch_floating(table.dtype(), "index_select_rows", [&](auto tag) {
    using T = decltype(tag);
    launch("index_select_rows", index_select_rows_kernel<T>,
           LaunchShape{dim3(blocks_for(count, kThreads)), dim3(kThreads), 0},
           table.data_as<const T>(), index.data_as<const int64_t>(), count, width, out.data_as<T>());
  });
}

void CudaKernels::index_add_rows(const Tensor& src, const Tensor& index, const Tensor& table) {
  DeviceGuard guard(device_index());
  check_rows("index_add_rows", table, index, src);
  const int64_t width = table.size(1), count = index.numel() * width;
  if (count == 0) return;
  dispatch_floating(src.dtype(), "index_add_rows", [&](auto tag) {
    using T = decltype(tag);
    launch("index_add_rows", index_add_rows_kernel<T>,
           LaunchShape{dim3(blocks_for(count, kThreads)), dim3(kThreads), 0},
           src.data_as<const T>(), index.data_as<const int64_t>(), count, width, table.data_as<T>());
  });
}

}  // namespace tg::cuda
