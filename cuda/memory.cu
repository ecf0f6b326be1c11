// CUDA kernels: the caching allocator, copies (strided, dtype-converting), host transfers, fill,
// Philox uniform numbers, index screening; the error checks every CUDA file uses.
// The CPU twins are in cpu/memory.cpp.
#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>

#include "tapegrad/autograd/philox.h"
#include "tapegrad/cuda/device_types.h"
#include "tapegrad/cuda/kernels.h"

namespace tg::cuda {

// ---- Error checks -----------------------------------------------------------------------------

void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) fail("CUDA error in ", what, ": ", cudaGetErrorString(status));
}

void check_cublas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    fail("cuBLAS error in ", what, ": ", cublasGetStatusName(status));
  }
}

// ---- Which device is current ------------------------------------------------------------------

DeviceGuard::DeviceGuard(int device_index) {
  check_cuda(cudaGetDevice(&previous_), "cudaGetDevice");
  if (previous_ != device_index) {
    check_cuda(cudaSetDevice(device_index), "cudaSetDevice");
    changed_ = true;
  }
}

DeviceGuard::~DeviceGuard() {
  if (changed_) cudaSetDevice(previous_);  // (a destructor does not throw)
}

// ---- The caching allocator --------------------------------------------------------------------
// cudaMalloc and cudaFree are slow (cudaFree also waits for the whole device), so freed blocks are
// kept and handed out again. Every kernel runs on the default stream, in order, so a block freed
// while a queued kernel still uses it is only reused by work queued after that kernel: safe.

namespace {

constexpr size_t kBlockRounding = 512;  // every block is a multiple of this many bytes

// One device's blocks: all of them (in use or not) with their sizes, and the free ones by size.
struct DeviceCache {
  std::mutex mutex;
  std::unordered_map<void*, size_t> block_sizes;
  std::multimap<size_t, void*> free_blocks;
  int64_t reserved_bytes = 0;
};

DeviceCache& cache_for(int device_index) {
  TG_CHECK(device_index >= 0 && device_index < kMaxCudaDevices, "cuda allocator: no device cuda:",
           device_index);
  // Never destroyed: tensors in static objects may be freed after main returns.
  static auto* caches = new std::array<DeviceCache, kMaxCudaDevices>();
  return (*caches)[device_index];
}

// Returns every free block to cudaFree (the caller holds the cache's mutex and the device guard).
void release_free_blocks(DeviceCache& cache) {
  while (!cache.free_blocks.empty()) {
    const auto [size, ptr] = *cache.free_blocks.begin();
    check_cuda(cudaFree(ptr), "cudaFree");
    cache.free_blocks.erase(cache.free_blocks.begin());
    cache.block_sizes.erase(ptr);
    cache.reserved_bytes -= static_cast<int64_t>(size);
  }
}

}  // namespace

void* CudaKernels::allocate(size_t nbytes) {
  DeviceGuard guard(device_index());
  DeviceCache& cache = cache_for(device_index());
  if (nbytes > SIZE_MAX - kBlockRounding) {
    fail("allocate: out of memory on cuda:", device_index(), " asking for ", nbytes, " bytes");
  }
  const size_t size = (std::max<size_t>(nbytes, 1) + kBlockRounding - 1) / kBlockRounding * kBlockRounding;
  std::lock_guard lock(cache.mutex);

  // Best fit: the smallest free block that is large enough, unless it wastes more than half.
  const auto fit = cache.free_blocks.lower_bound(size);
  if (fit != cache.free_blocks.end() && fit->first / 2 <= size) {
    void* ptr = fit->second;
    cache.free_blocks.erase(fit);
    return ptr;
  }

  void* ptr = nullptr;
  cudaError_t status = cudaMalloc(&ptr, size);
  if (status == cudaErrorMemoryAllocation) {  // give the cached blocks back and try once more
    cudaGetLastError();  // (clears the error so later checks do not see it)
    release_free_blocks(cache);
    status = cudaMalloc(&ptr, size);
  }
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    fail("allocate: out of memory on cuda:", device_index(), " asking for ", nbytes, " bytes (",
         cache.reserved_bytes, " bytes already in use)");
  }
  check_cuda(status, "cudaMalloc");
  cache.block_sizes.emplace(ptr, size);
  cache.reserved_bytes += static_cast<int64_t>(size);
  return ptr;
}

