// Tensor handles: factories, values, item, strides, contiguity, printing.
#include <catch2/catch.hpp>

#include <sstream>
#include <string>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/tensor.h"
#include "tapegrad/ops/ops.h"

using namespace tg;

TEST_CASE("tensor: zeros, ones, full and scalar", "[tensor][factories]") {
  Tensor z = zeros({2, 3});
  REQUIRE(z.shape() == Shape{2, 3});
  REQUIRE(z.dtype() == DType::f32);
  REQUIRE(z.dim() == 2);
  REQUIRE(z.numel() == 6);
  REQUIRE(z.to_host_f64() == std::vector<double>(6, 0.0));
  REQUIRE(ones({4}, DType::f64).to_host_f64() == std::vector<double>(4, 1.0));
  REQUIRE(full({2, 2}, -2.5).to_host_f64() == std::vector<double>(4, -2.5));
  Tensor s = scalar(7.25);
  REQUIRE(s.shape() == Shape{});
  REQUIRE(s.dim() == 0);
  REQUIRE(s.numel() == 1);
  REQUIRE(s.item() == 7.25);
  // full in integer and bool dtypes.
  REQUIRE(full({3}, 4, DType::i64).to_host_i64() == std::vector<int64_t>{4, 4, 4});
  REQUIRE(full({2}, 1, DType::b8).to_host_i64() == std::vector<int64_t>{1, 1});
  // 0.1 is not exact in f32: the stored value is the nearest float.
  REQUIRE(full({1}, 0.1).item() == static_cast<double>(0.1f));
  REQUIRE(full({1}, 0.1, DType::f64).item() == 0.1);
}

TEST_CASE("tensor: from_values, from_indices, from_bools and arange", "[tensor][factories]") {
  Tensor v = from_values({1.5, -2, 3}, {3}, DType::f64);
  REQUIRE(v.dtype() == DType::f64);
  REQUIRE(v.to_host_f64() == std::vector<double>{1.5, -2, 3});
  REQUIRE(from_values({1, 2, 3, 4, 5, 6}, {2, 3}).to_host_f64() == std::vector<double>{1, 2, 3, 4, 5, 6});
  REQUIRE_THROWS_AS(from_values({1, 2, 3}, {2, 2}), Error);
  REQUIRE_THROWS_WITH(from_values({1, 2, 3}, {2, 2}), Catch::Contains("[2, 2]"));

  Tensor i = from_indices({3, -1, 7}, {3});
  REQUIRE(i.dtype() == DType::i64);
  REQUIRE(i.to_host_i64() == std::vector<int64_t>{3, -1, 7});
  REQUIRE(i.to_host_f64() == std::vector<double>{3, -1, 7});
  REQUIRE_THROWS_AS(from_indices({1}, {2}), Error);

  Tensor b = from_bools({true, false, true, true}, {2, 2});
  REQUIRE(b.dtype() == DType::b8);
  REQUIRE(b.to_host_i64() == std::vector<int64_t>{1, 0, 1, 1});
  REQUIRE_THROWS_AS(from_bools({true}, {2}), Error);

  REQUIRE(arange(5).to_host_f64() == std::vector<double>{0, 1, 2, 3, 4});
  REQUIRE(arange(3, DType::i64).to_host_i64() == std::vector<int64_t>{0, 1, 2});
  REQUIRE(arange(0).numel() == 0);
}

TEST_CASE("tensor: *_like factories copy shape and dtype", "[tensor][factories]") {
  Tensor t = full({2, 5}, 3, DType::f64);
  Tensor z = zeros_like(t), o = ones_like(t), e = empty_like(t);
  for (const Tensor& x : {z, o, e}) {
    REQUIRE(x.shape() == Shape{2, 5});
    REQUIRE(x.dtype() == DType::f64);
    REQUIRE(x.storage().get() != t.storage().get());
  }
  REQUIRE(z.to_host_f64() == std::vector<double>(10, 0.0));
  REQUIRE(o.to_host_f64() == std::vector<double>(10, 1.0));
}

