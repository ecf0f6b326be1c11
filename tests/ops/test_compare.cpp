// Comparisons, logic, isnan/isinf and triu/tril (ops/compare.h): hand-computed truth tables over
// every dtype, NaN, inf and -0, broadcasting, PyTorch's promotions, numbers on either side, strided
// and empty inputs; triu/tril against a plain loop and through f64 gradcheck; the errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/gradcheck.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/ops/ops.h"

using namespace tg;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// A bool tensor's elements as '1' and '0', in row-major order.
std::string bits(const Tensor& t) {
  REQUIRE(t.dtype() == DType::b8);
  std::string text;
  for (double value : t.to_host_f64()) text += value != 0 ? '1' : '0';
  return text;
}

// The values of triu (upper) or tril of a row-major [batch, rows, cols] by the definition:
// keep row i, column j where j - i >= diagonal (triu) or j - i <= diagonal (tril).
std::vector<double> triangle_by_hand(const std::vector<double>& values, int64_t rows, int64_t cols,
                                     int64_t diagonal, bool upper) {
  std::vector<double> out(values.size());
  for (size_t p = 0; p < values.size(); ++p) {
    const int64_t i = static_cast<int64_t>(p) / cols % rows, j = static_cast<int64_t>(p) % cols;
    // j - i as a double: diagonals near int64's ends must not overflow the difference
    const double offset = static_cast<double>(j) - static_cast<double>(i);
    const bool keep = upper ? offset >= static_cast<double>(diagonal) : offset <= static_cast<double>(diagonal);
    out[p] = keep ? values[p] : 0;
  }
  return out;
}

}  // namespace

TEST_CASE("compare: truth tables of every op on the floating dtypes, NaN, inf and -0 included",
          "[compare]") {
  const std::vector<double> a_values{1, 2, kNaN, kInf, -0.0, -kInf, 3, 0, 4};
  const std::vector<double> b_values{2, 2, kNaN, kInf, 0.0, 1, kNaN, 5, -1};
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    INFO("dtype " << dtype_name(dtype));
    const Tensor a = from_values(a_values, {9}, dtype);
    const Tensor b = from_values(b_values, {9}, dtype);
    REQUIRE(bits(eq(a, b)) == "010110000");  // NaN == NaN is false, -0 == 0, inf == inf
    REQUIRE(bits(ne(a, b)) == "101001111");  // NaN != NaN is true
    REQUIRE(bits(lt(a, b)) == "100001010");  // NaN < x is false
    REQUIRE(bits(le(a, b)) == "110111010");
    REQUIRE(bits(gt(a, b)) == "000000001");
    REQUIRE(bits(ge(a, b)) == "010110001");
    REQUIRE(bits(logical_and(a, b)) == "111101101");  // NaN is not zero: true
    REQUIRE(bits(logical_or(a, b)) == "111101111");
    REQUIRE(bits(logical_not(a)) == "000010010");  // -0 is zero
    REQUIRE(bits(isnan(a)) == "001000000");
    REQUIRE(bits(isinf(a)) == "000101000");
    REQUIRE(bits(a == b) == bits(eq(a, b)));
    REQUIRE(bits(a != b) == bits(ne(a, b)));
    REQUIRE(bits(a < b) == bits(lt(a, b)));
    REQUIRE(bits(a <= b) == bits(le(a, b)));
    REQUIRE(bits(a > b) == bits(gt(a, b)));
    REQUIRE(bits(a >= b) == bits(ge(a, b)));
  }
}