// No DeviceGuard here: the block only goes back to the free list (no CUDA call), and this runs in
// Storage's destructor, which must not throw.
void CudaKernels::deallocate(void* ptr, size_t) {
  if (ptr == nullptr) return;
  DeviceCache& cache = cache_for(device_index());
  std::lock_guard lock(cache.mutex);
  const auto block = cache.block_sizes.find(ptr);
  if (block != cache.block_sizes.end()) cache.free_blocks.emplace(block->second, ptr);
}

CacheStats cache_stats(int device_index) {
  DeviceCache& cache = cache_for(device_index);
  std::lock_guard lock(cache.mutex);
  return {cache.reserved_bytes, static_cast<int64_t>(cache.free_blocks.size())};
}

void empty_cache(int device_index) {
  DeviceGuard guard(device_index);
  DeviceCache& cache = cache_for(device_index);
  std::lock_guard lock(cache.mutex);
  release_free_blocks(cache);
}

// ---- Kernels ----------------------------------------------------------------------------------

namespace {

constexpr unsigned kThreads = 256;

// One element converted from S to D exactly as the CPU's convert<D>() does: half types through
// f32, everything else by a plain cast (bool: nonzero is true).
template <typename D, typename S>
__device__ inline D convert_element(S value) {
  if constexpr (std::is_same_v<S, D>) return value;
  else return convert<D>(convert<compute_t<S>>(value));
}

// dst = src, element by element over a strided layout (operand 0: src, 1: dst), converting dtype.
template <typename S, typename D>
__global__ void copy_kernel(const S* src, D* dst, StridedShape<2> layout, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t at[2];
    layout.offsets(i, at);
    dst[at[1]] = convert_element<D>(src[at[0]]);
  }
}

// Every element of a strided dst = value (already converted to T on the host).
template <typename T>
__global__ void fill_kernel(T* dst, T value, StridedShape<1> layout, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t at[1];
    layout.offsets(i, at);
    dst[at[0]] = value;
  }
}

// A uniform f32 number stored as T. A half type that would round up to 1 gets the largest value
// below 1 instead (its bit pattern minus one), as the CPU does.
template <typename T>
__device__ inline T uniform_as(float u) {
  T value = convert<T>(u);
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    const T one = convert<T>(1.0f);
    if (value.bits == one.bits) value.bits = static_cast<uint16_t>(one.bits - 1);
  }
  return value;
}

// out[i] = number offset + i of the Philox stream of seed. Thread g draws block offset / 4 + g
// once and writes those of its four numbers that fall in out (the first block may start before
// out[0] when offset is not a multiple of 4).
template <typename T>
__global__ void uniform_kernel(T* out, uint64_t seed, uint64_t offset, int64_t n) {
  const int64_t skipped = static_cast<int64_t>(offset % 4);  // numbers of the first block before out[0]
  const int64_t groups = (skipped + n + 3) / 4;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups;
       g += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const auto words = philox_block(seed, offset / 4 + static_cast<uint64_t>(g));
    for (int lane = 0; lane < 4; ++lane) {
      const int64_t i = 4 * g + lane - skipped;
      if (i >= 0 && i < n) out[i] = uniform_as<T>(philox_word_to_unit(words[lane]));
    }
  }
}

// ---- Index screening: count, min and max of the entries != ignore -----------------------------
// Two passes: each block reduces its share of the index to one partial (kept, min, max), then a
// single block reduces the partials. An empty share has min = INT64_MAX, max = INT64_MIN.

constexpr unsigned kScreenBlocksCap = 1024;

__device__ inline void combine(int64_t& kept, int64_t& lo, int64_t& hi, int64_t other_kept,
                               int64_t other_lo, int64_t other_hi) {
  kept += other_kept;
  lo = other_lo < lo ? other_lo : lo;
  hi = other_hi > hi ? other_hi : hi;
}

// Tree reduction of this thread's (kept, lo, hi) over the block, in the shared arrays (blockDim.x
// of each, a power of two); thread 0 then finds the block's totals at index 0.
__device__ inline void reduce_in_block(int64_t* kept, int64_t* lo, int64_t* hi) {
  const unsigned t = threadIdx.x;
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (t < stride) combine(kept[t], lo[t], hi[t], kept[t + stride], lo[t + stride], hi[t + stride]);
    __syncthreads();
  }
}

