// CPU kernels: memory, copies with dtype conversion, host transfers, fill, random numbers, index
// screening; the CPU backend's registry entry.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "tapegrad/autograd/rng.h"
#include "tapegrad/cpu/kernels.h"
#include "tapegrad/runtime/allocator.h"

namespace tg {

Backend cpu_backend() {
  Backend backend;
  backend.name = "cpu";
  backend.device_count = [] { return 1; };
  backend.kernels_for = [](int) -> Kernels& {
    static cpu::CpuKernels cpu_kernels;
    return cpu_kernels;
  };
  backend.describe = [] { return std::vector<std::string>{"cpu"}; };
  return backend;
}

namespace cpu {

void* CpuKernels::allocate(size_t nbytes) { return allocate_block(nbytes); }  // runtime/allocator.h

void CpuKernels::deallocate(void* ptr, size_t nbytes) { free_block(ptr, nbytes); }

void CpuKernels::copy(const Tensor& src, const Tensor& dst) {
  if (src.shape() != dst.shape()) {  // (not TG_CHECK(): its message would be built on every copy)
    fail("copy: shapes ", shape_str(src.shape()), " and ", shape_str(dst.shape()), " differ");
  }
  // Nothing to copy (as the CUDA copy): the row sizes below could overflow for [0, 2^62].
  if (src.numel() == 0) return;
  const int64_t element = static_cast<int64_t>(dtype_size(src.dtype()));
  // A copy within one storage may overlap itself: memmove's order matters, so it stays one piece.
  const int64_t bytes = src.storage() == dst.storage() ? 0 : src.numel() * element;
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous()) {
    const auto* in = static_cast<const char*>(src.data());
    auto* out = static_cast<char*>(dst.data());
    in_pieces(src.numel() * element, bytes, [&](int64_t first, int64_t past) {
      std::memmove(out + first, in + first, static_cast<size_t>(past - first));
    });
    return;
  }
  if (src.dtype() == dst.dtype() && src.dim() >= 2 && src.strides().back() == 1 &&
      dst.strides().back() == 1) {  // rows of the last dim are contiguous on both sides
    const size_t row_bytes = src.shape().back() * element;
    const Shape outer(src.shape().begin(), src.shape().end() - 1);
    const Shape src_strides(src.strides().begin(), src.strides().end() - 1);
    const Shape dst_strides(dst.strides().begin(), dst.strides().end() - 1);
    const auto* in = static_cast<const char*>(src.data());
    auto* out = static_cast<char*>(dst.data());
    in_pieces(numel(outer), bytes, [&](int64_t first, int64_t past) {
      for (int64_t row = first; row < past; ++row) {
        std::memmove(out + row_offset(row, outer, dst_strides) * element,
                     in + row_offset(row, outer, src_strides) * element, row_bytes);
      }
    });
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
    if (dst.is_contiguous()) {
      in_pieces(dst.numel(), dst.numel() * static_cast<int64_t>(sizeof(T)),
                [&](int64_t first, int64_t past) { std::fill(out + first, out + past, filled); });
      return;
    }
    for_each_element<1>(dst.shape(), {&dst.strides()}, [&](auto p) { out[p[0]] = filled; });
  });
}

void CpuKernels::uniform(const Tensor& out, uint64_t seed, uint64_t offset) {
  if (is_half(out.dtype())) {  // drawn in f32, then rounded; one that rounds up to 1 steps below
    Tensor drawn = empty(out.shape(), DType::f32, out.device());
    uniform(drawn, seed, offset);
    copy(drawn, out);
    const uint16_t one = out.dtype() == DType::f16 ? f32_to_f16(1.0f) : f32_to_bf16(1.0f);
    uint16_t* bits = out.data_as<uint16_t>();
    for (int64_t i = 0; i < out.numel(); ++i) {
      if (bits[i] == one) bits[i] = one - 1;  // the largest value below 1 (same sign, same order)
    }
    return;
  }
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

void CpuKernels::copy_from_host(const void* host_bytes, const Tensor& dst) {
  const size_t nbytes = static_cast<size_t>(dst.numel()) * dtype_size(dst.dtype());
  if (nbytes > 0) std::memcpy(dst.data(), host_bytes, nbytes);
}

void CpuKernels::copy_to_host(const Tensor& src, void* host_bytes) {
  const size_t nbytes = static_cast<size_t>(src.numel()) * dtype_size(src.dtype());
  if (nbytes > 0) std::memcpy(host_bytes, src.data(), nbytes);
}

IndexSummary CpuKernels::screen_indices(const Tensor& index, int64_t ignore, const Tensor& safe,
                                        const Tensor& keep) {
  const int64_t* values = index.data_as<int64_t>();
  int64_t* safe_values = safe.defined() ? safe.data_as<int64_t>() : nullptr;
  bool* kept = keep.defined() ? keep.data_as<bool>() : nullptr;
  IndexSummary summary;
  for (int64_t i = 0; i < index.numel(); ++i) {
    const bool counted = values[i] != ignore;
    if (safe_values != nullptr) safe_values[i] = counted ? values[i] : 0;
    if (kept != nullptr) kept[i] = counted;
    if (!counted) continue;
    summary.min = summary.kept == 0 ? values[i] : std::min(summary.min, values[i]);
    summary.max = summary.kept == 0 ? values[i] : std::max(summary.max, values[i]);
    ++summary.kept;
  }
  return summary;
}

}  // namespace cpu
}  // namespace tg
