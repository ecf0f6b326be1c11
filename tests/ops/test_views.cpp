// Views share storage and index it correctly; copies do not; cat/stack; gradients by hand.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/ops/ops.h"

using namespace tg;

namespace {

// 0, 1, 2, ... in a contiguous tensor of `shape`.
Tensor iota(const Shape& shape, DType dtype = DType::f32) {
  std::vector<double> v(numel(shape));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i);
  return from_values(v, shape, dtype);
}

bool shares(const Tensor& a, const Tensor& b) { return a.storage().get() == b.storage().get(); }

}  // namespace

TEST_CASE("views: view and reshape share storage and keep row-major order", "[views]") {
  Tensor t = iota({2, 3, 4});
  Tensor v = t.view({6, 4});
  REQUIRE(shares(v, t));
  REQUIRE(v.shape() == Shape{6, 4});
  REQUIRE(v.to_host_f64() == t.to_host_f64());
  Tensor inferred = t.view({-1, 2});
  REQUIRE(inferred.shape() == Shape{12, 2});
  REQUIRE(t.view({4, -1, 2}).shape() == Shape{4, 3, 2});
  REQUIRE(t.view({24}).shape() == Shape{24});
  REQUIRE(shares(t.reshape({3, 8}), t));
  // A write through the view is visible in the base.
  v.data_as<float>()[5] = 100;
  REQUIRE(t.to_host_f64()[5] == 100);
  REQUIRE(scalar(3).view({1, 1}).shape() == Shape{1, 1});
  REQUIRE(from_values({3}, {1}).view({}).shape() == Shape{});
}

TEST_CASE("views: view errors", "[views][errors]") {
  Tensor t = iota({2, 3});
  REQUIRE_THROWS_AS(t.view({4}), Error);
  REQUIRE_THROWS_WITH(t.view({4}), Catch::Contains("[2, 3]"));
  REQUIRE_THROWS_AS(t.view({-1, -1}), Error);
  REQUIRE_THROWS_AS(t.view({-1, 4}), Error);
  REQUIRE_THROWS_AS(t.view({-2, 3}), Error);
  // A non-contiguous tensor cannot be viewed; reshape copies instead.
  Tensor tr = t.transpose(0, 1);
  REQUIRE_THROWS_AS(tr.view({6}), Error);
  REQUIRE_THROWS_WITH(tr.view({6}), Catch::Contains("reshape"));
  Tensor flat = tr.reshape({6});
  REQUIRE_FALSE(shares(flat, t));
  REQUIRE(flat.to_host_f64() == std::vector<double>{0, 3, 1, 4, 2, 5});
  REQUIRE_THROWS_AS(t.narrow(1, 0, 2).view({4}), Error);
}

TEST_CASE("views: transpose and permute share storage with permuted strides", "[views]") {
  Tensor t = iota({2, 3, 4});
  Tensor tr = t.transpose(0, 2);
  REQUIRE(shares(tr, t));
  REQUIRE(tr.shape() == Shape{4, 3, 2});
  // tr[i, j, k] = t[k, j, i] = 12k + 4j + i.
  const std::vector<double> v = tr.to_host_f64();
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 2; ++k) REQUIRE(v[i * 6 + j * 2 + k] == 12 * k + 4 * j + i);
  REQUIRE(t.transpose(-1, -2).shape() == Shape{2, 4, 3});
  REQUIRE(t.transpose(1, 1).to_host_f64() == t.to_host_f64());

  Tensor p = t.permute({1, 2, 0});
  REQUIRE(shares(p, t));
  REQUIRE(p.shape() == Shape{3, 4, 2});
  REQUIRE(p.strides() == Shape{4, 1, 12});
  // p[a, b, c] = t[c, a, b] = 12c + 4a + b.
  const std::vector<double> pv = p.to_host_f64();
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 4; ++b)
      for (int c = 0; c < 2; ++c) REQUIRE(pv[a * 8 + b * 2 + c] == 12 * c + 4 * a + b);
  REQUIRE(t.permute({-1, 0, 1}).shape() == Shape{4, 2, 3});
}

TEST_CASE("views: bad permute and transpose arguments throw", "[views][errors]") {
  Tensor t = iota({2, 3, 4});
  REQUIRE_THROWS_AS(t.permute({0, 1}), Error);
  REQUIRE_THROWS_AS(t.permute({0, 1, 2, 3}), Error);
  REQUIRE_THROWS_AS(t.permute({0, 0, 1}), Error);
  REQUIRE_THROWS_AS(t.permute({0, 1, 3}), Error);
  REQUIRE_THROWS_AS(t.permute({0, 1, -4}), Error);
  REQUIRE_THROWS_AS(t.transpose(0, 3), Error);
  REQUIRE_THROWS_AS(t.transpose(-4, 0), Error);
}