TEST_CASE("compare: truth tables of every op on the integer dtypes, at their ends", "[compare]") {
  const std::vector<double> a_values{1, 2, -3, 0, 0, 7, -128, 127};
  const std::vector<double> b_values{2, 2, -4, 0, 5, 7, 127, -128};
  for (DType dtype : {DType::i8, DType::i32, DType::i64}) {
    INFO("dtype " << dtype_name(dtype));
    const Tensor a = from_values(a_values, {8}, dtype);
    const Tensor b = from_values(b_values, {8}, dtype);
    REQUIRE(bits(eq(a, b)) == "01010100");
    REQUIRE(bits(ne(a, b)) == "10101011");
    REQUIRE(bits(lt(a, b)) == "10001010");
    REQUIRE(bits(le(a, b)) == "11011110");
    REQUIRE(bits(gt(a, b)) == "00100001");
    REQUIRE(bits(ge(a, b)) == "01110101");
    REQUIRE(bits(logical_and(a, b)) == "11100111");
    REQUIRE(bits(logical_or(a, b)) == "11101111");
    REQUIRE(bits(logical_not(a)) == "00011000");
    REQUIRE(bits(isnan(a)) == "00000000");  // integers are never NaN or inf
    REQUIRE(bits(isinf(a)) == "00000000");
  }
  // i64 compares as i64, exactly: 2^53 + 1 and 2^53 are one f64 but two i64 values.
  const Tensor big = from_indices({9007199254740993, -9223372036854775807 - 1}, {2});
  const Tensor bigger = from_indices({9007199254740992, 9223372036854775807}, {2});
  REQUIRE(bits(eq(big, bigger)) == "00");
  REQUIRE(bits(gt(big, bigger)) == "10");
  REQUIRE(bits(big == 9007199254740992.0) == "00");  // the number is an i64 value: compared as one
  REQUIRE(bits(big > 9007199254740992.0) == "10");
}

TEST_CASE("compare: truth tables on bool tensors", "[compare]") {
  const Tensor a = from_bools({false, false, true, true}, {4});
  const Tensor b = from_bools({false, true, false, true}, {4});
  REQUIRE(bits(eq(a, b)) == "1001");
  REQUIRE(bits(ne(a, b)) == "0110");
  REQUIRE(bits(lt(a, b)) == "0100");  // false < true
  REQUIRE(bits(le(a, b)) == "1101");
  REQUIRE(bits(gt(a, b)) == "0010");
  REQUIRE(bits(ge(a, b)) == "1011");
  REQUIRE(bits(logical_and(a, b)) == "0001");
  REQUIRE(bits(logical_or(a, b)) == "0111");
  REQUIRE(bits(logical_not(a)) == "1100");
  REQUIRE(bits(a & b) == "0001");
  REQUIRE(bits(a | b) == "0111");
  REQUIRE(bits(~a) == "1100");
  REQUIRE(bits(isnan(a)) == "0000");
  REQUIRE(bits(isinf(a)) == "0000");
  REQUIRE(bits(~(a & b) | (a == b)) == "1111");
}

TEST_CASE("compare: shapes broadcast both ways, 0-d included", "[compare]") {
  const Tensor column = from_values({1, 2}, {2, 1});
  const Tensor row = from_values({0, 1, 2}, {3});
  const Tensor left = lt(column, row);
  REQUIRE(left.shape() == Shape{2, 3});
  REQUIRE(bits(left) == "001000");  // 1 < {0, 1, 2}; 2 < {0, 1, 2}
  const Tensor right = lt(row, column);
  REQUIRE(right.shape() == Shape{2, 3});
  REQUIRE(bits(right) == "100110");  // {0, 1, 2} < 1; {0, 1, 2} < 2
  const Tensor with_0d = ge(row, scalar(1));
  REQUIRE(with_0d.shape() == Shape{3});
  REQUIRE(bits(with_0d) == "011");
  REQUIRE(bits(logical_or(from_bools({true, false}, {2, 1}), from_bools({false, true, false}, {1, 3}))) ==
          "111010");
  REQUIRE(eq(scalar(2), scalar(2)).shape() == Shape{});
  REQUIRE(bits(eq(scalar(2), scalar(2))) == "1");
}

