// Tensor handles: factories, values, item, strides, contiguity, printing.
#include <catch2/catch.hpp>

#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/rng.h"
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

TEST_CASE("tensor: arange(start, end, step) as PyTorch's", "[tensor][factories][arange]") {
  // ceil((end - start) / step) values start + i * step.
  const Tensor evens = arange(0, 10, 2);
  REQUIRE(evens.shape() == Shape{5});
  REQUIRE(evens.dtype() == DType::f32);
  REQUIRE(evens.to_host_f64() == std::vector<double>{0, 2, 4, 6, 8});
  REQUIRE(arange(0, 10).to_host_f64() == arange(10).to_host_f64());
  REQUIRE(arange(1, 2.5, 0.5).to_host_f64() == std::vector<double>{1, 1.5, 2});
  REQUIRE(arange(1, 4, 2).to_host_f64() == std::vector<double>{1, 3});  // 3 / 2 rounds up
  REQUIRE(arange(10, 0, -3).to_host_f64() == std::vector<double>{10, 7, 4, 1});
  REQUIRE(arange(-2, 3, 1, DType::i64).to_host_i64() == std::vector<int64_t>{-2, -1, 0, 1, 2});
  // arange(0, 1, 0.1) has 10 values, as in PyTorch, each 0 + i * 0.1 computed in f64.
  const std::vector<double> tenths = arange(0.0, 1.0, 0.1, DType::f64).to_host_f64();
  REQUIRE(tenths.size() == 10);
  for (size_t i = 0; i < tenths.size(); ++i) REQUIRE(tenths[i] == static_cast<double>(i) * 0.1);
  // An empty range, and one overload or the other by the arguments.
  REQUIRE(arange(3, 3).shape() == Shape{0});
  REQUIRE(arange(3, 3, -1).numel() == 0);
  REQUIRE(arange(4).numel() == 4);                   // arange(int64_t n)
  REQUIRE(arange(4, DType::i64).dtype() == DType::i64);
  REQUIRE(arange(1, 4).to_host_f64() == std::vector<double>{1, 2, 3});  // arange(start, end)
  // A narrow integer dtype saturates at its ends (the conversion every copy into it makes).
  REQUIRE(arange(0, 1000, 500, DType::i8).to_host_i64() == std::vector<int64_t>{0, 127});
  REQUIRE(arange(-1000, 0, 600, DType::i8).to_host_i64() == std::vector<int64_t>{-128, -128});
}