TEST_CASE("views: narrow shares storage and offsets into it", "[views]") {
  Tensor t = iota({3, 4});
  Tensor rows = t.narrow(0, 1, 2);
  REQUIRE(shares(rows, t));
  REQUIRE(rows.shape() == Shape{2, 4});
  REQUIRE(rows.offset() == 4);
  REQUIRE(rows.to_host_f64() == std::vector<double>{4, 5, 6, 7, 8, 9, 10, 11});
  Tensor cols = t.narrow(-1, 1, 2);
  REQUIRE(cols.offset() == 1);
  REQUIRE(cols.strides() == Shape{4, 1});
  REQUIRE(cols.to_host_f64() == std::vector<double>{1, 2, 5, 6, 9, 10});
  // Narrow of a narrow accumulates offsets.
  REQUIRE(rows.narrow(1, 2, 2).to_host_f64() == std::vector<double>{6, 7, 10, 11});
  REQUIRE(t.narrow(0, 3, 0).numel() == 0);
  REQUIRE(t.narrow(1, 0, 4).to_host_f64() == t.to_host_f64());
}

TEST_CASE("views: narrow ranges outside the dim throw", "[views][errors]") {
  Tensor t = iota({3, 4});
  REQUIRE_THROWS_AS(t.narrow(0, 2, 2), Error);
  REQUIRE_THROWS_AS(t.narrow(0, -4, 1), Error);  // -4 + 3 is still before the first row
  REQUIRE_THROWS_AS(t.narrow(0, -1, 2), Error);  // the last row and one past it
  REQUIRE_THROWS_AS(t.narrow(1, 0, 5), Error);
  REQUIRE_THROWS_AS(t.narrow(1, 1, -1), Error);
  REQUIRE_THROWS_AS(t.narrow(2, 0, 1), Error);
  REQUIRE_THROWS_WITH(t.narrow(1, 3, 2), Catch::Contains("[3, 4]"));
}

TEST_CASE("views: expand uses stride 0 and shares storage", "[views]") {
  Tensor row = from_values({1, 2, 3}, {3});
  Tensor e = row.expand({2, 3});
  REQUIRE(shares(e, row));
  REQUIRE(e.shape() == Shape{2, 3});
  REQUIRE(e.strides() == Shape{0, 1});
  REQUIRE(e.to_host_f64() == std::vector<double>{1, 2, 3, 1, 2, 3});
  Tensor col = from_values({1, 2}, {2, 1});
  Tensor ce = col.expand({2, 3});
  REQUIRE(ce.strides() == Shape{1, 0});
  REQUIRE(ce.to_host_f64() == std::vector<double>{1, 1, 1, 2, 2, 2});
  // -1 keeps a size.
  REQUIRE(col.expand({4, -1, 3}).shape() == Shape{4, 2, 3});
  REQUIRE_THROWS_AS(row.expand({2, 4}), Error);
  REQUIRE_THROWS_AS(row.expand({}), Error);
  REQUIRE_THROWS_AS(from_values({1, 2}, {2}).expand({2, 3}), Error);
}

TEST_CASE("views: squeeze and unsqueeze", "[views]") {
  Tensor t = iota({2, 1, 3});
  Tensor s = t.squeeze(1);
  REQUIRE(shares(s, t));
  REQUIRE(s.shape() == Shape{2, 3});
  REQUIRE(s.to_host_f64() == t.to_host_f64());
  REQUIRE(t.squeeze(-2).shape() == Shape{2, 3});
  // A dim of another size stays, as in PyTorch.
  REQUIRE(t.squeeze(0).shape() == Shape{2, 1, 3});
  REQUIRE_THROWS_AS(t.squeeze(3), Error);

  Tensor u = s.unsqueeze(0);
  REQUIRE(shares(u, t));
  REQUIRE(u.shape() == Shape{1, 2, 3});
  REQUIRE(s.unsqueeze(2).shape() == Shape{2, 3, 1});
  REQUIRE(s.unsqueeze(-1).shape() == Shape{2, 3, 1});
  REQUIRE(s.unsqueeze(1).shape() == Shape{2, 1, 3});
  REQUIRE(s.unsqueeze(1).to_host_f64() == s.to_host_f64());
  REQUIRE_THROWS_AS(s.unsqueeze(3), Error);
  REQUIRE(scalar(2).unsqueeze(0).shape() == Shape{1});
  // unsqueeze of a non-contiguous view keeps its element order.
  Tensor tr = iota({2, 3}).transpose(0, 1);
  REQUIRE(tr.unsqueeze(1).to_host_f64() == tr.to_host_f64());
  REQUIRE(tr.unsqueeze(2).to_host_f64() == tr.to_host_f64());
}