TEST_CASE("compare: two dtypes are promoted as PyTorch promotes them", "[compare]") {
  // i64 with f32 compares in f32: 1 < 1.5 (read as i64, 1.5 would be 1, and 1 < 1 false).
  REQUIRE(bits(lt(from_indices({1, 2, 3}, {3}), from_values({1.5, 2, 2.5}, {3}))) == "100");
  REQUIRE(bits(from_values({1.5, 2, 2.5}, {3}) > from_indices({1, 2, 3}, {3})) == "100");
  // bool with i64 compares in i64: true == 2 is false (read as bool, 2 would be true).
  REQUIRE(bits(eq(from_bools({true, false, true}, {3}), from_indices({1, 0, 2}, {3}))) == "110");
  // i8 with i32 compares in i32: 200 stays 200 (as i8 it would wrap to -56).
  REQUIRE(bits(lt(from_values({100}, {1}, DType::i8), from_values({200}, {1}, DType::i32))) == "1");
  // f16 with bf16 compares in f32: 0.1 is 0.0999755859375 in f16 and 0.10009765625 in bf16
  // (f16's value rounded to bf16 is bf16's, so comparing in bf16 would call them equal).
  const Tensor tenth_f16 = from_values({0.1}, {1}, DType::f16);
  const Tensor tenth_bf16 = from_values({0.1}, {1}, DType::bf16);
  REQUIRE(bits(eq(tenth_f16, tenth_bf16)) == "0");
  REQUIRE(bits(lt(tenth_f16, tenth_bf16)) == "1");
  // f32 with f64 compares in f64: f32's 0.1 is not f64's.
  REQUIRE(bits(eq(from_values({0.1}, {1}), from_values({0.1}, {1}, DType::f64))) == "0");
  // logic after promotion keeps every nonzero value nonzero: 0.5 and NaN are true.
  REQUIRE(bits(logical_and(from_values({kNaN, 0, 0.5, 0.5}, {4}), from_indices({1, 1, 0, 3}, {4}))) == "1001");
  REQUIRE(bits(logical_or(from_bools({false, false}, {2}), from_values({0, 0.25}, {2}, DType::f16))) == "01");
}

TEST_CASE("compare: a number on either side, in the tensor's dtype or in f64", "[compare]") {
  const Tensor x = from_values({-1, 0, 2, kNaN}, {4});
  REQUIRE(bits(x == 0) == "0100");
  REQUIRE(bits(0 == x) == "0100");
  REQUIRE(bits(x != 0) == "1011");
  REQUIRE(bits(0 != x) == "1011");
  REQUIRE(bits(x < 0) == "1000");
  REQUIRE(bits(0 < x) == "0010");  // 0 < x is x > 0
  REQUIRE(bits(x <= 0) == "1100");
  REQUIRE(bits(0 <= x) == "0110");
  REQUIRE(bits(x > 0) == "0010");
  REQUIRE(bits(0 > x) == "1000");
  REQUIRE(bits(x >= 0) == "0110");
  REQUIRE(bits(0 >= x) == "1100");
  REQUIRE(bits(x == kNaN) == "0000");
  REQUIRE(bits(x != kNaN) == "1111");
  REQUIRE(bits(x < kInf) == "1110");
  REQUIRE(bits(eq(x, -0.0)) == "0100");
  // A number is rounded to a floating tensor's dtype, as PyTorch rounds a Python float.
  REQUIRE(bits(from_values({0.1}, {1}, DType::f16) == 0.1) == "1");
  REQUIRE(bits(from_values({0.1}, {1}, DType::bf16) == 0.1) == "1");
  // An integer tensor and a fraction compare in f64: {0, 1} < 0.5 is {true, false}.
  const Tensor counts = from_indices({0, 1, -1}, {3});
  REQUIRE(bits(counts < 0.5) == "101");
  REQUIRE(bits(counts > -0.5) == "110");
  REQUIRE(bits(counts == 0.5) == "000");
  REQUIRE(bits(counts == 1) == "010");
  // A number outside an integer dtype's range compares in f64 too (as i8, 200 would wrap).
  const Tensor small = from_values({-128, 0, 127}, {3}, DType::i8);
  REQUIRE(bits(small < 200) == "111");
  REQUIRE(bits(small > -129) == "111");
  REQUIRE(bits(small == 127) == "001");
  REQUIRE(bits(from_values({5}, {1}, DType::i32) < 3e9) == "1");
  // A bool tensor holds 0 and 1; 2 is compared in f64.
  const Tensor flags = from_bools({true, false}, {2});
  REQUIRE(bits(flags == 1) == "10");
  REQUIRE(bits(flags == 2) == "00");
  REQUIRE(bits(flags != 2) == "11");
  REQUIRE(bits(flags < 0.5) == "01");
}