TEST_CASE("tensor: empty rejects negative sizes and accepts zero sizes", "[tensor][factories]") {
  REQUIRE_THROWS_AS(empty({2, -1}), Error);
  REQUIRE_THROWS_AS(zeros({-3}), Error);
  Tensor e = empty({0, 4});
  REQUIRE(e.numel() == 0);
  REQUIRE(e.to_host_f64().empty());
}

TEST_CASE("tensor: item needs exactly one element", "[tensor]") {
  REQUIRE(from_values({4}, {1}).item() == 4.0);
  REQUIRE(from_values({4}, {1, 1, 1}).item() == 4.0);
  REQUIRE_THROWS_AS(zeros({2}).item(), Error);
  REQUIRE_THROWS_WITH(zeros({2, 3}).item(), Catch::Contains("[2, 3]") && Catch::Contains("6"));
  REQUIRE_THROWS_AS(zeros({0}).item(), Error);
  REQUIRE(from_indices({9}, {}).item() == 9.0);
}

TEST_CASE("tensor: contiguous strides, size() with negative dims", "[tensor][strides]") {
  REQUIRE(contiguous_strides({2, 3, 4}) == Shape{12, 4, 1});
  REQUIRE(contiguous_strides({5}) == Shape{1});
  REQUIRE(contiguous_strides({}) == Shape{});
  REQUIRE(numel({2, 3, 4}) == 24);
  REQUIRE(numel({}) == 1);
  REQUIRE(numel({3, 0}) == 0);
  Tensor t = zeros({2, 3, 4});
  REQUIRE(t.strides() == Shape{12, 4, 1});
  REQUIRE(t.offset() == 0);
  REQUIRE(t.size(0) == 2);
  REQUIRE(t.size(-1) == 4);
  REQUIRE(t.size(-3) == 2);
  REQUIRE_THROWS_AS(t.size(3), Error);
  REQUIRE_THROWS_AS(t.size(-4), Error);
  REQUIRE(normalize_dim(-1, 3, "test") == 2);
  REQUIRE(normalize_dim(0, 3, "test") == 0);
  REQUIRE_THROWS_WITH(normalize_dim(5, 3, "myop"), Catch::Contains("myop"));
}

TEST_CASE("tensor: is_contiguous for views", "[tensor][strides]") {
  Tensor t = zeros({2, 3, 4});
  REQUIRE(t.is_contiguous());
  Tensor tr = t.transpose(0, 2);
  REQUIRE(tr.shape() == Shape{4, 3, 2});
  REQUIRE(tr.strides() == Shape{1, 4, 12});
  REQUIRE_FALSE(tr.is_contiguous());
  // Narrowing the first dim keeps contiguity; narrowing the last does not.
  REQUIRE(t.narrow(0, 1, 1).is_contiguous());
  REQUIRE_FALSE(t.narrow(2, 0, 2).is_contiguous());
  // Size-1 dims do not matter, whatever their stride.
  REQUIRE(zeros({3, 1}).transpose(0, 1).is_contiguous());
  REQUIRE(t.unsqueeze(1).is_contiguous());
  REQUIRE_FALSE(zeros({1, 4}).expand({3, 4}).is_contiguous());
  REQUIRE(zeros({4}).expand({1, 4}).is_contiguous());
}

