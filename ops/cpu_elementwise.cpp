// CPU kernels: elementwise unary, binary and where over strided (possibly broadcast) inputs.
#include <cmath>
#include <numbers>

#include "ops/cpu_kernels.h"

namespace tg::cpu {
namespace {

template <typename T>
T apply_unary(UnaryOp op, T x, T scalar) {
  switch (op) {
    case UnaryOp::neg: return -x;
    case UnaryOp::exp: return std::exp(x);
    case UnaryOp::log: return std::log(x);
    case UnaryOp::sqrt: return std::sqrt(x);
    case UnaryOp::tanh: return std::tanh(x);
    case UnaryOp::sigmoid: return T(1) / (T(1) + std::exp(-x));
    case UnaryOp::relu: return x > T(0) ? x : T(0);
    case UnaryOp::gelu: return T(0.5) * x * (T(1) + std::erf(x * T(std::numbers::sqrt2 / 2)));
    case UnaryOp::relu_grad: return x > T(0) ? T(1) : T(0);
    case UnaryOp::gelu_grad: {
      const T cdf = T(0.5) * (T(1) + std::erf(x * T(std::numbers::sqrt2 / 2)));
      const T pdf = std::exp(T(-0.5) * x * x) * T(std::numbers::inv_sqrtpi / std::numbers::sqrt2);
      return cdf + x * pdf;
    }
    case UnaryOp::pow: return std::pow(x, scalar);
    case UnaryOp::add_scalar: return x + scalar;
    case UnaryOp::mul_scalar: return x * scalar;
    case UnaryOp::ge_scalar: return x >= scalar ? T(1) : T(0);
  }
  return x;
}

template <typename T>
T apply_binary(BinaryOp op, T a, T b) {
  switch (op) {
    case BinaryOp::add: return a + b;
    case BinaryOp::sub: return a - b;
    case BinaryOp::mul: return a * b;
    case BinaryOp::div: return a / b;
    case BinaryOp::eq: return a == b ? T(1) : T(0);
  }
  return a;
}

constexpr int64_t kParallelElements = 1 << 15;

}  // namespace

void CpuKernels::unary(UnaryOp op, const Tensor& x, double scalar, const Tensor& out) {
  dispatch_floating(x.dtype(), "unary", [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data_as<T>();
    T* result = out.data_as<T>();
    const T s = static_cast<T>(scalar);
    if (x.is_contiguous()) {
      const int64_t n = x.numel();
#pragma omp parallel for if (n > kParallelElements)
      for (int64_t i = 0; i < n; ++i) result[i] = apply_unary(op, in[i], s);
      return;
    }
    for_each_element<2>(x.shape(), {&x.strides(), &out.strides()},
                        [&](auto p) { result[p[1]] = apply_unary(op, in[p[0]], s); });
  });
}

void CpuKernels::binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  dispatch_floating(a.dtype(), "binary", [&](auto tag) {
    using T = decltype(tag);
    const T* lhs = a.data_as<T>();
    const T* rhs = b.data_as<T>();
    T* result = out.data_as<T>();
    if (a.is_contiguous() && b.is_contiguous()) {
      const int64_t n = out.numel();
#pragma omp parallel for if (n > kParallelElements)
      for (int64_t i = 0; i < n; ++i) result[i] = apply_binary(op, lhs[i], rhs[i]);
      return;
    }
    for_each_element<3>(out.shape(), {&a.strides(), &b.strides(), &out.strides()}, [&](auto p) {
      result[p[2]] = apply_binary(op, lhs[p[0]], rhs[p[1]]);
    });
  });
}

void CpuKernels::where(const Tensor& condition, const Tensor& a, const Tensor& b,
                       const Tensor& out) {
  dispatch_floating(a.dtype(), "where", [&](auto tag) {
    using T = decltype(tag);
    const bool* take_a = condition.data_as<bool>();
    const T* lhs = a.data_as<T>();
    const T* rhs = b.data_as<T>();
    T* result = out.data_as<T>();
    for_each_element<4>(out.shape(),
                        {&condition.strides(), &a.strides(), &b.strides(), &out.strides()},
                        [&](auto p) { result[p[3]] = take_a[p[0]] ? lhs[p[1]] : rhs[p[2]]; });
  });
}

}  // namespace tg::cpu
