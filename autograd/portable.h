#pragma once
// TG_HOST_DEVICE marks the few small inline functions that both the CPU code and the CUDA kernels
// call (Philox, the f16/bf16 bit conversions): one definition, so both devices compute
// bit-identical numbers. Under nvcc it means __host__ __device__; everywhere else, nothing.
#if defined(__CUDACC__)
#define TG_HOST_DEVICE __host__ __device__
#else
#define TG_HOST_DEVICE
#endif
