#pragma once
// The one header every CUDA source includes. Kernels are written once and compiled two ways:
//  - by nvcc for a real GPU (the library's CUDA backend), and
//  - by g++ against the emulated device of the tests (TAPEGRAD_CUDA_EMULATION; the harness is in
//    tests/cuda/emulation/ and is never part of the library).
// So kernels keep to the subset the emulation provides: threadIdx/blockIdx/blockDim/gridDim,
// __shared__ (static, and dynamic through dynamic_shared<T>()), __syncthreads(), the warp
// shuffles __shfl_down_sync/__shfl_xor_sync/__shfl_sync, atomicAdd/atomicMax/atomicCAS/atomicExch,
// and the C math functions (expf, logf, sqrt, ...). No inline PTX, no tensor-core intrinsics, no
// <<<>>> at call sites: every launch goes through launch() below.
#include <cstddef>
#include <utility>

#if defined(TAPEGRAD_CUDA_EMULATION)
#include "emulated_cuda.h"  // tests/cuda/emulation: runtime, device built-ins, cuBLAS on OpenBLAS
#else
#include <cublas_v2.h>
#include <cuda_runtime.h>
#endif

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/portable.h"

namespace tg::cuda {

// Throws tg::Error "CUDA error in <what>: <message>" unless status is cudaSuccess.
void check_cuda(cudaError_t status, const char* what);
void check_cublas(cublasStatus_t status, const char* what);

// Grid and block of a launch, and the bytes of dynamic shared memory each block gets.
struct LaunchShape {
  dim3 grid{1, 1, 1};
  dim3 block{256, 1, 1};
  size_t shared_bytes = 0;
};

// The number of blocks of `threads` that cover `count` items, capped for grid-stride loops.
inline unsigned blocks_for(long long count, unsigned threads, unsigned cap = 4096) {
  const long long blocks = (count + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > cap ? cap : blocks));
}

// Launches kernel(args...) on the current device's default stream and checks the launch.
template <typename... Params, typename... Args>
void launch(const char* name, void (*kernel)(Params...), const LaunchShape& shape, Args&&... args) {
#if defined(TAPEGRAD_CUDA_EMULATION)
  emulation::launch(kernel, shape.grid, shape.block, shape.shared_bytes,
                    static_cast<Params>(std::forward<Args>(args))...);
#else
  kernel<<<shape.grid, shape.block, shape.shared_bytes>>>(static_cast<Params>(std::forward<Args>(args))...);
#endif
  check_cuda(cudaGetLastError(), name);  // a bad launch configuration (or, emulated, a throw)
}

// The block's dynamic shared memory (LaunchShape::shared_bytes of it), 16-byte aligned.
#if defined(TAPEGRAD_CUDA_EMULATION)
template <typename T>
inline T* dynamic_shared() {
  return static_cast<T*>(emulation::dynamic_shared_memory());
}
#else
template <typename T>
__device__ inline T* dynamic_shared() {
  extern __shared__ __align__(16) unsigned char tg_dynamic_shared_bytes[];
  return reinterpret_cast<T*>(tg_dynamic_shared_bytes);
}
#endif

}  // namespace tg::cuda
