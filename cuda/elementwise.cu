// CUDA kernels: elementwise unary, binary, where, comparisons and predicates over strided
// (possibly broadcast) inputs.
// The CPU twins are in cpu/elementwise.cpp and cpu/compare.cpp: the same formulas, computed in f32 for f32, f16
// and bf16 (rounded once on store) and in f64 for f64.
#include <cmath>
#include <numbers>
#include <type_traits>

#include "tapegrad/cuda/device_math.h"
#include "tapegrad/cuda/device_types.h"
#include "tapegrad/cuda/kernels.h"

namespace tg::cuda {
namespace {

constexpr unsigned kThreads = 256;

// op(x) in the compute type C (float or double), as the CPU's apply_unary.
template <typename C>
__device__ inline C apply_unary(UnaryOp op, C x, C scalar) {
  switch (op) {
    case UnaryOp::neg: return -x;
    case UnaryOp::exp: return exp_of(x);
    case UnaryOp::log: return log_of(x);
    case UnaryOp::sqrt: return sqrt_of(x);
    case UnaryOp::tanh: return tanh_of(x);
    case UnaryOp::sigmoid: return C(1) / (C(1) + exp_of(-x));
    case UnaryOp::relu: return x > C(0) ? x : C(0);
    case UnaryOp::gelu: return C(0.5) * x * (C(1) + erf_of(x * C(std::numbers::sqrt2 / 2)));
    case UnaryOp::relu_grad: return x > C(0) ? C(1) : C(0);
    case UnaryOp::gelu_grad: {
      const C cdf = C(0.5) * (C(1) + erf_of(x * C(std::numbers::sqrt2 / 2)));
      const C pdf = exp_of(C(-0.5) * x * x) * C(std::numbers::inv_sqrtpi / std::numbers::sqrt2);
      return cdf + x * pdf;
    }
    case UnaryOp::pow: return pow_of(x, scalar);
    case UnaryOp::add_scalar: return x + scalar;
    case UnaryOp::mul_scalar: return x * scalar;
    case UnaryOp::ge_scalar: return x >= scalar ? C(1) : C(0);
    case UnaryOp::sin: return sin_of(x);
    case UnaryOp::cos: return cos_of(x);
    case UnaryOp::abs: return abs_of(x);
    case UnaryOp::sign: return x > C(0) ? C(1) : x < C(0) ? C(-1) : x;  // 0 and NaN stay
    case UnaryOp::clamp_min: return x < scalar ? scalar : x;  // NaN fails the test and stays
    case UnaryOp::clamp_max: return x > scalar ? scalar : x;
  }
  return x;
}

// a op b in the compute type C, as the CPU's with_binary_op (cpu/elementwise.cpp).
template <typename C>
__device__ inline C apply_binary(BinaryOp op, C a, C b) {
  switch (op) {
    case BinaryOp::add: return a + b;
    case BinaryOp::sub: return a - b;
    case BinaryOp::mul: return a * b;
    case BinaryOp::div: return a / b;
    case BinaryOp::eq: return a == b ? C(1) : C(0);
  }
  return a;
}

// out[i] = op(x[i]) for contiguous x and out.
template <typename T>
__global__ void unary_contiguous_kernel(UnaryOp op, const T* x, compute_t<T> scalar, T* out,
                                        int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = convert<T>(apply_unary(op, convert<compute_t<T>>(x[i]), scalar));
  }
}

// The same over a strided layout (operand 0: x, 1: out).
template <typename T>
__global__ void unary_kernel(UnaryOp op, const T* x, compute_t<T> scalar, T* out,
                             StridedShape<2> layout, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t at[2];
    layout.offsets(i, at);
    out[at[1]] = convert<T>(apply_unary(op, convert<compute_t<T>>(x[at[0]]), scalar));
  }
}

// out[i] = a[i] op b[i] for contiguous a, b and out.
template <typename T>
__global__ void binary_contiguous_kernel(BinaryOp op, const T* a, const T* b, T* out, int64_t n) {
  using C = compute_t<T>;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = convert<T>(apply_binary(op, convert<C>(a[i]), convert<C>(b[i])));
  }
}

