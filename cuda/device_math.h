#pragma once
// Device math for float and double: the C functions by name (expf for float, exp for double, ...),
// which are what the CPU's std:: overloads call, so both devices evaluate the same formulas.
#include "tapegrad/cuda/device_code.h"

namespace tg::cuda {

__device__ inline float exp_of(float x) { return expf(x); }
__device__ inline double exp_of(double x) { return exp(x); }
__device__ inline float log_of(float x) { return logf(x); }
__device__ inline double log_of(double x) { return log(x); }
__device__ inline float sqrt_of(float x) { return sqrtf(x); }
__device__ inline double sqrt_of(double x) { return sqrt(x); }
__device__ inline float tanh_of(float x) { return tanhf(x); }
__device__ inline double tanh_of(double x) { return tanh(x); }
__device__ inline float erf_of(float x) { return erff(x); }
__device__ inline double erf_of(double x) { return erf(x); }
__device__ inline float pow_of(float x, float y) { return powf(x, y); }
__device__ inline double pow_of(double x, double y) { return pow(x, y); }
__device__ inline float sin_of(float x) { return sinf(x); }
__device__ inline double sin_of(double x) { return sin(x); }
__device__ inline float cos_of(float x) { return cosf(x); }
__device__ inline double cos_of(double x) { return cos(x); }
__device__ inline float abs_of(float x) { return fabsf(x); }
__device__ inline double abs_of(double x) { return fabs(x); }

// The larger of a and b as std::max computes it (a < b ? b : a): a NaN b is never taken.
template <typename T>
__device__ inline T max_of(T a, T b) {
  return a < b ? b : a;
}

// The larger of a and b, and NaN when either is NaN (the CPU's max_or_nan, cpu/kernels.h): a
// softmax row holding a NaN gives NaN throughout.
template <typename T>
__device__ inline T max_or_nan(T a, T b) {
  return b > a || b != b ? b : a;
}

// The combining operations of the block reductions.
struct Plus {
  template <typename T>
  __device__ T operator()(T a, T b) const { return a + b; }
};
struct Larger {
  template <typename T>
  __device__ T operator()(T a, T b) const { return max_of(a, b); }
};
struct LargerOrNaN {
  template <typename T>
  __device__ T operator()(T a, T b) const { return max_or_nan(a, b); }
};

}  // namespace tg::cuda