TEST_CASE("tensor: values and data follow offset and strides", "[tensor]") {
  Tensor t = from_values({0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor col = t.narrow(1, 1, 1);  // [[1], [4]]
  REQUIRE(col.offset() == 1);
  REQUIRE(col.to_host_f64() == std::vector<double>{1, 4});
  REQUIRE(*col.data_as<float>() == 1.0f);
  REQUIRE(t.transpose(0, 1).to_host_f64() == std::vector<double>{0, 3, 1, 4, 2, 5});
  REQUIRE(t.narrow(0, 1, 1).to_host_f64() == std::vector<double>{3, 4, 5});
}

TEST_CASE("tensor: copies of a handle share everything", "[tensor]") {
  Tensor a = zeros({3});
  Tensor b = a;
  REQUIRE(a.same(b));
  b.data_as<float>()[1] = 5;
  REQUIRE(a.to_host_f64() == std::vector<double>{0, 5, 0});
  REQUIRE_FALSE(a.same(a.detach()));
  REQUIRE_FALSE(Tensor().defined());
  REQUIRE(a.defined());
}

TEST_CASE("tensor: to() converts dtypes and clone copies", "[tensor]") {
  Tensor x = from_values({1.75, -2.25, 3}, {3});
  Tensor d = x.to(DType::f64);
  REQUIRE(d.dtype() == DType::f64);
  REQUIRE(d.to_host_f64() == std::vector<double>{1.75, -2.25, 3});
  REQUIRE(x.to(DType::f32).same(x));  // same dtype: the same tensor
  // To integers truncates toward zero as a C++ cast does; to bool is "nonzero".
  REQUIRE(x.to(DType::i64).to_host_i64() == std::vector<int64_t>{1, -2, 3});
  REQUIRE(from_values({0, 2, -0.5}, {3}).to(DType::b8).to_host_i64() == std::vector<int64_t>{0, 1, 1});
  Tensor c = x.clone();
  REQUIRE(c.storage().get() != x.storage().get());
  REQUIRE(c.to_host_f64() == x.to_host_f64());
  c.data_as<float>()[0] = 100;
  REQUIRE(x.to_host_f64()[0] == 1.75);
}

TEST_CASE("tensor: gradient flows through to() and clone()", "[tensor][grad]") {
  // y = sum(x.to(f64) * 2): dy/dx = 2, and the gradient comes back as f32.
  Tensor x = from_values({1, 2}, {2}).requires_grad_();
  sum(x.to(DType::f64) * 2.0).backward();
  REQUIRE(x.grad().dtype() == DType::f32);
  REQUIRE(x.grad().to_host_f64() == std::vector<double>{2, 2});
  x.zero_grad();
  sum(x.clone() * x).backward();  // d/dx x^2 = 2x
  REQUIRE(x.grad().to_host_f64() == std::vector<double>{2, 4});
  // Integer conversions carry no gradient.
  REQUIRE_FALSE(x.to(DType::i64).requires_grad());
}

TEST_CASE("tensor: operator<< prints shape, dtype and values", "[tensor][print]") {
  std::ostringstream small;
  small << from_values({1, 2.5, -3, 4}, {2, 2});
  REQUIRE(small.str() == "Tensor(shape=[2, 2], dtype=f32, values=[1, 2.5, -3, 4])");

  std::ostringstream scalar_text;
  scalar_text << scalar(3, DType::f64);
  REQUIRE(scalar_text.str() == "Tensor(shape=[], dtype=f64, values=[3])");

  std::ostringstream indices_text;
  indices_text << from_indices({4, 5}, {2});
  REQUIRE(indices_text.str() == "Tensor(shape=[2], dtype=i64, values=[4, 5])");

  // More than 64 elements: no values.
  std::ostringstream big;
  big << zeros({65});
  REQUIRE(big.str() == "Tensor(shape=[65], dtype=f32)");

  std::ostringstream undefined;
  undefined << Tensor();
  REQUIRE(undefined.str() == "Tensor(undefined)");

  std::ostringstream transposed;
  transposed << from_values({1, 2, 3, 4, 5, 6}, {2, 3}).transpose(0, 1);
  REQUIRE(transposed.str() == "Tensor(shape=[3, 2], dtype=f32, values=[1, 4, 2, 5, 3, 6])");
}

TEST_CASE("tensor: shape_str formats shapes", "[tensor][print]") {
  REQUIRE(shape_str({}) == "[]");
  REQUIRE(shape_str({7}) == "[7]");
  REQUIRE(shape_str({2, 3, 4}) == "[2, 3, 4]");
}
