#pragma once
// The device side of the emulated CUDA device (TEST HARNESS, see emulated_cuda.h): what kernel
// code sees. Qualifiers, the built-in variables, barriers and warp shuffles, atomics, and the math
// that CUDA device code has but the C library lacks. Everything lives in the global namespace, as
// in CUDA, so kernels compile unchanged.
#include <math.h>  // libstdc++'s <math.h> also puts isfinite, isnan, abs, ... in the global namespace

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

// ---- Qualifiers ---------------------------------------------------------------------------------
// __shared__ is `static`: the blocks of a grid run one at a time, so a function-local static is
// exactly "one array per running block, shared by its threads". Each kernel (and each template
// instantiation) gets its own. Like real shared memory it is not cleared between blocks.
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))  // unlike alignas, allowed between decl-specifiers

// ---- Launch geometry and the built-in variables ---------------------------------------------------
struct uint3 {
  unsigned x = 0, y = 0, z = 0;
};

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};

// Set by the launch for the running CUDA thread. All the threads of a block run on the launching
// OS thread (see emulated_cuda.h), so these are its thread_local variables, switched with them.
inline thread_local uint3 threadIdx;
inline thread_local uint3 blockIdx;
inline thread_local dim3 blockDim;
inline thread_local dim3 gridDim;
inline constexpr int warpSize = 32;

// ---- Barriers and warp shuffles -----------------------------------------------------------------
// __syncthreads waits for every thread of the block that has not returned yet (returned threads
// count as arrived, as on the hardware). __syncwarp and the shuffles wait for the non-returned
// threads of the caller's warp: all of them must call, with the same sequence of warp operations;
// the mask is not inspected.
void __syncthreads();
void __syncwarp(unsigned mask = 0xffffffffu);

namespace emulation::detail {
// Every calling lane of the warp publishes `bits`; each gets back the bits published by lane
// `source` (a lane of the warp), or its own when `source` is -1, absent, or returned.
uint64_t warp_exchange(uint64_t bits, int source);
int lane_id();  // threadIdx linearised, modulo warpSize

template <typename T>
T shuffle_from(T value, int source) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= sizeof(uint64_t),
                "emulated warp shuffles move values of at most 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  bits = warp_exchange(bits, source);
  std::memcpy(&value, &bits, sizeof(T));
  return value;
}

// The first lane of the caller's width-wide segment of the warp (width a power of two <= 32).
inline int segment_start(int lane, int width) { return lane & ~(width - 1); }
}  // namespace emulation::detail

// Lanes whose source falls outside their segment of `width` lanes (or on a lane that does not
// exist, in a partial last warp) get their own value back, as in CUDA.
template <typename T>
T __shfl_sync(unsigned /*mask*/, T value, int source_lane, int width = warpSize) {
  using namespace emulation::detail;
  const int lane = lane_id();
  return shuffle_from(value, segment_start(lane, width) + (source_lane & (width - 1)));
}

template <typename T>
T __shfl_up_sync(unsigned /*mask*/, T value, unsigned delta, int width = warpSize) {
  using namespace emulation::detail;
  const int lane = lane_id();
  const bool inside = lane - segment_start(lane, width) >= static_cast<int>(delta);
  return shuffle_from(value, inside ? lane - static_cast<int>(delta) : -1);
}

template <typename T>
T __shfl_down_sync(unsigned /*mask*/, T value, unsigned delta, int width = warpSize) {
  using namespace emulation::detail;
  const int lane = lane_id();
  const bool inside = lane - segment_start(lane, width) + static_cast<int>(delta) < width;
  return shuffle_from(value, inside ? lane + static_cast<int>(delta) : -1);
}

template <typename T>
T __shfl_xor_sync(unsigned /*mask*/, T value, int lane_mask, int width = warpSize) {
  using namespace emulation::detail;
  const int lane = lane_id();
  const int source = lane ^ lane_mask;
  const int start = segment_start(lane, width);
  return shuffle_from(value, source >= start && source < start + width ? source : -1);
}

