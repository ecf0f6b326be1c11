// CPU kernels: elementwise unary, binary and where over strided (possibly broadcast) inputs
// (comparisons and logic: cpu/compare.cpp).
#include <algorithm>
#include <cmath>
#include <numbers>

#include "tapegrad/cpu/kernels.h"
#include "tapegrad/runtime/features.h"

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
    case UnaryOp::sin: return std::sin(x);
    case UnaryOp::cos: return std::cos(x);
    case UnaryOp::abs: return std::abs(x);
    case UnaryOp::sign: return x > T(0) ? T(1) : x < T(0) ? T(-1) : x;  // 0 and NaN stay
    case UnaryOp::clamp_min: return x < scalar ? scalar : x;  // NaN fails the test and stays
    case UnaryOp::clamp_max: return x > scalar ? scalar : x;
  }
  return x;
}

// Contiguous unary and binary ops of at most this many elements run on the calling thread;
// larger ones in chunks of at least about half of it (the thread policy: runtime/threads.h).
constexpr int64_t kParallelElements = 1 << 15;

// The binary ops, written once: calls body(fn) with fn(a, b) the operation on T, so that the
// loops inside body see a fixed op (and the compiler vectorises them).
template <typename T, typename Body>
void with_binary_op(BinaryOp op, Body&& body) {
  switch (op) {
    case BinaryOp::add: return body([](T a, T b) { return a + b; });
    case BinaryOp::sub: return body([](T a, T b) { return a - b; });
    case BinaryOp::mul: return body([](T a, T b) { return a * b; });
    case BinaryOp::div: return body([](T a, T b) { return a / b; });
    case BinaryOp::eq: return body([](T a, T b) { return a == b ? T(1) : T(0); });
  }
}

// out[i] = fn(a[i * a_step], b[i * b_step]) for i < n, with steps 1 or 0 (broadcast): simple
// loops the compiler vectorises.
template <typename T, typename Fn>
void binary_row(const T* a, int64_t a_step, const T* b, int64_t b_step, T* out, int64_t n, Fn fn) {
  if (a_step == 1 && b_step == 1) {
    for (int64_t i = 0; i < n; ++i) out[i] = fn(a[i], b[i]);
  } else if (a_step == 1) {
    const T y = b[0];
    for (int64_t i = 0; i < n; ++i) out[i] = fn(a[i], y);
  } else if (b_step == 1) {
    const T x = a[0];
    for (int64_t i = 0; i < n; ++i) out[i] = fn(x, b[i]);
  } else {
    std::fill_n(out, n, fn(a[0], b[0]));
  }
}

// The GELU kernels of the fast path: cpu/fast/elementwise_avx512.cpp's where the CPU has AVX-512 F
// (sixteen lanes; two 512-bit FMA units do twice the work a cycle), else the AVX2 ones.
struct GeluKernels {
  void (*gelu)(const float* x, float* out, int64_t n);
  void (*gelu_grad)(const float* x, float* out, int64_t n);
  void (*gelu_backward)(const float* g, const float* x, float* out, int64_t n);
};
const GeluKernels& gelu_kernels() {
  static const GeluKernels chosen =
      cpu_has_avx512f()
          ? GeluKernels{gelu_f32_avx512, gelu_grad_f32_avx512, gelu_backward_f32_avx512}
          : GeluKernels{gelu_f32_avx2, gelu_grad_f32_avx2, gelu_backward_f32_avx2};
  return chosen;
}

// exp, GELU and GELU's derivative on contiguous f32 where the fast path may run
// (cpu/fast/elementwise_avx2.cpp, GELU as gelu_kernels() chooses), split across the threads as the
// plain loop; false otherwise.
bool unary_fast(UnaryOp op, const Tensor& x, const Tensor& out) {
  const bool has_fast = op == UnaryOp::gelu || op == UnaryOp::gelu_grad || op == UnaryOp::exp;
  if (!has_fast || x.dtype() != DType::f32 || !x.is_contiguous() || !out.is_contiguous() ||
      !fast_paths_enabled()) {
    return false;
  }
  const float* in = x.data_as<float>();
  float* result = out.data_as<float>();
  const auto map = op == UnaryOp::gelu        ? gelu_kernels().gelu
                   : op == UnaryOp::gelu_grad ? gelu_kernels().gelu_grad
                                              : exp_f32_avx2;
  parallel_for(x.numel(), kParallelElements, [&](int64_t first, int64_t past) {
    map(in + first, result + first, past - first);
  });
  return true;
}

}  // namespace

void CpuKernels::unary(UnaryOp op, const Tensor& x, double scalar, const Tensor& out) {
  if (is_half(x.dtype())) return unary_half(op, x, scalar, out);
  if (unary_fast(op, x, out)) return;
  dispatch_floating(x.dtype(), "unary", [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data_as<T>();
    T* result = out.data_as<T>();
    const T s = static_cast<T>(scalar);
    if (x.is_contiguous()) {
      const int64_t n = x.numel();
      parallel_for(n, kParallelElements, [&](int64_t first, int64_t past) {
        for (int64_t i = first; i < past; ++i) result[i] = apply_unary(op, in[i], s);
      });
      return;
    }
    for_each_element<2>(x.shape(), {&x.strides(), &out.strides()},
                        [&](auto p) { result[p[1]] = apply_unary(op, in[p[0]], s); });
  });
}

