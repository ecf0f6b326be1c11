#pragma once
// What the CUDA kernels share: the element types and convert<To>() (the CPU's, so both devices round
// identically), the compute type of each element type, host-side dtype dispatch, and tensor
// layouts passed by value.
#include <array>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "tapegrad/autograd/dtype.h"
#include "tapegrad/autograd/element_types.h"
#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/tensor.h"
#include "tapegrad/cuda/device_code.h"

namespace tg::cuda {

// The element types and convert<To>(value), the same as the CPU kernels' (so both round alike).
using tg::BFloat16;
using tg::convert;
using tg::dispatch_any;
using tg::Half;

// The type a kernel computes in for element type T: f32 for the half types, else T itself.
template <typename T> struct ComputeOf { using type = T; };
template <> struct ComputeOf<Half> { using type = float; };
template <> struct ComputeOf<BFloat16> { using type = float; };
template <typename T> using compute_t = typename ComputeOf<T>::type;

// Host side: body(float{}) or body(double{}); other dtypes are an error naming the kernel.
template <typename Body>
void dispatch_floating(DType dtype, const char* kernel, Body&& body) {
  if (dtype == DType::f32) return body(float{});
  if (dtype == DType::f64) return body(double{});
  fail("kernel '", kernel, "' on cuda: dtype ", dtype_name(dtype), " is not supported (f32, f64)");
}

// Host side: the same for kernels that also take f16 and bf16 (computed in f32, see compute_t).
template <typename Body>
void dispatch_floating_or_half(DType dtype, const char* kernel, Body&& body) {
  if (dtype == DType::f16) return body(Half{});
  if (dtype == DType::bf16) return body(BFloat16{});
  if (dtype == DType::f32) return body(float{});
  if (dtype == DType::f64) return body(double{});
  fail("kernel '", kernel, "' on cuda: dtype ", dtype_name(dtype),
       " is not supported (f32, f64, f16, bf16)");
}

// A strided view of up to kMaxDims dims, passed to kernels by value: where element `linear` (in
// row-major order over shape) lives, in elements from the data pointer.
inline constexpr int kMaxDims = 8;

template <int N>  // N operands sharing one shape, each with its own strides
struct StridedShape {
  int rank = 0;
  int64_t shape[kMaxDims] = {};
  int64_t strides[N][kMaxDims] = {};

  TG_HOST_DEVICE void offsets(int64_t linear, int64_t (&out)[N]) const {
    for (int k = 0; k < N; ++k) out[k] = 0;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t index = linear % shape[d];
      linear /= shape[d];
      for (int k = 0; k < N; ++k) out[k] += index * strides[k][d];
    }
  }
};

// Builds the layout of `operands` (all of shape `shape`), merging dims that are contiguous in every
// operand so that most tensors become rank 1 or 2; more than kMaxDims after merging is an error.
template <int N>
StridedShape<N> strided_shape(const Shape& shape, const Tensor* const (&operands)[N],
                              const char* kernel) {
  std::vector<int64_t> sizes;
  std::vector<std::array<int64_t, N>> strides;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;  // size-1 dims never move the offset
    std::array<int64_t, N> dim_strides;
    for (int k = 0; k < N; ++k) dim_strides[k] = operands[k]->strides()[d];
    bool mergeable = !sizes.empty();
    for (int k = 0; k < N && mergeable; ++k) {
      mergeable = strides.back()[k] == dim_strides[k] * shape[d];
    }
    if (mergeable) {
      sizes.back() *= shape[d];
      strides.back() = dim_strides;
    } else {
      sizes.push_back(shape[d]);
      strides.push_back(dim_strides);
    }
  }
  if (sizes.size() > static_cast<size_t>(kMaxDims)) {
    fail("kernel '", kernel, "' on cuda: shape ", shape_str(shape), " has more than ", kMaxDims,
         " dims after merging contiguous ones");
  }
  StridedShape<N> layout;
  layout.rank = static_cast<int>(sizes.size());
  for (int d = 0; d < layout.rank; ++d) {
    layout.shape[d] = sizes[d];
    for (int k = 0; k < N; ++k) layout.strides[k][d] = strides[d][k];
  }
  return layout;
}

}  // namespace tg::cuda