TEST_CASE("compare: strided, transposed and expanded inputs read the right elements", "[compare]") {
  const Tensor m = from_values({0, 1, 2, 3, 4, 5}, {2, 3});
  const Tensor mt = m.transpose(0, 1);  // [3, 2]: {0, 3}, {1, 4}, {2, 5}
  const Tensor ref = from_values({0, 4, 1, 4, 3, 5}, {3, 2});
  REQUIRE_FALSE(mt.is_contiguous());
  REQUIRE(bits(eq(mt, ref)) == "101101");
  REQUIRE(bits(lt(mt, ref)) == "010010");
  REQUIRE(bits(ref > mt) == "010010");
  REQUIRE(bits(mt >= 3) == "010101");
  REQUIRE(bits(logical_not(mt)) == "100000");
  const Tensor columns = m.narrow(1, 1, 2);  // {1, 2}, {4, 5}
  REQUIRE(bits(columns == from_values({1, 5}, {2})) == "1001");
  REQUIRE(bits(isnan(from_values({kNaN, 1, 2, kNaN}, {2, 2}).transpose(0, 1))) == "1001");
  const Tensor expanded = from_values({2}, {1}).expand({3});
  REQUIRE(bits(expanded == from_values({1, 2, 3}, {3})) == "010");
}

TEST_CASE("compare: empty tensors give empty bool tensors", "[compare]") {
  const Tensor none = zeros({0, 3});
  REQUIRE(eq(none, zeros({3})).shape() == Shape{0, 3});
  REQUIRE(eq(none, zeros({3})).dtype() == DType::b8);
  REQUIRE(lt(zeros({1, 0}), zeros({4, 1})).shape() == Shape{4, 0});
  REQUIRE((none == 0).numel() == 0);
  REQUIRE(logical_and(none, from_indices({1, 2, 3}, {3})).shape() == Shape{0, 3});
  REQUIRE(isnan(none).shape() == Shape{0, 3});
  REQUIRE(logical_not(zeros({0}, DType::i64)).numel() == 0);
  REQUIRE(triu(zeros({2, 0, 4})).shape() == Shape{2, 0, 4});
  REQUIRE(tril(zeros({3, 0}, DType::i64), 1).shape() == Shape{3, 0});
}

TEST_CASE("compare: results are bool, carry no gradient and record nothing", "[compare]") {
  const Tensor x = from_values({1, 2, 3}, {3}, DType::f64).requires_grad_();
  for (const Tensor& result : {eq(x, x), x < 2, 2 < x, logical_not(x), logical_and(x, x), isnan(x),
                               isinf(x)}) {
    REQUIRE(result.dtype() == DType::b8);
    REQUIRE_FALSE(result.requires_grad());
    REQUIRE(result.grad_fn() == nullptr);
  }
  // PyTorch's attention idiom: fill where a mask built by comparison is true.
  const Tensor scores = from_values({1, 2, 3, 4}, {2, 2}, DType::f64).requires_grad_();
  const Tensor keep = from_indices({1, 0}, {2});
  const Tensor filled = masked_fill(scores, keep == 0, -kInf);
  REQUIRE(filled.to_host_f64() == std::vector<double>{1, -kInf, 3, -kInf});
}

TEST_CASE("compare: triu and tril equal the definition for every diagonal, dtype and batch", "[compare][triu]") {
  const int64_t big = std::numeric_limits<int64_t>::max();
  const int64_t small = std::numeric_limits<int64_t>::min();
  for (const Shape& shape : {Shape{3, 4}, Shape{4, 3}, Shape{2, 3, 4}, Shape{2, 1, 3, 3}, Shape{1, 5}}) {
    const int64_t rows = shape[shape.size() - 2], cols = shape[shape.size() - 1];
    std::vector<double> values(static_cast<size_t>(numel(shape)));
    for (size_t p = 0; p < values.size(); ++p) values[p] = static_cast<double>(p + 1);
    for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::i64, DType::i32, DType::i8}) {
      const Tensor x = from_values(values, shape, dtype);
      for (int64_t diagonal : {small, -5L, -3L, -2L, -1L, 0L, 1L, 2L, 3L, 5L, big}) {
        INFO("shape " << shape_str(shape) << " dtype " << dtype_name(dtype) << " diagonal " << diagonal);
        const Tensor upper = triu(x, diagonal), lower = tril(x, diagonal);
        REQUIRE(upper.dtype() == dtype);
        REQUIRE(upper.shape() == shape);
        REQUIRE(upper.to_host_f64() == triangle_by_hand(values, rows, cols, diagonal, true));
        REQUIRE(lower.to_host_f64() == triangle_by_hand(values, rows, cols, diagonal, false));
      }
    }
  }
  // By hand: the mask of a causal attention, and its complement.
  REQUIRE(bits(triu(ones({3, 3}), 1) == 0) == "100110111");
  REQUIRE(bits(triu(ones({3, 3}, DType::b8), 1)) == "011001000");
  REQUIRE(bits(tril(ones({3, 3}, DType::b8))) == "100110111");
  REQUIRE(tril(from_values({1, 2, 3, 4, 5, 6}, {2, 3}), -1).to_host_f64() == std::vector<double>{0, 0, 0, 4, 0, 0});
  // A transposed input: triu of [[1, 3], [2, 4]].
  REQUIRE(triu(from_values({1, 2, 3, 4}, {2, 2}).transpose(0, 1)).to_host_f64() == std::vector<double>{1, 3, 0, 4});
}