TEST_CASE("views: contiguous copies only when needed", "[views]") {
  Tensor t = iota({2, 3});
  REQUIRE(t.contiguous().same(t));
  Tensor tr = t.transpose(0, 1);
  Tensor c = tr.contiguous();
  REQUIRE_FALSE(shares(c, t));
  REQUIRE(c.is_contiguous());
  REQUIRE(c.strides() == Shape{2, 1});
  REQUIRE(c.to_host_f64() == std::vector<double>{0, 3, 1, 4, 2, 5});
  // The copy is independent of the original.
  t.data_as<float>()[0] = 42;
  REQUIRE(c.to_host_f64()[0] == 0);
  REQUIRE(tr.to_host_f64()[0] == 42);
  // Expanded views materialise.
  Tensor e = from_values({1, 2}, {2}).expand({3, 2}).contiguous();
  REQUIRE(e.to_host_f64() == std::vector<double>{1, 2, 1, 2, 1, 2});
}

TEST_CASE("views: cat joins along a dim", "[views][cat]") {
  Tensor a = iota({2, 2});               // [[0,1],[2,3]]
  Tensor b = iota({1, 2}) + 10.0;        // [[10,11]]
  Tensor c = cat({a, b}, 0);
  REQUIRE(c.shape() == Shape{3, 2});
  REQUIRE(c.to_host_f64() == std::vector<double>{0, 1, 2, 3, 10, 11});
  Tensor d = iota({2, 3}) + 100.0;       // [[100,101,102],[103,104,105]]
  Tensor e = cat({a, d}, 1);
  REQUIRE(e.shape() == Shape{2, 5});
  REQUIRE(e.to_host_f64() == std::vector<double>{0, 1, 100, 101, 102, 2, 3, 103, 104, 105});
  REQUIRE(cat({a, d}, -1).to_host_f64() == e.to_host_f64());
  // Non-contiguous inputs.
  REQUIRE(cat({a.transpose(0, 1), a}, 0).to_host_f64() == std::vector<double>{0, 2, 1, 3, 0, 1, 2, 3});
  REQUIRE(cat({a}, 0).to_host_f64() == a.to_host_f64());
}

TEST_CASE("views: cat errors", "[views][cat][errors]") {
  Tensor a = iota({2, 2});
  REQUIRE_THROWS_AS(cat({}, 0), Error);
  REQUIRE_THROWS_AS(cat({a, iota({2, 3})}, 0), Error);
  REQUIRE_THROWS_WITH(cat({a, iota({2, 3})}, 0), Catch::Contains("[2, 3]"));
  REQUIRE_THROWS_AS(cat({a, iota({2})}, 0), Error);
  REQUIRE_THROWS_AS(cat({a, iota({2, 2}, DType::f64)}, 0), Error);
  REQUIRE_THROWS_AS(cat({a, a}, 2), Error);
}

TEST_CASE("views: stack adds a new dim", "[views][stack]") {
  Tensor a = from_values({1, 2, 3}, {3});
  Tensor b = from_values({4, 5, 6}, {3});
  Tensor s0 = stack({a, b}, 0);
  REQUIRE(s0.shape() == Shape{2, 3});
  REQUIRE(s0.to_host_f64() == std::vector<double>{1, 2, 3, 4, 5, 6});
  Tensor s1 = stack({a, b}, 1);
  REQUIRE(s1.shape() == Shape{3, 2});
  REQUIRE(s1.to_host_f64() == std::vector<double>{1, 4, 2, 5, 3, 6});
  REQUIRE(stack({a, b}, -1).to_host_f64() == s1.to_host_f64());
  REQUIRE_THROWS_AS(stack({}, 0), Error);
  REQUIRE_THROWS_AS(stack({a, from_values({1, 2}, {2})}, 0), Error);
  REQUIRE_THROWS_AS(stack({a, b}, 2), Error);
}

TEST_CASE("views: gradients of transpose, permute and view", "[views][grad]") {
  // L = sum(x^T * w) with w [3, 2]: dL/dx[i, j] = w[j, i].
  Tensor x = iota({2, 3}).requires_grad_();
  Tensor w = from_values({1, 2, 3, 4, 5, 6}, {3, 2});
  sum(x.transpose(0, 1) * w).backward();
  REQUIRE(x.grad().shape() == Shape{2, 3});
  REQUIRE(x.grad().to_host_f64() == std::vector<double>{1, 3, 5, 2, 4, 6});

  // L = sum(permute(y, {2, 0, 1}) * w3): dL/dy[a, b, c] = w3[c, a, b].
  Tensor y = iota({2, 2, 3}).requires_grad_();
  Tensor w3 = iota({3, 2, 2}) + 1.0;  // w3[c, a, b] = 4c + 2a + b + 1
  sum(y.permute({2, 0, 1}) * w3).backward();
  const std::vector<double> g = y.grad().to_host_f64();
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 2; ++b)
      for (int c = 0; c < 3; ++c) REQUIRE(g[a * 6 + b * 3 + c] == 4 * c + 2 * a + b + 1);

  // L = sum(view(z, {3, 2}) * w): gradient is w laid back in z's shape.
  Tensor z = iota({2, 3}).requires_grad_();
  sum(z.view({3, 2}) * w).backward();
  REQUIRE(z.grad().shape() == Shape{2, 3});
  REQUIRE(z.grad().to_host_f64() == std::vector<double>{1, 2, 3, 4, 5, 6});
  // And through reshape of a non-contiguous view: the grad is the transposed weights.
  z.zero_grad();
  sum(z.transpose(0, 1).reshape({6}) * from_values({1, 2, 3, 4, 5, 6}, {6})).backward();
  // z^T flattened is [z00, z10, z01, z11, z02, z12] -> weights 1..6 in that order.
  REQUIRE(z.grad().to_host_f64() == std::vector<double>{1, 3, 5, 2, 4, 6});
}

