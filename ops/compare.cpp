// Comparisons and logic: both inputs promoted to one dtype, broadcast, one kernel call, a bool
// result on no tape. triu and tril: a keep-mask from two aranges, applied with where.
#include "tapegrad/ops/compare.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/op_registry.h"
#include "tapegrad/ops/elementwise.h"
#include "tapegrad/ops/mask.h"
#include "tapegrad/ops/views.h"

namespace tg {
namespace {

// PyTorch's categories for type promotion: a bool meets an integer as the integer, an integer
// meets a floating type as the floating type.
int promotion_category(DType dtype) {
  if (dtype == DType::b8) return 0;
  return is_floating(dtype) ? 2 : 1;
}

// The dtype two tensors of dtypes a and b compare in (torch.promote_types).
DType promoted_dtype(DType a, DType b) {
  if (a == b) return a;
  const int category_a = promotion_category(a), category_b = promotion_category(b);
  if (category_a != category_b) return category_a > category_b ? a : b;
  if (is_half(a) && is_half(b)) return DType::f32;  // f16 and bf16: neither holds the other
  return dtype_size(a) >= dtype_size(b) ? a : b;    // the wider integer or floating type
}

// Whether an integer or bool tensor of this dtype holds `value` exactly.
bool holds_whole_number(DType dtype, double value) {
  if (value != std::trunc(value)) return false;  // a fraction, or NaN
  switch (dtype) {
    case DType::b8: return value == 0 || value == 1;
    case DType::i8: return value >= -128 && value <= 127;
    case DType::i32: return value >= -2147483648.0 && value <= 2147483647.0;
    case DType::i64: return value >= -0x1p63 && value < 0x1p63;  // 2^63 itself is one too many
    default: return false;
  }
}

// The dtype a tensor and a number compare in: a floating tensor's own (the number rounded to it,
// as PyTorch rounds a Python float), an integer tensor's when the number is one of its values,
// else f64 (so that i64 counts < 0.5 compares 0 < 0.5, not 0 < 0).
DType dtype_with_number(DType tensor_dtype, double value) {
  if (is_floating(tensor_dtype) || holds_whole_number(tensor_dtype, value)) return tensor_dtype;
  return DType::f64;
}

// t in `dtype`, converted on its device and recorded on no tape (comparisons have no gradient).
Tensor in_dtype(const Tensor& t, DType dtype) { return t.dtype() == dtype ? t : copy_of(t, dtype); }

void check_defined(const char* op, std::initializer_list<Tensor> inputs) {
  for (const Tensor& t : inputs) TG_CHECK(t.defined(), "op '", op, "': undefined tensor");
}

// out (bool) = a `kind` b, elementwise over the broadcast shape.
Tensor compared(CompareOp kind, const Tensor& a, const Tensor& b, const char* op) {
  check_defined(op, {a, b});
  check_same_device(op, {a, b});
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
  const DType common = promoted_dtype(a.dtype(), b.dtype());
  Tensor out = empty(shape, DType::b8, a.device());
  kernels(a.device()).compare(kind, expand_untaped(in_dtype(a, common), shape),
                              expand_untaped(in_dtype(b, common), shape), out);
  return out;
}

Tensor compared_with_number(CompareOp kind, const Tensor& a, double b, const char* op) {
  check_defined(op, {a});
  const DType common = dtype_with_number(a.dtype(), b);
  return compared(kind, in_dtype(a, common), scalar(b, common, a.device()), op);
}

Tensor predicate_of(PredicateOp kind, const Tensor& x, const char* op) {
  check_defined(op, {x});
  Tensor out = empty(x.shape(), DType::b8, x.device());
  kernels(x.device()).predicate(kind, x, out);
  return out;
}

// ~, & and |: PyTorch's are bitwise on integers, logical only on bool, and tapegrad has no
// bitwise ops, so anything but bool is refused rather than read as "is not zero".
void check_bool_operands(const char* op, const char* spelled, const char* instead,
                         std::initializer_list<Tensor> inputs) {
  check_defined(op, inputs);
  bool all_bool = true;
  std::string got;
  for (const Tensor& t : inputs) {
    all_bool = all_bool && t.dtype() == DType::b8;
    got += std::string(got.empty() ? "" : " and ") + dtype_name(t.dtype()) + " " + shape_str(t.shape());
  }
  TG_CHECK(all_bool, "op '", op, "' (", spelled, "): needs bool tensors, got ", got,
           " (on other dtypes PyTorch's ", spelled, " is bitwise, which tapegrad does not have; use ",
           instead, ")");
}

// The keep-mask of triu (upper) or tril, bool [rows, cols]: column j against row i + diagonal.
Tensor triangle_mask(int64_t rows, int64_t cols, int64_t diagonal, bool upper, Device device) {
  // Beyond the matrix's corners a diagonal keeps everything or nothing, as the corner's own does;
  // clamping it there keeps i + diagonal a small whole number, exact in f64.
  const int64_t shift = std::clamp(diagonal, -rows, cols);
  const Tensor column = arange(cols, DType::f64, device);  // j, [cols]
  const Tensor shifted_row = add(arange(rows, DType::f64, device), static_cast<double>(shift))
                                 .unsqueeze(1);  // i + diagonal, [rows, 1]
  // triu keeps j - i >= diagonal, tril j - i <= diagonal
  return upper ? ge(column, shifted_row) : le(column, shifted_row);
}

Tensor triangle(const Tensor& x, int64_t diagonal, bool upper, const char* op) {
  check_defined(op, {x});
  TG_CHECK(x.dim() >= 2, "op '", op, "': needs a matrix or a batch of them (2 or more dims), got ",
           dtype_name(x.dtype()), " of shape ", shape_str(x.shape()));
  const Tensor keep = triangle_mask(x.size(-2), x.size(-1), diagonal, upper, x.device());
  // where records the node: d out/dx = keep, so the gradient is 0 where x was zeroed
  return where(keep, x, scalar(0, x.dtype(), x.device()));
}

}  // namespace

Tensor eq(const Tensor& a, const Tensor& b) { return compared(CompareOp::eq, a, b, "eq"); }
Tensor ne(const Tensor& a, const Tensor& b) { return compared(CompareOp::ne, a, b, "ne"); }
Tensor lt(const Tensor& a, const Tensor& b) { return compared(CompareOp::lt, a, b, "lt"); }
Tensor le(const Tensor& a, const Tensor& b) { return compared(CompareOp::le, a, b, "le"); }
Tensor gt(const Tensor& a, const Tensor& b) { return compared(CompareOp::gt, a, b, "gt"); }
Tensor ge(const Tensor& a, const Tensor& b) { return compared(CompareOp::ge, a, b, "ge"); }

Tensor eq(const Tensor& a, double b) { return compared_with_number(CompareOp::eq, a, b, "eq"); }
Tensor ne(const Tensor& a, double b) { return compared_with_number(CompareOp::ne, a, b, "ne"); }
Tensor lt(const Tensor& a, double b) { return compared_with_number(CompareOp::lt, a, b, "lt"); }
Tensor le(const Tensor& a, double b) { return compared_with_number(CompareOp::le, a, b, "le"); }
Tensor gt(const Tensor& a, double b) { return compared_with_number(CompareOp::gt, a, b, "gt"); }
Tensor ge(const Tensor& a, double b) { return compared_with_number(CompareOp::ge, a, b, "ge"); }

// Promoting before the logic keeps every nonzero value nonzero: the common dtype holds both.
Tensor logical_and(const Tensor& a, const Tensor& b) {
  return compared(CompareOp::logical_and, a, b, "logical_and");
}
Tensor logical_or(const Tensor& a, const Tensor& b) {
  return compared(CompareOp::logical_or, a, b, "logical_or");
}
Tensor logical_not(const Tensor& x) { return predicate_of(PredicateOp::logical_not, x, "logical_not"); }

Tensor isnan(const Tensor& x) { return predicate_of(PredicateOp::isnan, x, "isnan"); }
Tensor isinf(const Tensor& x) { return predicate_of(PredicateOp::isinf, x, "isinf"); }

Tensor triu(const Tensor& x, int64_t diagonal) { return triangle(x, diagonal, true, "triu"); }
Tensor tril(const Tensor& x, int64_t diagonal) { return triangle(x, diagonal, false, "tril"); }

Tensor operator~(const Tensor& mask) {
  check_bool_operands("not", "~x", "logical_not(x), or x == 0", {mask});
  return predicate_of(PredicateOp::logical_not, mask, "not");
}

Tensor operator&(const Tensor& a, const Tensor& b) {
  check_bool_operands("and", "a & b", "logical_and(a, b), or compare first: (a != 0) & (b != 0)", {a, b});
  return compared(CompareOp::logical_and, a, b, "and");
}

Tensor operator|(const Tensor& a, const Tensor& b) {
  check_bool_operands("or", "a | b", "logical_or(a, b), or compare first: (a != 0) | (b != 0)", {a, b});
  return compared(CompareOp::logical_or, a, b, "or");
}

// Not differentiable: they record nothing, and record() refuses their names. triu and tril
// record where's node, so they need no name of their own.
const OpRegistration compare_ops_without_gradient({"eq", "ne", "lt", "le", "gt", "ge", "logical_not",
                                                   "logical_and", "logical_or", "isnan", "isinf"},
                                                  OpGradient::none);

}  // namespace tg