TEST_CASE("tensor: arange refuses a range it cannot walk, naming itself",
          "[tensor][factories][arange][errors]") {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  REQUIRE_THROWS_WITH(arange(0, 10, 0), Catch::Contains("arange") && Catch::Contains("nonzero"));
  REQUIRE_THROWS_WITH(arange(nan, 10), Catch::Contains("arange") && Catch::Contains("finite"));
  REQUIRE_THROWS_WITH(arange(0, inf), Catch::Contains("arange") && Catch::Contains("finite"));
  REQUIRE_THROWS_WITH(arange(0, 1, nan), Catch::Contains("arange") && Catch::Contains("finite"));
  // A step that walks away from end, as PyTorch refuses it.
  REQUIRE_THROWS_WITH(arange(5, 0), Catch::Contains("arange") &&
                                        Catch::Contains("inconsistent with step sign"));
  REQUIRE_THROWS_WITH(arange(0, 5, -1), Catch::Contains("inconsistent with step sign"));
  // Lengths past an int64 (the difference of two finite ends may itself be inf), and one that
  // counts but cannot be allocated.
  REQUIRE_THROWS_WITH(arange(0, 1e300, 1e-300), Catch::Contains("arange"));
  REQUIRE_THROWS_WITH(arange(-1e308, 1e308), Catch::Contains("arange"));
  REQUIRE_THROWS_WITH(arange(0, 1e19), Catch::Contains("arange"));
  REQUIRE_THROWS_AS(arange(0, 0x1p60), Error);
  // i64 values outside int64's range.
  REQUIRE_THROWS_WITH(arange(-1e19, 0, 5e18, DType::i64), Catch::Contains("arange") &&
                                                             Catch::Contains("i64"));
  // 9e18 fits; the last value, 9e18 + 2 * 2e17 = 9.4e18, is past INT64_MAX (9.22e18).
  REQUIRE_THROWS_WITH(arange(9e18, 9.5e18, 2e17, DType::i64), Catch::Contains("9.4e+18"));
  REQUIRE(arange(-9e18, 9e18, 9e18, DType::i64).to_host_i64() ==
          std::vector<int64_t>{-9000000000000000000, 0});
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

TEST_CASE("tensor: every factory refuses a negative size with a tg::Error naming it",
          "[tensor][factories]") {
  REQUIRE_THROWS_WITH(arange(-1), Catch::Contains("arange: size -1"));
  REQUIRE_THROWS_WITH(from_values({}, {-1}), Catch::Contains("from_values") &&
                                                 Catch::Contains("[-1]"));
  REQUIRE_THROWS_WITH(from_indices({}, {2, -2}), Catch::Contains("from_indices") &&
                                                     Catch::Contains("[2, -2]"));
  REQUIRE_THROWS_WITH(from_bools({}, {-1, 0}), Catch::Contains("from_bools") &&
                                                   Catch::Contains("[-1, 0]"));
  REQUIRE_THROWS_WITH(full({-4}, 1.0), Catch::Contains("[-4]"));
  REQUIRE_THROWS_WITH(randn({-1}), Catch::Contains("op 'randn': negative size in shape [-1]"));
  REQUIRE_THROWS_WITH(rand({3, -1}), Catch::Contains("op 'rand': negative size in shape [3, -1]"));
  REQUIRE_THROWS_WITH(numel({-1}), Catch::Contains("numel: negative size in shape [-1]"));
}

TEST_CASE("tensor: numel counts without wrapping around", "[tensor][factories]") {
  REQUIRE(numel({}) == 1);
  REQUIRE(numel({3, 4}) == 12);
  REQUIRE(numel({int64_t{1} << 62, 2, 0}) == 0);  // a zero dim: 0, however large the others
  REQUIRE(numel({int64_t{1} << 31, int64_t{1} << 31}) == int64_t{1} << 62);
  // 2^32 x 2^32 is 2^64, which an int64 wraps to 0: refused.
  REQUIRE_THROWS_WITH(numel({int64_t{1} << 32, int64_t{1} << 32}),
                      Catch::Contains("[4294967296, 4294967296] has more elements than an int64"));
  REQUIRE_THROWS_AS(randn({int64_t{1} << 32, int64_t{1} << 32}), Error);
  // A size too large to allocate is the allocator's tg::Error, not a std::length_error.
  REQUIRE_THROWS_AS(arange(int64_t{1} << 60), Error);
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

// Every accessor and op of a Tensor() names itself in a tg::Error; none dereferences null.
TEST_CASE("tensor: an undefined Tensor() throws tg::Error naming the accessor",
          "[tensor][undefined]") {
  const Tensor none;
  REQUIRE_FALSE(none.defined());
  REQUIRE(none.impl() == nullptr);
  const auto require_named = [](const char* accessor, const std::function<void()>& call) {
    INFO(accessor);
    REQUIRE_THROWS_AS(call(), Error);
    REQUIRE_THROWS_WITH(call(), Catch::Contains("undefined tensor") && Catch::Contains(accessor));
  };
  require_named("Tensor::dim", [&] { (void)none.dim(); });
  require_named("Tensor::numel", [&] { (void)none.numel(); });
  require_named("Tensor::shape", [&] { (void)none.shape(); });
  require_named("Tensor::strides", [&] { (void)none.strides(); });
  require_named("Tensor::offset", [&] { (void)none.offset(); });
  require_named("Tensor::dtype", [&] { (void)none.dtype(); });
  require_named("Tensor::device", [&] { (void)none.device(); });
  require_named("Tensor::size", [&] { (void)none.size(0); });
  require_named("Tensor::is_contiguous", [&] { (void)none.is_contiguous(); });
  require_named("Tensor::data", [&] { (void)none.data(); });
  require_named("Tensor::storage", [&] { (void)none.storage(); });
  require_named("Tensor::version", [&] { (void)none.version(); });
  require_named("Tensor::item", [&] { (void)none.item(); });
  require_named("Tensor::to_host_f64", [&] { (void)none.to_host_f64(); });
  require_named("Tensor::grad", [&] { (void)none.grad(); });
  require_named("Tensor::set_grad", [&] { none.set_grad(zeros({1})); });
  require_named("Tensor::zero_grad", [&] { none.zero_grad(); });
  require_named("Tensor::requires_grad", [&] { (void)none.requires_grad(); });
  require_named("Tensor::requires_grad_", [&] { Tensor t; t.requires_grad_(); });
  require_named("Tensor::is_leaf", [&] { (void)none.is_leaf(); });
  require_named("Tensor::grad_fn", [&] { (void)none.grad_fn(); });
  require_named("Tensor::detach", [&] { (void)none.detach(); });
  require_named("Tensor::backward", [&] { none.backward(); });
  require_named("Tensor::view", [&] { (void)none.view({1}); });
  require_named("Tensor::reshape", [&] { (void)none.reshape({1}); });
  require_named("Tensor::narrow", [&] { (void)none.narrow(0, 0, 1); });
  require_named("Tensor::transpose", [&] { (void)none.transpose(0, 1); });
  require_named("Tensor::permute", [&] { (void)none.permute({0}); });
  require_named("Tensor::expand", [&] { (void)none.expand({2}); });
  require_named("Tensor::squeeze", [&] { (void)none.squeeze(0); });
  require_named("Tensor::unsqueeze", [&] { (void)none.unsqueeze(0); });
  require_named("Tensor::contiguous", [&] { (void)none.contiguous(); });
  require_named("Tensor::clone", [&] { (void)none.clone(); });
  require_named("Tensor::to", [&] { (void)none.to(DType::f64); });
  require_named("Tensor::copy_", [&] { none.copy_(zeros({1})); });
  require_named("Tensor::fill_", [&] { none.fill_(0); });
  // As an argument: an op reading its shape names the accessor too.
  REQUIRE_THROWS_WITH(zeros({1}) + none, Catch::Contains("undefined tensor"));
}

TEST_CASE("tensor: set_grad takes only a gradient of the tensor's shape, dtype and device",
          "[tensor][grad]") {
  const Tensor param = from_values({1, 2}, {2}).requires_grad_();  // f32 [2]
  // An f64 grad on an f32 parameter: backward would add 8-byte elements to 4-byte ones.
  REQUIRE_THROWS_WITH(param.set_grad(from_values({1, 1}, {2}, DType::f64)),
                      Catch::Contains("set_grad") && Catch::Contains("f64") &&
                          Catch::Contains("f32"));
  // A grad with more elements: backward would read past the parameter's.
  REQUIRE_THROWS_WITH(param.set_grad(zeros({3})),
                      Catch::Contains("set_grad") && Catch::Contains("[3]") &&
                          Catch::Contains("[2]"));
  REQUIRE_THROWS_AS(param.set_grad(zeros({1, 2})), Error);
  REQUIRE_FALSE(param.grad().defined());  // nothing was stored

  param.set_grad(from_values({5, 6}, {2}));
  // d sum(3 p)/dp = [3, 3], added to [5, 6].
  sum(param * 3.0).backward();
  REQUIRE(param.grad().to_host_f64() == std::vector<double>{8, 9});
  param.set_grad(Tensor());  // undefined clears
  REQUIRE_FALSE(param.grad().defined());
}

TEST_CASE("tensor: a shape whose sizes multiply past int64 is refused, also with no elements",
          "[tensor][factories]") {
  constexpr int64_t big = int64_t{1} << 62;
  // No elements, but the strides of dims 0 and 1 would be 4 * 2^62 and 2^62 * 4 * ...
  REQUIRE_THROWS_WITH(empty({0, big, 4}), Catch::Contains("empty") && Catch::Contains("int64"));
  REQUIRE_THROWS_AS(zeros({big, 0, big}), Error);
  // Sizes whose product still fits are fine without elements (strides [2^40, 1]).
  const Tensor wide = empty({0, int64_t{1} << 40});
  REQUIRE(wide.numel() == 0);
  REQUIRE(wide.strides() == Shape{int64_t{1} << 40, 1});
}