TEST_CASE("views: gradients of narrow, expand, squeeze and unsqueeze", "[views][grad]") {
  // narrow: the gradient is zero outside the window.
  Tensor x = iota({3, 4}).requires_grad_();
  sum(x.narrow(1, 1, 2) * 3.0).backward();
  REQUIRE(x.grad().to_host_f64() == std::vector<double>{0, 3, 3, 0, 0, 3, 3, 0, 0, 3, 3, 0});
  // Two overlapping windows add up.
  x.zero_grad();
  sum(x.narrow(0, 0, 2) + x.narrow(0, 1, 2)).backward();
  REQUIRE(x.grad().to_host_f64() == std::vector<double>{1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 1, 1});

  // expand: the gradient sums over the expanded dims.
  // L = sum(expand(v, {3, 2}) * w) with w = [[1,2],[3,4],[5,6]]: dL/dv = [1+3+5, 2+4+6].
  Tensor v = from_values({7, 8}, {2}).requires_grad_();
  Tensor w = from_values({1, 2, 3, 4, 5, 6}, {3, 2});
  sum(v.expand({3, 2}) * w).backward();
  REQUIRE(v.grad().shape() == Shape{2});
  REQUIRE(v.grad().to_host_f64() == std::vector<double>{9, 12});
  Tensor col = from_values({1, 2, 3}, {3, 1}).requires_grad_();
  sum(col.expand({3, 2}) * w).backward();
  REQUIRE(col.grad().shape() == Shape{3, 1});
  REQUIRE(col.grad().to_host_f64() == std::vector<double>{3, 7, 11});

  // squeeze / unsqueeze: the gradient keeps the input's shape.
  Tensor s = from_values({1, 2, 3}, {1, 3}).requires_grad_();
  sum(s.squeeze(0) * from_values({4, 5, 6}, {3})).backward();
  REQUIRE(s.grad().shape() == Shape{1, 3});
  REQUIRE(s.grad().to_host_f64() == std::vector<double>{4, 5, 6});
  Tensor u = from_values({1, 2}, {2}).requires_grad_();
  sum(u.unsqueeze(1) * from_values({1, 10, 100, 2, 20, 200}, {2, 3})).backward();
  REQUIRE(u.grad().shape() == Shape{2});
  REQUIRE(u.grad().to_host_f64() == std::vector<double>{111, 222});
}

TEST_CASE("views: gradients of cat and stack split back to the inputs", "[views][grad]") {
  Tensor a = from_values({1, 2}, {1, 2}).requires_grad_();
  Tensor b = from_values({3, 4, 5, 6}, {2, 2}).requires_grad_();
  Tensor w = from_values({1, 2, 3, 4, 5, 6}, {3, 2});
  sum(cat({a, b}, 0) * w).backward();
  REQUIRE(a.grad().to_host_f64() == std::vector<double>{1, 2});
  REQUIRE(b.grad().to_host_f64() == std::vector<double>{3, 4, 5, 6});

  // cat with an input that does not require grad.
  Tensor c = from_values({1, 2, 3}, {3}).requires_grad_();
  Tensor constant = from_values({0, 0}, {2});
  sum(cat({constant, c}, 0) * from_values({1, 2, 3, 4, 5}, {5})).backward();
  REQUIRE(c.grad().to_host_f64() == std::vector<double>{3, 4, 5});

  // stack along dim 1: out[i, k] = inputs[k][i]; dL/dinput_k[i] = w[i, k].
  Tensor p = from_values({1, 2, 3}, {3}).requires_grad_();
  Tensor q = from_values({4, 5, 6}, {3}).requires_grad_();
  sum(stack({p, q}, 1) * w).backward();
  REQUIRE(p.grad().to_host_f64() == std::vector<double>{1, 3, 5});
  REQUIRE(q.grad().to_host_f64() == std::vector<double>{2, 4, 6});
}