// The same over a strided layout (operands a, b, out; stride 0 on broadcast dims).
template <typename T>
__global__ void binary_kernel(BinaryOp op, const T* a, const T* b, T* out, StridedShape<3> layout,
                              int64_t n) {
  using C = compute_t<T>;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t at[3];
    layout.offsets(i, at);
    out[at[2]] = convert<T>(apply_binary(op, convert<C>(a[at[0]]), convert<C>(b[at[1]])));
  }
}

// out[i] = condition[i] ? a[i] : b[i] over a strided layout (operands condition, a, b, out). A
// choice, not arithmetic: elements move as they are (the half types' 16-bit patterns included).
template <typename T>
__global__ void where_kernel(const bool* condition, const T* a, const T* b, T* out,
                             StridedShape<4> layout, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t at[4];
    layout.offsets(i, at);
    out[at[3]] = convert<bool>(condition[at[0]]) ? a[at[1]] : b[at[2]];
  }
}

// The value a comparison reads: the half types as f32, every other element type as itself.
template <typename T>
__device__ inline compute_t<T> comparable(T value) {
  return convert<compute_t<T>>(value);
}

// a op b as the CPU's with_compare_op (cpu/compare.cpp): NaN compares false (ne: true); the
// logical ops read "is not zero".
template <typename V>
__device__ inline bool apply_compare(CompareOp op, V a, V b) {
  switch (op) {
    case CompareOp::eq: return a == b;
    case CompareOp::ne: return a != b;
    case CompareOp::lt: return a < b;
    case CompareOp::le: return a <= b;
    case CompareOp::gt: return a > b;
    case CompareOp::ge: return a >= b;
    case CompareOp::logical_and: return a != V(0) && b != V(0);
    case CompareOp::logical_or: return a != V(0) || b != V(0);
  }
  return false;
}

template <typename V>
__device__ inline bool apply_predicate(PredicateOp op, V x) {
  switch (op) {
    case PredicateOp::isnan: return x != x;  // false for integers
    case PredicateOp::isinf:
      if constexpr (std::is_floating_point_v<V>) return isinf(x);
      return false;
    case PredicateOp::logical_not: return x == V(0);
  }
  return false;
}

// out[i] = a[i] op b[i] (bool) over a strided layout (operands a, b, out).
template <typename T>
__global__ void compare_kernel(CompareOp op, const T* a, const T* b, bool* out,
                               StridedShape<3> layout, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t at[3];
    layout.offsets(i, at);
    out[at[2]] = apply_compare(op, comparable(a[at[0]]), comparable(b[at[1]]));
  }
}

// out[i] = op(x[i]) (bool) over a strided layout (operands x, out).
template <typename T>
__global__ void predicate_kernel(PredicateOp op, const T* x, bool* out, StridedShape<2> layout,
                                 int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t at[2];
    layout.offsets(i, at);
    out[at[1]] = apply_predicate(op, comparable(x[at[0]]));
  }
}

// True when every operand of the layout is dense in row-major order (no index math needed).
template <int N>
bool is_dense(const StridedShape<N>& layout) {
  if (layout.rank == 0) return true;
  if (layout.rank > 1) return false;
  for (int k = 0; k < N; ++k) {
    if (layout.strides[k][0] != 1) return false;
  }
  return true;
}

// Same shape and dtype as out, for each of the operands.
void check_operands(const char* kernel, const Tensor& out, std::initializer_list<const Tensor*> inputs) {
  for (const Tensor* input : inputs) {
    if (input->shape() != out.shape() || input->dtype() != out.dtype()) {
      fail("kernel '", kernel, "' on cuda: input ", shape_str(input->shape()), " ",
           dtype_name(input->dtype()), " does not match the output ", shape_str(out.shape()), " ",
           dtype_name(out.dtype()));
    }
  }
}

LaunchShape launch_shape(int64_t n) {
  return LaunchShape{dim3(blocks_for(n, kThreads)), dim3(kThreads), 0};
}

}  // namespace