// Pass 1: partials[3 b .. 3 b + 2] = (kept, min, max) of block b's entries; also writes
// keep = index != ignore and safe = keep ? index : 0 when those pointers are not null.
__global__ void screen_kernel(const int64_t* index, int64_t n, int64_t ignore, int64_t* safe,
                              bool* keep, int64_t* partials) {
  __shared__ int64_t kept[kThreads], lo[kThreads], hi[kThreads];
  int64_t my_kept = 0, my_lo = INT64_MAX, my_hi = INT64_MIN;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t value = index[i];
    const bool counted = value != ignore;
    if (safe != nullptr) safe[i] = counted ? value : 0;
    if (keep != nullptr) keep[i] = counted;
    if (counted) combine(my_kept, my_lo, my_hi, 1, value, value);
  }
  kept[threadIdx.x] = my_kept;
  lo[threadIdx.x] = my_lo;
  hi[threadIdx.x] = my_hi;
  reduce_in_block(kept, lo, hi);
  if (threadIdx.x == 0) {
    partials[3 * blockIdx.x] = kept[0];
    partials[3 * blockIdx.x + 1] = lo[0];
    partials[3 * blockIdx.x + 2] = hi[0];
  }
}

// Pass 2 (one block): result = (kept, min, max) over all partials; min 0 and max -1 when nothing
// was kept, as IndexSummary says.
__global__ void screen_finish_kernel(const int64_t* partials, int64_t count, int64_t* result) {
  __shared__ int64_t kept[kThreads], lo[kThreads], hi[kThreads];
  int64_t my_kept = 0, my_lo = INT64_MAX, my_hi = INT64_MIN;
  for (int64_t b = threadIdx.x; b < count; b += blockDim.x) {
    combine(my_kept, my_lo, my_hi, partials[3 * b], partials[3 * b + 1], partials[3 * b + 2]);
  }
  kept[threadIdx.x] = my_kept;
  lo[threadIdx.x] = my_lo;
  hi[threadIdx.x] = my_hi;
  reduce_in_block(kept, lo, hi);
  if (threadIdx.x == 0) {
    result[0] = kept[0];
    result[1] = kept[0] > 0 ? lo[0] : 0;
    result[2] = kept[0] > 0 ? hi[0] : -1;
  }
}

// Scratch memory from the caching allocator for the length of a call.
class Scratch {
 public:
  Scratch(CudaKernels& kernels, size_t nbytes)
      : kernels_(kernels), nbytes_(nbytes), ptr_(kernels.allocate(nbytes)) {}
  ~Scratch() { kernels_.deallocate(ptr_, nbytes_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }

 private:
  CudaKernels& kernels_;
  size_t nbytes_;
  void* ptr_;
};

size_t bytes_of(const Tensor& t) { return static_cast<size_t>(t.numel()) * dtype_size(t.dtype()); }

}  // namespace

// ---- The Kernels methods ----------------------------------------------------------------------

void CudaKernels::copy(const Tensor& src, const Tensor& dst) {
  DeviceGuard guard(device_index());
  if (src.shape() != dst.shape()) {
    fail("copy: shapes ", shape_str(src.shape()), " and ", shape_str(dst.shape()), " differ");
  }
  const int64_t n = src.numel();
  if (n == 0) return;
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous()) {
    if (src.data() != dst.data()) {
      check_cuda(cudaMemcpy(dst.data(), src.data(), bytes_of(src), cudaMemcpyDeviceToDevice),
                 "copy (cudaMemcpy)");
    }
    return;
  }
  const Tensor* const operands[2] = {&src, &dst};
  const StridedShape<2> layout = strided_shape(src.shape(), operands, "copy");
  const LaunchShape shape{dim3(blocks_for(n, kThreads)), dim3(kThreads), 0};
  dispatch_any(src.dtype(), [&](auto src_tag) {
    using S = decltype(src_tag);
    dispatch_any(dst.dtype(), [&](auto dst_tag) {
      using D = decltype(dst_tag);
      launch("copy", copy_kernel<S, D>, shape, src.data_as<const S>(), dst.data_as<D>(), layout, n);
    });
  });
}