TEST_CASE("views: gradient of contiguous() and a view of a view", "[views][grad]") {
  // L = sum(contiguous(x^T) * w): same as the transpose gradient.
  Tensor x = iota({2, 3}).requires_grad_();
  Tensor w = from_values({1, 2, 3, 4, 5, 6}, {3, 2});
  sum(x.transpose(0, 1).contiguous() * w).backward();
  REQUIRE(x.grad().to_host_f64() == std::vector<double>{1, 3, 5, 2, 4, 6});
  // A chain of views: narrow -> transpose -> unsqueeze -> expand.
  // y = expand(unsqueeze(narrow(x, 1, 0, 2)^T, 0), {2, 2, 2}); L = sum(y): each of the
  // 4 selected elements appears twice -> gradient 2 there, 0 in the dropped column.
  x.zero_grad();
  sum(x.narrow(1, 0, 2).transpose(0, 1).unsqueeze(0).expand({2, 2, 2})).backward();
  REQUIRE(x.grad().to_host_f64() == std::vector<double>{2, 2, 0, 2, 2, 0});
}

TEST_CASE("views: narrow with extreme start and length throws instead of wrapping around",
          "[views][errors]") {
  constexpr int64_t max = std::numeric_limits<int64_t>::max();
  constexpr int64_t min = std::numeric_limits<int64_t>::min();
  const Tensor t = iota({3, 4});
  // start + length = INT64_MAX + 2 wraps to a negative number, which is <= 3.
  REQUIRE_THROWS_WITH(t.narrow(0, max - 1, 3),
                      Catch::Contains("narrow") && Catch::Contains(std::to_string(max - 1)) &&
                          Catch::Contains("[3, 4]"));
  REQUIRE_THROWS_AS(t.narrow(0, 1, max), Error);
  REQUIRE_THROWS_AS(t.narrow(0, max, max), Error);
  REQUIRE_THROWS_AS(t.narrow(0, 3, max), Error);
  REQUIRE_THROWS_AS(t.narrow(0, min, 1), Error);
  REQUIRE_THROWS_AS(t.narrow(0, 2, min), Error);
  REQUIRE_THROWS_AS(t.narrow(min, 0, 1), Error);
  REQUIRE_THROWS_AS(t.narrow(max, 0, 1), Error);
  // The edges still work: the whole dim, and an empty window at its end.
  REQUIRE(t.narrow(1, 0, 4).numel() == 12);
  REQUIRE(t.narrow(1, 4, 0).numel() == 0);
}

TEST_CASE("views: an empty window keeps its offset inside the storage", "[views]") {
  // x [2, 3]; column 2 is shape [2, 1], strides [3, 1], offset 2. Rows [2, 2) of it would start
  // at 2 + 2 * 3 = 8, past the 6 elements: the empty view keeps offset 2 instead.
  const Tensor column = iota({2, 3}).narrow(1, 2, 1);
  const Tensor none = column.narrow(0, 2, 0);
  REQUIRE(none.numel() == 0);
  REQUIRE(none.offset() >= 0);
  REQUIRE(none.offset() <= 6);
  REQUIRE(none.to_host_f64().empty());
}

TEST_CASE("views: view, expand and cat with sizes that multiply past int64 throw",
          "[views][errors]") {
  constexpr int64_t max = std::numeric_limits<int64_t>::max();
  constexpr int64_t big = int64_t{1} << 62;
  const Tensor none = iota({0});
  // No elements, but the strides of [0, 2^62, 4] would overflow.
  REQUIRE_THROWS_WITH(none.view({0, big, 4}), Catch::Contains("view"));
  REQUIRE_THROWS_WITH(none.view({-1, big, big}), Catch::Contains("view"));
  REQUIRE_THROWS_WITH(iota({4}).view({-1, big, big}), Catch::Contains("view"));
  REQUIRE_THROWS_WITH(iota({1}).expand({max, max}), Catch::Contains("expand"));
  REQUIRE_THROWS_WITH(iota({1}).expand({0, big, 4}), Catch::Contains("expand"));
  // Two empty tensors whose joined size passes INT64_MAX.
  const Tensor half = empty({0, max / 2 + 1});
  REQUIRE_THROWS_WITH(cat({half, half}, 1), Catch::Contains("cat"));
}

TEST_CASE("views: copy_ broadcasts and converts into the tensor, fill_ sets every element",
          "[views][in_place]") {
  const Tensor x = zeros({2, 3});
  REQUIRE(x.version() == 0);
  x.copy_(from_values({1, 2, 3}, {3}, DType::f64));  // broadcast over rows, f64 -> f32
  REQUIRE(x.to_host_f64() == std::vector<double>{1, 2, 3, 1, 2, 3});
  REQUIRE(x.version() == 1);
  x.narrow(1, 1, 1).fill_(7);  // a strided window of the same storage
  REQUIRE(x.to_host_f64() == std::vector<double>{1, 7, 3, 1, 7, 3});
  REQUIRE(x.version() == 2);  // a view's write counts for the whole storage
  // Source and destination in one storage: the source is read before anything is written
  // (in place, the transpose's element (1, 0) would be read after (0, 1) overwrote it).
  const Tensor square = iota({2, 2});
  square.copy_(square.transpose(0, 1));
  REQUIRE(square.to_host_f64() == std::vector<double>{0, 2, 1, 3});
}