void CudaKernels::unary(UnaryOp op, const Tensor& x, double scalar, const Tensor& out) {
  DeviceGuard guard(device_index());
  check_operands("unary", out, {&x});
  const int64_t n = out.numel();
  dispatch_floating_or_half(x.dtype(), "unary", [&](auto tag) {
    using T = decltype(tag);
    if (n == 0) return;
    const auto s = static_cast<compute_t<T>>(scalar);
    const Tensor* const operands[2] = {&x, &out};
    const StridedShape<2> layout = strided_shape(out.shape(), operands, "unary");
    if (is_dense(layout)) {
      launch("unary", unary_contiguous_kernel<T>, launch_shape(n), op, x.data_as<const T>(), s,
             out.data_as<T>(), n);
    } else {
      launch("unary", unary_kernel<T>, launch_shape(n), op, x.data_as<const T>(), s,
             out.data_as<T>(), layout, n);
    }
  });
}

void CudaKernels::binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  DeviceGuard guard(device_index());
  check_operands("binary", out, {&a, &b});
  const int64_t n = out.numel();
  dispatch_floating_or_half(a.dtype(), "binary", [&](auto tag) {
    using T = decltype(tag);
    if (n == 0) return;
    const Tensor* const operands[3] = {&a, &b, &out};
    const StridedShape<3> layout = strided_shape(out.shape(), operands, "binary");
    if (is_dense(layout)) {
      launch("binary", binary_contiguous_kernel<T>, launch_shape(n), op, a.data_as<const T>(),
             b.data_as<const T>(), out.data_as<T>(), n);
    } else {
      launch("binary", binary_kernel<T>, launch_shape(n), op, a.data_as<const T>(),
             b.data_as<const T>(), out.data_as<T>(), layout, n);
    }
  });
}

void CudaKernels::where(const Tensor& condition, const Tensor& a, const Tensor& b,
                        const Tensor& out) {
  DeviceGuard guard(device_index());
  check_operands("where", out, {&a, &b});
  if (condition.dtype() != DType::b8 || condition.shape() != out.shape()) {
    fail("kernel 'where' on cuda: the condition (", shape_str(condition.shape()), " ",
         dtype_name(condition.dtype()), ") must be bool of shape ", shape_str(out.shape()));
  }
  const int64_t n = out.numel();
  dispatch_any(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (n == 0) return;
    const Tensor* const operands[4] = {&condition, &a, &b, &out};
    const StridedShape<4> layout = strided_shape(out.shape(), operands, "where");
    launch("where", where_kernel<T>, launch_shape(n), condition.data_as<const bool>(),
           a.data_as<const T>(), b.data_as<const T>(), out.data_as<T>(), layout, n);
  });
}

void CudaKernels::compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  DeviceGuard guard(device_index());
  if (out.dtype() != DType::b8 || a.dtype() != b.dtype() || a.shape() != out.shape() ||
      b.shape() != out.shape()) {
    fail("kernel 'compare' on cuda: inputs ", shape_str(a.shape()), " ", dtype_name(a.dtype()),
         " and ", shape_str(b.shape()), " ", dtype_name(b.dtype()), " do not make the bool output ",
         shape_str(out.shape()));
  }
  const int64_t n = out.numel();
  if (n == 0) return;
  dispatch_any(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const Tensor* const operands[3] = {&a, &b, &out};
    const StridedShape<3> layout = strided_shape(out.shape(), operands, "compare");
    launch("compare", compare_kernel<T>, launch_shape(n), op, a.data_as<const T>(),
           b.data_as<const T>(), out.data_as<bool>(), layout, n);
  });
}

void CudaKernels::predicate(PredicateOp op, const Tensor& x, const Tensor& out) {
  DeviceGuard guard(device_index());
  if (out.dtype() != DType::b8 || x.shape() != out.shape()) {
    fail("kernel 'predicate' on cuda: input ", shape_str(x.shape()), " does not make the bool output ",
         shape_str(out.shape()));
  }
  const int64_t n = out.numel();
  if (n == 0) return;
  dispatch_any(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const Tensor* const operands[2] = {&x, &out};
    const StridedShape<2> layout = strided_shape(out.shape(), operands, "predicate");
    launch("predicate", predicate_kernel<T>, launch_shape(n), op, x.data_as<const T>(),
           out.data_as<bool>(), layout, n);
  });
}

}  // namespace tg::cuda