// ---- Atomics on device memory (which is host memory here): return the old value, as CUDA does ----
namespace emulation::detail {
template <typename T, typename Update>
T atomic_update(T* address, Update update) {
  std::atomic_ref<T> target(*address);
  T old = target.load();
  while (!target.compare_exchange_weak(old, update(old))) {
  }
  return old;
}
}  // namespace emulation::detail

inline int atomicAdd(int* address, int value) { return std::atomic_ref<int>(*address).fetch_add(value); }
inline unsigned atomicAdd(unsigned* address, unsigned value) {
  return std::atomic_ref<unsigned>(*address).fetch_add(value);
}
inline unsigned long long atomicAdd(unsigned long long* address, unsigned long long value) {
  return std::atomic_ref<unsigned long long>(*address).fetch_add(value);
}
inline float atomicAdd(float* address, float value) { return std::atomic_ref<float>(*address).fetch_add(value); }
inline double atomicAdd(double* address, double value) {
  return std::atomic_ref<double>(*address).fetch_add(value);
}

#define TG_EMULATED_ATOMIC_MIN_MAX(T)                                                           \
  inline T atomicMax(T* address, T value) {                                                     \
    return emulation::detail::atomic_update(address, [value](T old) { return old < value ? value : old; }); \
  }                                                                                             \
  inline T atomicMin(T* address, T value) {                                                     \
    return emulation::detail::atomic_update(address, [value](T old) { return value < old ? value : old; }); \
  }
TG_EMULATED_ATOMIC_MIN_MAX(int)
TG_EMULATED_ATOMIC_MIN_MAX(unsigned)
TG_EMULATED_ATOMIC_MIN_MAX(long long)
TG_EMULATED_ATOMIC_MIN_MAX(unsigned long long)
#undef TG_EMULATED_ATOMIC_MIN_MAX

// compare_exchange leaves the old value in `compare` whether or not it stored `value`.
#define TG_EMULATED_ATOMIC_CAS(T)                                       \
  inline T atomicCAS(T* address, T compare, T value) {                  \
    std::atomic_ref<T>(*address).compare_exchange_strong(compare, value); \
    return compare;                                                     \
  }
TG_EMULATED_ATOMIC_CAS(int)
TG_EMULATED_ATOMIC_CAS(unsigned)
TG_EMULATED_ATOMIC_CAS(unsigned long long)
#undef TG_EMULATED_ATOMIC_CAS

#define TG_EMULATED_ATOMIC_EXCH(T) \
  inline T atomicExch(T* address, T value) { return std::atomic_ref<T>(*address).exchange(value); }
TG_EMULATED_ATOMIC_EXCH(int)
TG_EMULATED_ATOMIC_EXCH(unsigned)
TG_EMULATED_ATOMIC_EXCH(float)
#undef TG_EMULATED_ATOMIC_EXCH

inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }

// ---- Math that CUDA device code has and the C library lacks ----------------------------------------
// The fast intrinsics (__expf, __logf, __fdividef) are the exact functions here: on a GPU they
// are approximations, so tests must not expect bit-identical results from them across devices.
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline int __float_as_int(float x) { return std::bit_cast<int>(x); }
inline float __int_as_float(int x) { return std::bit_cast<float>(x); }
inline unsigned __float_as_uint(float x) { return std::bit_cast<unsigned>(x); }
inline float __uint_as_float(unsigned x) { return std::bit_cast<float>(x); }
inline long long __double_as_longlong(double x) { return std::bit_cast<long long>(x); }
inline double __longlong_as_double(long long x) { return std::bit_cast<double>(x); }

// CUDA's global min/max, called unqualified by device code. long and unsigned long are here
// because int64_t and size_t are those types on Linux; float and double follow fminf/fmaxf
// (a NaN operand yields the other operand).
#define TG_EMULATED_MIN_MAX(T)                               \
  inline T min(T a, T b) { return b < a ? b : a; }           \
  inline T max(T a, T b) { return a < b ? b : a; }
TG_EMULATED_MIN_MAX(int)
TG_EMULATED_MIN_MAX(unsigned)
TG_EMULATED_MIN_MAX(long)
TG_EMULATED_MIN_MAX(unsigned long)
TG_EMULATED_MIN_MAX(long long)
TG_EMULATED_MIN_MAX(unsigned long long)
#undef TG_EMULATED_MIN_MAX
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