TEST_CASE("views: copy_ and fill_ refuse what they cannot write", "[views][in_place][errors]") {
  REQUIRE_THROWS_WITH(zeros({2, 3}).copy_(zeros({2})),
                      Catch::Contains("copy_") && Catch::Contains("[2]") &&
                          Catch::Contains("[2, 3]"));
  REQUIRE_THROWS_WITH(zeros({1}).expand({3}).copy_(iota({3})), Catch::Contains("share memory"));
  REQUIRE_THROWS_WITH(zeros({2}).copy_(Tensor()), Catch::Contains("undefined"));
  // A leaf that requires grad is written only under NoGrad.
  const Tensor param = zeros({2}).requires_grad_();
  REQUIRE_THROWS_WITH(param.fill_(1), Catch::Contains("fill_") && Catch::Contains("NoGrad"));
  REQUIRE_THROWS_WITH(param.copy_(ones({2})), Catch::Contains("copy_"));
  REQUIRE(param.version() == 0);
  NoGrad no_grad;
  param.fill_(1);
  REQUIRE(param.to_host_f64() == std::vector<double>{1, 1});
  REQUIRE(param.version() == 1);
}

TEST_CASE("views: narrow of a tensor without elements, and its gradient", "[views][grad]") {
  // [0, 5] has no elements: columns [2, 5) of it start at no element of its empty storage.
  const Tensor none = zeros({0, 5}).requires_grad_();
  const Tensor window = none.narrow(1, 2, 3);
  REQUIRE(window.shape() == Shape{0, 3});
  REQUIRE(window.offset() == 0);
  // The backward narrows a fresh [0, 5] of zeros the same way.
  sum(window).backward();
  REQUIRE(none.grad().shape() == Shape{0, 5});
}

TEST_CASE("views: narrow with a negative start counts from the end", "[views]") {
  const Tensor t = iota({3, 4});
  const Tensor last_row = t.narrow(0, -1, 1);  // Python's t[-1:]
  REQUIRE(shares(last_row, t));
  REQUIRE(last_row.offset() == 8);
  REQUIRE(last_row.to_host_f64() == std::vector<double>{8, 9, 10, 11});
  REQUIRE(t.narrow(1, -3, 2).to_host_f64() == std::vector<double>{1, 2, 5, 6, 9, 10});
  REQUIRE(t.narrow(1, -4, 4).to_host_f64() == t.to_host_f64());
  REQUIRE_THROWS_WITH(t.narrow(1, -5, 1), Catch::Contains("narrow") && Catch::Contains("-5") &&
                                              Catch::Contains("[3, 4]"));
  // The backward puts the gradient where the window was: the last two columns.
  const Tensor x = iota({2, 4}).requires_grad_();
  sum(x.narrow(1, -2, 2) * 2.0).backward();
  REQUIRE(x.grad().to_host_f64() == std::vector<double>{0, 0, 2, 2, 0, 0, 2, 2});
}

TEST_CASE("views: slice is a strided view of the same storage", "[views][slice]") {
  const Tensor t = iota({3, 8});
  // t[:, 1:7:2]: columns 1, 3, 5; the stride along the dim is multiplied by the step.
  const Tensor odd = t.slice(1, 1, 7, 2);
  REQUIRE(shares(odd, t));
  REQUIRE(odd.shape() == Shape{3, 3});
  REQUIRE(odd.strides() == Shape{8, 2});
  REQUIRE(odd.offset() == 1);
  REQUIRE(odd.to_host_f64() == std::vector<double>{1, 3, 5, 9, 11, 13, 17, 19, 21});
  // The defaults are the whole dim: t[:] and t[1:].
  REQUIRE(t.slice(0).to_host_f64() == t.to_host_f64());
  REQUIRE(t.slice(0, 1).to_host_f64() == t.narrow(0, 1, 2).to_host_f64());
  // t[::2] on rows: rows 0 and 2; end not a multiple of the step away: 0::3 of 8 is 0, 3, 6.
  REQUIRE(t.slice(0, 0, 3, 2).to_host_f64() ==
          std::vector<double>{0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23});
  REQUIRE(t.slice(-1, 0, 8, 3).narrow(0, 0, 1).to_host_f64() == std::vector<double>{0, 3, 6});
  // Writing through the view writes the base.
  odd.fill_(-1);
  REQUIRE(t.narrow(0, 0, 1).to_host_f64() == std::vector<double>{0, -1, 2, -1, 4, -1, 6, 7});
  REQUIRE(t.version() == 1);
}