void CudaKernels::fill(const Tensor& dst, double value) {
  DeviceGuard guard(device_index());
  const int64_t n = dst.numel();
  if (n == 0) return;
  const Tensor* const operands[1] = {&dst};
  const StridedShape<1> layout = strided_shape(dst.shape(), operands, "fill");
  const LaunchShape shape{dim3(blocks_for(n, kThreads)), dim3(kThreads), 0};
  dispatch_any(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    launch("fill", fill_kernel<T>, shape, dst.data_as<T>(), convert<T>(value), layout, n);
  });
}

void CudaKernels::uniform(const Tensor& out, uint64_t seed, uint64_t offset) {
  DeviceGuard guard(device_index());
  TG_CHECK(out.is_contiguous(), "kernel 'uniform' on cuda: the output must be contiguous");
  const int64_t n = out.numel();
  if (n == 0) return;
  const LaunchShape shape{dim3(blocks_for((n + 3) / 4, kThreads)), dim3(kThreads), 0};
  dispatch_floating_or_half(out.dtype(), "uniform", [&](auto tag) {
    using T = decltype(tag);
    launch("uniform", uniform_kernel<T>, shape, out.data_as<T>(), seed, offset, n);
  });
}

void CudaKernels::copy_from_host(const void* host_bytes, const Tensor& dst) {
  DeviceGuard guard(device_index());
  TG_CHECK(dst.is_contiguous(), "copy_from_host: the cuda tensor must be contiguous");
  if (dst.numel() == 0) return;
  check_cuda(cudaMemcpy(dst.data(), host_bytes, bytes_of(dst), cudaMemcpyHostToDevice),
             "copy_from_host (cudaMemcpy)");
}

void CudaKernels::copy_to_host(const Tensor& src, void* host_bytes) {
  DeviceGuard guard(device_index());
  TG_CHECK(src.is_contiguous(), "copy_to_host: the cuda tensor must be contiguous");
  if (src.numel() == 0) return;
  check_cuda(cudaMemcpy(host_bytes, src.data(), bytes_of(src), cudaMemcpyDeviceToHost),
             "copy_to_host (cudaMemcpy)");
}

IndexSummary CudaKernels::screen_indices(const Tensor& index, int64_t ignore, const Tensor& safe,
                                         const Tensor& keep) {
  DeviceGuard guard(device_index());
  TG_CHECK(index.dtype() == DType::i64 && index.is_contiguous(),
           "kernel 'screen_indices' on cuda: the index must be contiguous i64, not ",
           dtype_name(index.dtype()));
  TG_CHECK(safe.defined() == keep.defined(),
           "kernel 'screen_indices' on cuda: safe and keep are given together");
  if (safe.defined()) {
    TG_CHECK(safe.dtype() == DType::i64 && keep.dtype() == DType::b8 &&
                 safe.numel() == index.numel() && keep.numel() == index.numel() &&
                 safe.is_contiguous() && keep.is_contiguous(),
             "kernel 'screen_indices' on cuda: safe (i64) and keep (bool) must be contiguous, with ",
             index.numel(), " elements like the index");
  }
  const int64_t n = index.numel();
  if (n == 0) return IndexSummary{};

  const unsigned blocks = blocks_for(n, kThreads, kScreenBlocksCap);
  Scratch partials(*this, sizeof(int64_t) * 3 * blocks);
  Scratch result(*this, sizeof(int64_t) * 3);
  launch("screen_indices", screen_kernel, LaunchShape{dim3(blocks), dim3(kThreads), 0},
         index.data_as<const int64_t>(), n, ignore,
         safe.defined() ? safe.data_as<int64_t>() : nullptr,
         keep.defined() ? keep.data_as<bool>() : nullptr, partials.as<int64_t>());
  launch("screen_indices (finish)", screen_finish_kernel, LaunchShape{dim3(1), dim3(kThreads), 0},
         partials.as<const int64_t>(), static_cast<int64_t>(blocks), result.as<int64_t>());

  int64_t host[3];  // the one read back, which waits for the kernels
  check_cuda(cudaMemcpy(host, result.as<int64_t>(), sizeof(host), cudaMemcpyDeviceToHost),
             "screen_indices (cudaMemcpy)");
  return IndexSummary{host[0], host[1], host[2]};
}

}  // namespace tg::cuda
