// CPU kernels: memory, copies with dtype conversion, fill, random numbers; device dispatch.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "autograd/rng.h"
#include "ops/cpu_kernels.h"

namespace tg {

Kernels& kernels(Device device) {
  static cpu::CpuKernels cpu_kernels;
  check(device.type == DeviceType::cpu, "device ", device_name(device),
        ": this build of tapegrad has no CUDA kernels");
  return cpu_kernels;
}

namespace cpu {

void* CpuKernels::allocate(size_t nbytes) {
  const size_t rounded = (nbytes + 63) / 64 * 64;  // aligned_alloc wants a multiple of 64
  void* ptr = std::aligned_alloc(64, rounded);
  check(ptr != nullptr, "allocate: out of memory asking for ", nbytes, " bytes");
  return ptr;
}

void CpuKernels::deallocate(void* ptr, size_t) { std::free(ptr); }

void CpuKernels::copy(const Tensor& src, const Tensor& dst) {
  check(src.shape() == dst.shape(), "copy: shapes ", shape_str(src.shape()), " and ",
        shape_str(dst.shape()), " differ");
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous()) {
    std::memmove(dst.data(), src.data(), src.numel() * dtype_size(src.dtype()));
    return;
  }
  dispatch_any(src.dtype(), [&](auto src_tag) {
    using S = decltype(src_tag);
    dispatch_any(dst.dtype(), [&](auto dst_tag) {
      using D = decltype(dst_tag);
      const S* in = src.data_as<S>();
      D* out = dst.data_as<D>();
      for_each_element<2>(src.shape(), {&src.strides(), &dst.strides()}, [&](auto p) {
        out[p[1]] = convert<D>(in[p[0]]);
      });
    });
  });
}

void CpuKernels::fill(const Tensor& dst, double value) {
  dispatch_any(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* out = dst.data_as<T>();
    const T filled = convert<T>(value);
    for_each_element<1>(dst.shape(), {&dst.strides()}, [&](auto p) { out[p[0]] = filled; });
  });
}

void CpuKernels::uniform(const Tensor& out, uint64_t seed, uint64_t offset) {
  dispatch_floating(out.dtype(), "uniform", [&](auto tag) {
    using T = decltype(tag);
    T* values = out.data_as<T>();
    constexpr int64_t kChunk = 1024;
    float chunk[kChunk];
    for (int64_t start = 0; start < out.numel(); start += kChunk) {
      const int64_t count = std::min(kChunk, out.numel() - start);
      philox_uniform_fill(seed, offset, start, count, chunk);
      std::copy_n(chunk, count, values + start);
    }
  });
}

}  // namespace cpu
}  // namespace tg