TEST_CASE("views: slice bounds count from the end and clamp as Python's do", "[views][slice]") {
  constexpr int64_t max = std::numeric_limits<int64_t>::max();
  constexpr int64_t min = std::numeric_limits<int64_t>::min();
  const Tensor v = iota({5});
  REQUIRE(v.slice(0, -2).to_host_f64() == std::vector<double>{3, 4});          // v[-2:]
  REQUIRE(v.slice(0, 0, -1).to_host_f64() == std::vector<double>{0, 1, 2, 3});  // v[:-1]
  REQUIRE(v.slice(0, -4, -1, 2).to_host_f64() == std::vector<double>{1, 3});    // v[-4:-1:2]
  REQUIRE(v.slice(0, -100, 100).to_host_f64() == v.to_host_f64());              // clamped
  REQUIRE(v.slice(0, min, max).to_host_f64() == v.to_host_f64());
  // Empty slices: end before start, start past the end, both before the start.
  REQUIRE(v.slice(0, 3, 1).shape() == Shape{0});
  REQUIRE(v.slice(0, 7).shape() == Shape{0});
  REQUIRE(v.slice(0, -100, -50).shape() == Shape{0});
  REQUIRE(v.slice(0, max, min).shape() == Shape{0});
  REQUIRE(v.slice(0, 5, max).to_host_f64().empty());
  // An empty slice keeps its base's offset, inside the storage.
  const Tensor tail = v.slice(0, 2);
  REQUIRE(tail.slice(0, 3).offset() == tail.offset());
  // A step past the size takes the first position only, however large the step.
  REQUIRE(v.slice(0, 0, max, 7).to_host_f64() == std::vector<double>{0});
  REQUIRE(v.slice(0, 2, max, max).to_host_f64() == std::vector<double>{2});
  const Tensor m = iota({2, 3});
  REQUIRE(m.slice(1, 1, max, max).to_host_f64() == std::vector<double>{1, 4});
}

TEST_CASE("views: a slice of a slice composes", "[views][slice]") {
  const Tensor t = iota({2, 16});
  // t[:, 1::2][:, 1::2] is t[:, 3::4]; t[:, 2:14:3][:, ::2] is t[:, 2:14:6].
  const Tensor twice = t.slice(1, 1, INT64_MAX, 2).slice(1, 1, INT64_MAX, 2);
  REQUIRE(twice.strides() == Shape{16, 4});
  REQUIRE(twice.offset() == 3);
  REQUIRE(twice.to_host_f64() == std::vector<double>{3, 7, 11, 15, 19, 23, 27, 31});
  REQUIRE(t.slice(1, 2, 14, 3).slice(1, 0, INT64_MAX, 2).to_host_f64() ==
          std::vector<double>{2, 8, 18, 24});
  // With a row slice and a transpose between them.
  const Tensor mixed = t.slice(0, -1).transpose(0, 1).slice(0, 10, 16, 5);
  REQUIRE(mixed.shape() == Shape{2, 1});
  REQUIRE(mixed.to_host_f64() == std::vector<double>{26, 31});
}

TEST_CASE("views: slice refuses a step below 1 and a dim outside the tensor",
          "[views][slice][errors]") {
  const Tensor t = iota({3, 8});
  REQUIRE_THROWS_WITH(t.slice(1, 0, 8, 0), Catch::Contains("slice") && Catch::Contains("step 0") &&
                                                Catch::Contains("[3, 8]"));
  REQUIRE_THROWS_WITH(t.slice(0, 2, 0, -1), Catch::Contains("slice") && Catch::Contains("step -1"));
  REQUIRE_THROWS_WITH(t.slice(2), Catch::Contains("slice"));
  REQUIRE_THROWS_WITH(scalar(1).slice(0), Catch::Contains("slice"));
  REQUIRE_THROWS_WITH(t.slice(std::numeric_limits<int64_t>::min()), Catch::Contains("slice"));
}

TEST_CASE("views: slice and select of a tensor without elements", "[views][slice][select]") {
  // [0, 5]: no element, so a slice or select along dim 1 starts nowhere; the offset stays.
  const Tensor none = zeros({0, 5}).requires_grad_();
  const Tensor odd = none.slice(1, 1, 5, 2);
  REQUIRE(odd.shape() == Shape{0, 2});
  REQUIRE(odd.offset() == 0);
  const Tensor last = none.select(1, -1);
  REQUIRE(last.shape() == Shape{0});
  REQUIRE(last.offset() == 0);
  sum(odd).backward();
  REQUIRE(none.grad().shape() == Shape{0, 5});
  REQUIRE_THROWS_WITH(zeros({3, 0}).select(1, 0), Catch::Contains("select") &&
                                                      Catch::Contains("[3, 0]"));
}