TEST_CASE("compare: triu and tril pass the gradient where they keep x (f64 gradcheck)", "[compare][triu]") {
  for (int64_t diagonal : {-2L, -1L, 0L, 1L, 3L}) {
    INFO("diagonal " << diagonal);
    const Tensor x = random_leaf({2, 3, 4});
    REQUIRE(gradcheck([diagonal](const std::vector<Tensor>& in) { return triu(in[0], diagonal) * in[0]; }, {x}).passed);
    REQUIRE(gradcheck([diagonal](const std::vector<Tensor>& in) { return tril(in[0], diagonal) * in[0]; }, {x}).passed);
  }
  // The gradient of sum(triu(x)) is the keep-mask itself.
  const Tensor x = from_values({1, 2, 3, 4, 5, 6}, {2, 3}, DType::f64).requires_grad_();
  sum(triu(x)).backward();
  REQUIRE(x.grad().to_host_f64() == std::vector<double>{1, 1, 1, 0, 1, 1});
  const Tensor y = from_values({1, 2, 3, 4, 5, 6}, {3, 2}, DType::f64).requires_grad_();
  sum(tril(y, -1) * 2.0).backward();
  REQUIRE(y.grad().to_host_f64() == std::vector<double>{0, 0, 2, 0, 2, 2});
}

TEST_CASE("compare: errors name the op and the shapes, never a kernel", "[compare][errors]") {
  const Tensor a = zeros({2, 3});
  REQUIRE_THROWS_WITH(lt(a, zeros({4})), Catch::Contains("op 'lt': shapes [2, 3] and [4] do not broadcast"));
  REQUIRE_THROWS_WITH(a == zeros({4}), Catch::Contains("op 'eq': shapes [2, 3] and [4]"));
  REQUIRE_THROWS_WITH(logical_or(a, zeros({3, 2})), Catch::Contains("op 'logical_or': shapes [2, 3] and [3, 2]"));
  REQUIRE_THROWS_WITH(eq(Tensor(), a), Catch::Contains("op 'eq': undefined tensor"));
  REQUIRE_THROWS_WITH(Tensor() > 1.0, Catch::Contains("op 'gt': undefined tensor"));
  REQUIRE_THROWS_WITH(isnan(Tensor()), Catch::Contains("op 'isnan': undefined tensor"));
  // ~, & and | are PyTorch's logical operators on bool tensors only (bitwise elsewhere).
  const Tensor flags = from_bools({true, false, true, false, true, false}, {2, 3});
  REQUIRE_THROWS_WITH(a & flags, Catch::Contains("op 'and' (a & b): needs bool tensors, got f32 [2, 3] and bool [2, 3]") &&
                                     Catch::Contains("logical_and"));
  REQUIRE_THROWS_WITH(from_indices({1}, {1}) | from_indices({0}, {1}),
                      Catch::Contains("op 'or' (a | b): needs bool tensors, got i64 [1] and i64 [1]"));
  REQUIRE_THROWS_WITH(~a, Catch::Contains("op 'not' (~x): needs bool tensors, got f32 [2, 3]") &&
                              Catch::Contains("logical_not"));
  REQUIRE_THROWS_WITH(flags & from_bools({true, false}, {2}), Catch::Contains("op 'and': shapes [2, 3] and [2]"));
  // triu and tril need a matrix.
  REQUIRE_THROWS_WITH(triu(zeros({3})), Catch::Contains("op 'triu': needs a matrix") && Catch::Contains("[3]"));
  REQUIRE_THROWS_WITH(tril(scalar(1, DType::i64)), Catch::Contains("op 'tril'") && Catch::Contains("i64 of shape []"));
  // masked_fill's hint names the comparisons that make a mask.
  REQUIRE_THROWS_WITH(masked_fill(a, zeros({2, 3}), 1.0), Catch::Contains("x == 0"));
}
