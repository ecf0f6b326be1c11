// The CPU's comparison and predicate kernels (cpu/compare.cpp) on hand-written truth tables, in
// every dtype, contiguous and broadcast; and the new unary kernels on hand-computed values.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/tensor.h"
#include "tapegrad/ops/views.h"

using namespace tg;

namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<int64_t> compare(CompareOp op, const Tensor& a, const Tensor& b) {
  const Tensor out = empty(a.shape(), DType::b8);
  kernels(kCPU).compare(op, a, b, out);
  return out.to_host_i64();
}

std::vector<int64_t> predicate(PredicateOp op, const Tensor& x) {
  const Tensor out = empty(x.shape(), DType::b8);
  kernels(kCPU).predicate(op, x, out);
  return out.to_host_i64();
}

using Bits = std::vector<int64_t>;

}  // namespace

TEST_CASE("cpu compare: the truth table of each op in every dtype", "[cpu][compare]") {
  // Pairs (a, b): less, equal, greater, both zero, zero and nonzero.
  const std::vector<double> a_values = {1, 2, 3, 0, 0};
  const std::vector<double> b_values = {2, 2, 1, 0, 5};
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64, DType::i8,
                      DType::i32}) {
    INFO(dtype_name(dtype));
    const Tensor a = from_values(a_values, {5}, dtype), b = from_values(b_values, {5}, dtype);
    CHECK(compare(CompareOp::eq, a, b) == Bits{0, 1, 0, 1, 0});
    CHECK(compare(CompareOp::ne, a, b) == Bits{1, 0, 1, 0, 1});
    CHECK(compare(CompareOp::lt, a, b) == Bits{1, 0, 0, 0, 1});
    CHECK(compare(CompareOp::le, a, b) == Bits{1, 1, 0, 1, 1});
    CHECK(compare(CompareOp::gt, a, b) == Bits{0, 0, 1, 0, 0});
    CHECK(compare(CompareOp::ge, a, b) == Bits{0, 1, 1, 1, 0});
    CHECK(compare(CompareOp::logical_and, a, b) == Bits{1, 1, 1, 0, 0});
    CHECK(compare(CompareOp::logical_or, a, b) == Bits{1, 1, 1, 0, 1});
  }
}

TEST_CASE("cpu compare: bool inputs, false < true", "[cpu][compare]") {
  const Tensor a = from_bools({false, false, true, true}, {4});
  const Tensor b = from_bools({false, true, false, true}, {4});
  CHECK(compare(CompareOp::eq, a, b) == Bits{1, 0, 0, 1});
  CHECK(compare(CompareOp::lt, a, b) == Bits{0, 1, 0, 0});
  CHECK(compare(CompareOp::ge, a, b) == Bits{1, 0, 1, 1});
  CHECK(compare(CompareOp::logical_and, a, b) == Bits{0, 0, 0, 1});
  CHECK(compare(CompareOp::logical_or, a, b) == Bits{0, 1, 1, 1});
}

TEST_CASE("cpu compare: NaN, infinities and signed zeros as IEEE has them", "[cpu][compare]") {
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    INFO(dtype_name(dtype));
    const Tensor a = from_values({kNan, kNan, kInf, -0.0, kNan}, {5}, dtype);
    const Tensor b = from_values({kNan, 1.0, kInf, 0.0, 0.0}, {5}, dtype);
    CHECK(compare(CompareOp::eq, a, b) == Bits{0, 0, 1, 1, 0});
    CHECK(compare(CompareOp::ne, a, b) == Bits{1, 1, 0, 0, 1});
    CHECK(compare(CompareOp::lt, a, b) == Bits{0, 0, 0, 0, 0});
    CHECK(compare(CompareOp::ge, a, b) == Bits{0, 0, 1, 1, 0});
    // NaN is not zero: true in the logical ops; -0 is zero
    CHECK(compare(CompareOp::logical_and, a, b) == Bits{1, 1, 1, 0, 0});
    CHECK(compare(CompareOp::logical_or, a, b) == Bits{1, 1, 1, 0, 1});
    CHECK(predicate(PredicateOp::isnan, a) == Bits{1, 1, 0, 0, 1});
    CHECK(predicate(PredicateOp::isinf, a) == Bits{0, 0, 1, 0, 0});
    CHECK(predicate(PredicateOp::logical_not, a) == Bits{0, 0, 0, 1, 0});
  }
}