// f32, contiguous, one shape, with the fast paths on: one AVX2 or AVX-512 pass (gelu_kernels())
// instead of gelu_grad's tensor and a mul.
Tensor CpuKernels::gelu_backward(const Tensor& g, const Tensor& x) {
  for (const Tensor* t : {&g, &x}) {
    if (t->dtype() != DType::f32 || !t->is_contiguous() || t->shape() != x.shape()) return Tensor();
  }
  if (!fast_paths_enabled()) return Tensor();
  const Tensor dx = empty(x.shape(), DType::f32, x.device());
  const float* grad = g.data_as<float>();
  const float* in = x.data_as<float>();
  float* result = dx.data_as<float>();
  const auto backward = gelu_kernels().gelu_backward;
  parallel_for(x.numel(), kParallelElements, [&](int64_t first, int64_t past) {
    backward(grad + first, in + first, result + first, past - first);
  });
  return dx;
}

void CpuKernels::binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  if (is_half(a.dtype())) return binary_half(op, a, b, out);
  dispatch_floating(a.dtype(), "binary", [&](auto tag) {
    using T = decltype(tag);
    const T* lhs = a.data_as<T>();
    const T* rhs = b.data_as<T>();
    T* result = out.data_as<T>();
    if (a.is_contiguous() && b.is_contiguous()) {
      const int64_t n = out.numel();
      with_binary_op<T>(op, [&](auto fn) {
        parallel_for(n, kParallelElements, [&](int64_t first, int64_t past) {
          for (int64_t i = first; i < past; ++i) result[i] = fn(lhs[i], rhs[i]);
        });
      });
      return;
    }
    const int64_t last = out.dim() - 1;
    const auto step_ok = [last](const Tensor& t) { return t.strides()[last] == 0 || t.strides()[last] == 1; };
    if (out.is_contiguous() && last >= 0 && out.size(last) > 1 && step_ok(a) && step_ok(b)) {
      // Row by row (a bias over the rows, a [.., 1] column, a table over the batch): each row found
      // from its index, the last dim a plain loop; large outputs split among the threads.
      const Shape outer(out.shape().begin(), out.shape().end() - 1);
      const Shape a_strides(a.strides().begin(), a.strides().end() - 1);
      const Shape b_strides(b.strides().begin(), b.strides().end() - 1);
      const Shape out_strides(out.strides().begin(), out.strides().end() - 1);
      const int64_t n = out.size(last), a_step = a.strides()[last], b_step = b.strides()[last];
      with_binary_op<T>(op, [&](auto fn) {
        in_pieces(numel(outer), out.numel() * static_cast<int64_t>(sizeof(T)), [&](int64_t first, int64_t past) {
          for (int64_t row = first; row < past; ++row) {
            binary_row(lhs + row_offset(row, outer, a_strides), a_step, rhs + row_offset(row, outer, b_strides),
                       b_step, result + row_offset(row, outer, out_strides), n, fn);
          }
        });
      });
      return;
    }
    with_binary_op<T>(op, [&](auto fn) {
      for_each_element<3>(out.shape(), {&a.strides(), &b.strides(), &out.strides()},
                          [&](auto p) { result[p[2]] = fn(lhs[p[0]], rhs[p[1]]); });
    });
  });
}

// A choice, not arithmetic: elements of any dtype move as they are (the half types' 16-bit
// patterns included).
void CpuKernels::where(const Tensor& condition, const Tensor& a, const Tensor& b,
                       const Tensor& out) {
  dispatch_any(a.dtype(), [&](auto tag) {
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

// ---- f16 / bf16: load, compute in f32, round once on store ------------------------------------

void unary_half(UnaryOp op, const Tensor& x, double scalar, const Tensor& out) {
  dispatch_half(x.dtype(), "unary", [&](auto tag) {
    using H = decltype(tag);
    const H* in = x.data_as<H>();
    H* result = out.data_as<H>();
    const float s = static_cast<float>(scalar);
    const auto apply = [&](H value) { return convert<H>(apply_unary(op, convert<float>(value), s)); };
    if (x.is_contiguous()) {
      const int64_t n = x.numel();
      parallel_for(n, kParallelElements, [&](int64_t first, int64_t past) {
        for (int64_t i = first; i < past; ++i) result[i] = apply(in[i]);
      });
      return;
    }
    for_each_element<2>(x.shape(), {&x.strides(), &out.strides()},
                        [&](auto p) { result[p[1]] = apply(in[p[0]]); });
  });
}

void binary_half(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  dispatch_half(a.dtype(), "binary", [&](auto tag) {
    using H = decltype(tag);
    const H* lhs = a.data_as<H>();
    const H* rhs = b.data_as<H>();
    H* result = out.data_as<H>();
    with_binary_op<float>(op, [&](auto fn) {
      const auto apply = [fn](H x, H y) { return convert<H>(fn(convert<float>(x), convert<float>(y))); };
      if (a.is_contiguous() && b.is_contiguous()) {
        const int64_t n = out.numel();
        parallel_for(n, kParallelElements, [&](int64_t first, int64_t past) {
          for (int64_t i = first; i < past; ++i) result[i] = apply(lhs[i], rhs[i]);
        });
        return;
      }
      for_each_element<3>(out.shape(), {&a.strides(), &b.strides(), &out.strides()},
                          [&](auto p) { result[p[2]] = apply(lhs[p[0]], rhs[p[1]]); });
    });
  });
}

}  // namespace tg::cpu
