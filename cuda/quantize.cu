// CUDA int8 kernels: symmetric per-row quantization, the int8 x int8 -> int32 product, and the
// rescale back to f32 (formulas in autograd/kernels.h). The CPU twins are in cpu/quantize.cpp;
// both compute in f32 with the same operations in the same order (the products spelled with
// __fmul_rn / __fadd_rn, which nvcc never fuses into an FMA), so they give the same bits.
#include <cmath>
#include <cstdint>

#include "tapegrad/cuda/device_types.h"
#include "tapegrad/cuda/kernels.h"

namespace tg::cuda {
namespace {

constexpr unsigned kThreads = 256;
constexpr int kTile = 16;  // gemm_i8: a block computes a kTile x kTile tile of the product

#if defined(TAPEGRAD_CUDA_EMULATION)
inline float mul_rn(float a, float b) { return a * b; }
inline float add_rn(float a, float b) { return a + b; }
#else
__device__ inline float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ inline float add_rn(float a, float b) { return __fadd_rn(a, b); }
#endif

// One block per row: the threads find max |x| over the row's finite entries (a tree in shared
// memory), then quantize their share of the row.
__global__ void quantize_rows_kernel(const float* x, int64_t cols, float fixed_scale, float levels,
                                     int8_t* q, float* scale) {
  __shared__ float largest[kThreads];
  const int64_t row = blockIdx.x;
  const float* in = x + row * cols;
  float row_scale = fixed_scale;
  if (fixed_scale <= 0) {
    float mine = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      if (isfinite(in[c])) mine = fmaxf(mine, fabsf(in[c]));
    }
    largest[threadIdx.x] = mine;
    __syncthreads();
    for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
      if (threadIdx.x < half) largest[threadIdx.x] = fmaxf(largest[threadIdx.x], largest[threadIdx.x + half]);
      __syncthreads();
    }
    // at least the smallest normal f32, as cpu/quantize.cpp's
    row_scale = largest[0] > 0 ? fmaxf(largest[0] / levels, 0x1p-126f) : 1.0f;
  }
  if (threadIdx.x == 0) scale[row] = row_scale;
  const float inverse = 1.0f / row_scale;  // (ops/quantize.h: a product, not a quotient)
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float scaled = in[c] * inverse;  // q = round(x (1 / scale)), clamped
    const float clamped = isnan(scaled) ? 0.0f : fminf(fmaxf(scaled, -levels), levels);
    q[row * cols + c] = static_cast<int8_t>(rintf(clamped));
  }
}

// acc = a b^T on tiles: each block stages kTile rows of a and of b (kTile entries of k at a time)
// in shared memory; thread (ty, tx) sums output (row0 + ty, col0 + tx) in i32.
__global__ void gemm_i8_kernel(const int8_t* a, const int8_t* b, int32_t* acc, int64_t m,
                               int64_t n, int64_t k) {
  __shared__ int32_t a_tile[kTile][kTile];
  __shared__ int32_t b_tile[kTile][kTile];
  const int64_t row = static_cast<int64_t>(blockIdx.y) * kTile + threadIdx.y;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kTile + threadIdx.x;
  const int64_t b_row = static_cast<int64_t>(blockIdx.x) * kTile + threadIdx.y;
  int32_t sum = 0;
  for (int64_t p0 = 0; p0 < k; p0 += kTile) {
    const int64_t p = p0 + threadIdx.x;
    a_tile[threadIdx.y][threadIdx.x] = row < m && p < k ? a[row * k + p] : 0;
    b_tile[threadIdx.y][threadIdx.x] = b_row < n && p < k ? b[b_row * k + p] : 0;
    __syncthreads();
    for (int t = 0; t < kTile; ++t) sum += a_tile[threadIdx.y][t] * b_tile[threadIdx.x][t];
    __syncthreads();
  }
  if (row < m && col < n) acc[row * n + col] = sum;
}

__global__ void dequantize_product_kernel(const int32_t* acc, const float* row_scale,
                                          const float* col_scale, const float* bias, float* out,
                                          int64_t m, int64_t n) {
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < m * n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = e / n, j = e % n;
    const float scaled = mul_rn(mul_rn(static_cast<float>(acc[e]), row_scale[i]), col_scale[j]);
    out[e] = bias != nullptr ? add_rn(scaled, bias[j]) : scaled;
  }
}

}  // namespace

void CudaKernels::quantize_rows(const Tensor& x, double fixed_scale, int levels, const Tensor& q,
                                const Tensor& scale) {
  DeviceGuard guard(device_index());
  const int64_t rows = x.size(0);
  if (rows == 0) return;
  TG_CHECK(rows <= 0x7fffffff, "kernel 'quantize_rows' on cuda: ", rows, " rows are more than a grid holds");
  launch("quantize_rows", quantize_rows_kernel,
         LaunchShape{dim3(static_cast<unsigned>(rows)), dim3(kThreads), 0}, x.data_as<const float>(),
         x.size(1), static_cast<float>(fixed_scale), static_cast<float>(levels),
         q.data_as<int8_t>(), scale.data_as<float>());
}

void CudaKernels::gemm_i8(const Tensor& a, const Tensor& b, const Tensor& acc) {
  DeviceGuard guard(device_index());
  const int64_t m = a.size(0), k = a.size(1), n = b.size(0);
  if (m == 0 || n == 0) return;
  const int64_t grid_x = (n + kTile - 1) / kTile, grid_y = (m + kTile - 1) / kTile;
  TG_CHECK(grid_x <= 0x7fffffff && grid_y <= 65535, "kernel 'gemm_i8' on cuda: a [", m, ", ", k,
           "] x b [", n, ", ", k, "]^T needs more blocks than a grid holds");
  launch("gemm_i8", gemm_i8_kernel,
         LaunchShape{dim3(static_cast<unsigned>(grid_x), static_cast<unsigned>(grid_y)),
                     dim3(kTile, kTile), 0},
         a.data_as<const int8_t>(), b.data_as<const int8_t>(), acc.data_as<int32_t>(), m, n, k);
}

void CudaKernels::dequantize_product(const Tensor& acc, const Tensor& row_scale,
                                     const Tensor& col_scale, const Tensor& bias,
                                     const Tensor& out) {
  DeviceGuard guard(device_index());
  const int64_t m = acc.size(0), n = acc.size(1);
  if (m * n == 0) return;
  launch("dequantize_product", dequantize_product_kernel,
         LaunchShape{dim3(blocks_for(m * n, kThreads)), dim3(kThreads), 0},
         acc.data_as<const int32_t>(), row_scale.data_as<const float>(),
         col_scale.data_as<const float>(), bias.defined() ? bias.data_as<const float>() : nullptr,
         out.data_as<float>(), m, n);
}

}  // namespace tg::cuda