TEST_CASE("views: select removes the dim and counts negative indices from the end",
          "[views][select]") {
  const Tensor t = iota({2, 3, 4});
  // t[:, -1, :], the last position of every sequence.
  const Tensor last = t.select(1, -1);
  REQUIRE(shares(last, t));
  REQUIRE(last.shape() == Shape{2, 4});
  REQUIRE(last.strides() == Shape{12, 1});
  REQUIRE(last.offset() == 8);
  REQUIRE(last.to_host_f64() == std::vector<double>{8, 9, 10, 11, 20, 21, 22, 23});
  REQUIRE(t.select(1, 2).to_host_f64() == last.to_host_f64());
  REQUIRE(t.select(0, 1).select(-1, 0).to_host_f64() == std::vector<double>{12, 16, 20});
  // A 1-d tensor selects down to a 0-d one.
  const Tensor element = iota({4}).select(0, -2);
  REQUIRE(element.dim() == 0);
  REQUIRE(element.item() == 2);
  // Writable: t[1, 0] = 0.
  t.select(0, 1).select(0, 0).fill_(0);
  REQUIRE(t.select(0, 1).to_host_f64() ==
          std::vector<double>{0, 0, 0, 0, 16, 17, 18, 19, 20, 21, 22, 23});
}

TEST_CASE("views: select's index must be inside the dim", "[views][select][errors]") {
  constexpr int64_t max = std::numeric_limits<int64_t>::max();
  constexpr int64_t min = std::numeric_limits<int64_t>::min();
  const Tensor t = iota({2, 3});
  REQUIRE_THROWS_WITH(t.select(1, 3), Catch::Contains("select") && Catch::Contains("index 3") &&
                                          Catch::Contains("[2, 3]"));
  REQUIRE_THROWS_WITH(t.select(1, -4), Catch::Contains("select") && Catch::Contains("index -4") &&
                                           Catch::Contains("[2, 3]"));
  REQUIRE_THROWS_AS(t.select(0, max), Error);
  REQUIRE_THROWS_AS(t.select(0, min), Error);
  REQUIRE_THROWS_WITH(t.select(2, 0), Catch::Contains("select"));
  REQUIRE_THROWS_WITH(scalar(1).select(0, 0), Catch::Contains("select"));
}

TEST_CASE("views: gradients of slice and select land at their positions", "[views][grad]") {
  // L = sum(3 * x[:, -4::2]) for x [2, 5]: columns 1 and 3 get 3, the others 0.
  const Tensor x = iota({2, 5}).requires_grad_();
  sum(x.slice(1, -4, INT64_MAX, 2) * 3.0).backward();
  REQUIRE(x.grad().to_host_f64() == std::vector<double>{0, 3, 0, 3, 0, 0, 3, 0, 3, 0});
  // A slice of a slice: x[:, 0::2][:, 1:] is columns 2 and 4.
  x.zero_grad();
  sum(x.slice(1, 0, INT64_MAX, 2).slice(1, 1)).backward();
  REQUIRE(x.grad().to_host_f64() == std::vector<double>{0, 0, 1, 0, 1, 0, 0, 1, 0, 1});
  // L = sum(x[-1] * w) + sum(x[:, 0]) with w = [1, 2, 3, 4, 5], in two backwards that add up:
  // row 1 gets w, column 0 gets 1, and x[1, 0], in both, gets 1 + 1.
  x.zero_grad();
  sum(x.select(0, -1) * from_values({1, 2, 3, 4, 5}, {5})).backward();
  sum(x.select(1, 0)).backward();
  REQUIRE(x.grad().to_host_f64() == std::vector<double>{1, 0, 0, 0, 0, 2, 2, 3, 4, 5});
}

TEST_CASE("views: the positional-encoding table written through two strided slices",
          "[views][slice]") {
  // pe[:, 0::2] = sin(position * div_term); pe[:, 1::2] = cos(position * div_term), with
  // div_term = exp(arange(0, d_model, 2) * -(log(10000) / d_model)).
  constexpr int64_t max_len = 6, d_model = 8;
  const Tensor pe = zeros({max_len, d_model});
  const Tensor position = arange(0, max_len).unsqueeze(1);
  const Tensor div_term = exp(arange(0, d_model, 2) * -(std::log(10000.0) / d_model));
  pe.slice(1, 0, INT64_MAX, 2).copy_(sin(position * div_term));
  pe.slice(1, 1, INT64_MAX, 2).copy_(cos(position * div_term));
  const std::vector<double> table = pe.to_host_f64();
  for (int64_t p = 0; p < max_len; ++p) {
    for (int64_t i = 0; i < d_model; i += 2) {
      const double angle = p * std::exp(i * -(std::log(10000.0) / d_model));
      INFO("position " << p << ", column " << i);
      CHECK(table[p * d_model + i] == Approx(std::sin(angle)).margin(1e-5));
      CHECK(table[p * d_model + i + 1] == Approx(std::cos(angle)).margin(1e-5));
    }
  }
  // The table's sequence dim sliced to a length, and one position of it, as a model reads it.
  REQUIRE(pe.slice(0, 0, 3).select(0, -1).to_host_f64() ==
          std::vector<double>(table.begin() + 2 * d_model, table.begin() + 3 * d_model));
}
