// CPU kernels: comparisons, logic and predicates (isnan, isinf, logical_not) over strided
// (possibly broadcast) inputs of any dtype, with bool results (ops/compare.h is the op).
#include <cmath>
#include <type_traits>

#include "tapegrad/cpu/kernels.h"

namespace tg::cpu {
namespace {

// The value a comparison reads: the half types as f32 (they have no operators of their own),
// every other element type as itself.
template <typename T>
auto comparable(T value) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return convert<float>(value);
  } else {
    return value;
  }
}

// Calls body(fn) with fn(a, b) the comparison on values V, so that the loop inside body sees one
// fixed op. NaN compares false with everything (ne: true), as IEEE and PyTorch have it; the
// logical ops read "is not zero", and NaN is not zero.
template <typename V, typename Body>
void with_compare_op(CompareOp op, Body&& body) {
  switch (op) {
    case CompareOp::eq: return body([](V a, V b) { return a == b; });
    case CompareOp::ne: return body([](V a, V b) { return a != b; });
    case CompareOp::lt: return body([](V a, V b) { return a < b; });
    case CompareOp::le: return body([](V a, V b) { return a <= b; });
    case CompareOp::gt: return body([](V a, V b) { return a > b; });
    case CompareOp::ge: return body([](V a, V b) { return a >= b; });
    case CompareOp::logical_and: return body([](V a, V b) { return a != V(0) && b != V(0); });
    case CompareOp::logical_or: return body([](V a, V b) { return a != V(0) || b != V(0); });
  }
}

template <typename V>
bool apply_predicate(PredicateOp op, V x) {
  switch (op) {
    case PredicateOp::isnan:
      if constexpr (std::is_floating_point_v<V>) return std::isnan(x);
      return false;
    case PredicateOp::isinf:
      if constexpr (std::is_floating_point_v<V>) return std::isinf(x);
      return false;
    case PredicateOp::logical_not: return x == V(0);
  }
  return false;
}

void check_bool_output(const char* kernel, const Tensor& out) {
  if (out.dtype() != DType::b8) {
    fail("kernel '", kernel, "' on cpu: the output is ", dtype_name(out.dtype()), ", not bool");
  }
}

}  // namespace

void CpuKernels::compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  check_bool_output("compare", out);
  if (a.dtype() != b.dtype()) {
    fail("kernel 'compare' on cpu: inputs of two dtypes (", dtype_name(a.dtype()), ", ",
         dtype_name(b.dtype()), ")");
  }
  dispatch_any(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using V = decltype(comparable(T{}));
    const T* lhs = a.data_as<T>();
    const T* rhs = b.data_as<T>();
    bool* result = out.data_as<bool>();
    with_compare_op<V>(op, [&](auto fn) {
      if (a.is_contiguous() && b.is_contiguous()) {
        const int64_t n = out.numel();
        for (int64_t i = 0; i < n; ++i) result[i] = fn(comparable(lhs[i]), comparable(rhs[i]));
        return;
      }
      for_each_element<3>(out.shape(), {&a.strides(), &b.strides(), &out.strides()}, [&](auto p) {
        result[p[2]] = fn(comparable(lhs[p[0]]), comparable(rhs[p[1]]));
      });
    });
  });
}

void CpuKernels::predicate(PredicateOp op, const Tensor& x, const Tensor& out) {
  check_bool_output("predicate", out);
  dispatch_any(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data_as<T>();
    bool* result = out.data_as<bool>();
    for_each_element<2>(x.shape(), {&x.strides(), &out.strides()},
                        [&](auto p) { result[p[1]] = apply_predicate(op, comparable(in[p[0]])); });
  });
}

}  // namespace tg::cpu