TEST_CASE("cpu predicates on integers and bool", "[cpu][compare]") {
  const Tensor index = from_indices({0, -3, 7}, {3});
  CHECK(predicate(PredicateOp::isnan, index) == Bits{0, 0, 0});
  CHECK(predicate(PredicateOp::isinf, index) == Bits{0, 0, 0});
  CHECK(predicate(PredicateOp::logical_not, index) == Bits{1, 0, 0});
  CHECK(predicate(PredicateOp::logical_not, from_bools({true, false}, {2})) == Bits{0, 1});
}

TEST_CASE("cpu compare: broadcast and transposed operands", "[cpu][compare]") {
  // a [2, 3] transposed from [3, 2]; b a row [3] broadcast over the 2 rows
  const Tensor a = from_values({1, 4, 2, 5, 3, 6}, {3, 2}).transpose(0, 1);  // [[1, 2, 3], [4, 5, 6]]
  const Tensor b = expand_untaped(from_values({2, 2, 6}, {3}), {2, 3});
  CHECK(compare(CompareOp::lt, a, b) == Bits{1, 0, 1, 0, 0, 0});
  CHECK(compare(CompareOp::eq, a, b) == Bits{0, 1, 0, 0, 0, 1});
  const Tensor empty_a = zeros({0, 3}), empty_b = zeros({0, 3});
  CHECK(compare(CompareOp::eq, empty_a, empty_b).empty());
}

TEST_CASE("cpu compare refuses a non-bool output and mixed dtypes", "[cpu][compare]") {
  const Tensor a = from_values({1, 2}, {2});
  const Tensor not_bool = empty({2});
  CHECK_THROWS_WITH(kernels(kCPU).compare(CompareOp::eq, a, a, not_bool),
                    Catch::Contains("not bool"));
  const Tensor out = empty({2}, DType::b8);
  CHECK_THROWS_WITH(kernels(kCPU).compare(CompareOp::eq, a, a.to(DType::f64), out),
                    Catch::Contains("two dtypes"));
}

TEST_CASE("cpu where moves elements of every dtype", "[cpu][compare]") {
  const Tensor condition = from_bools({true, false, true}, {3});
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64, DType::b8,
                      DType::i8, DType::i32}) {
    INFO(dtype_name(dtype));
    const Tensor a = from_values({1, 1, 1}, {3}, dtype), b = from_values({0, 0, 0}, {3}, dtype);
    const Tensor out = empty({3}, dtype);
    kernels(kCPU).where(condition, a, b, out);
    CHECK(out.to_host_f64() == std::vector<double>{1, 0, 1});
  }
}

TEST_CASE("cpu unary: sin, cos, abs, sign and the clamps by hand", "[cpu][compare]") {
  const auto unary = [](UnaryOp op, const std::vector<double>& values, double scalar = 0) {
    const Tensor x = from_values(values, {static_cast<int64_t>(values.size())}, DType::f64);
    const Tensor out = empty(x.shape(), DType::f64);
    kernels(kCPU).unary(op, x, scalar, out);
    return out.to_host_f64();
  };
  const double pi = 3.14159265358979323846;
  const std::vector<double> sines = unary(UnaryOp::sin, {0, pi / 6, -pi / 2});
  CHECK(sines[0] == 0);
  CHECK(sines[1] == Approx(0.5).epsilon(1e-15));
  CHECK(sines[2] == -1);
  const std::vector<double> cosines = unary(UnaryOp::cos, {0, pi / 3, pi});
  CHECK(cosines[0] == 1);
  CHECK(cosines[1] == Approx(0.5).epsilon(1e-15));
  CHECK(cosines[2] == -1);
  CHECK(unary(UnaryOp::abs, {-2.5, 0, 3}) == std::vector<double>{2.5, 0, 3});
  CHECK(unary(UnaryOp::sign, {-2.5, 0, 3, -kInf}) == std::vector<double>{-1, 0, 1, -1});
  CHECK(unary(UnaryOp::clamp_min, {-1, 0.5, 2}, 0.5) == std::vector<double>{0.5, 0.5, 2});
  CHECK(unary(UnaryOp::clamp_max, {-1, 0.5, 2}, 0.5) == std::vector<double>{-1, 0.5, 0.5});
  for (UnaryOp op : {UnaryOp::sign, UnaryOp::clamp_min, UnaryOp::clamp_max, UnaryOp::abs}) {
    CHECK(std::isnan(unary(op, {kNan}, 1.0)[0]));  // NaN stays NaN
  }
}
