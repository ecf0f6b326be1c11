// Indexing along a dim (ops/indexing.h): sort / argsort (stable, NaN largest), gather,
// scatter_add, index_select, their gradients, PyTorch's documented examples, empty and 0-d
// tensors, and one clear error for every kind of bad input.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/ops/ops.h"
#include "tests/support/thread_counts.h"

using namespace tg;

namespace {

constexpr double kIdxNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kIdxInf = std::numeric_limits<double>::infinity();

// The message of the tg::Error that fn throws ("" when it throws none).
template <typename Fn>
std::string indexing_error(Fn&& fn) {
  try {
    fn();
  } catch (const tg::Error& e) {
    return e.what();
  }
  return "";
}

// Whether the values equal `expected`, NaN matching NaN.
bool same_indexing_values(const std::vector<double>& got, const std::vector<double>& expected) {
  if (got.size() != expected.size()) return false;
  for (size_t k = 0; k < got.size(); ++k) {
    const bool both_nan = std::isnan(got[k]) && std::isnan(expected[k]);
    if (!both_nan && got[k] != expected[k]) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("sort along the last dim and along dim 0, both directions", "[indexing]") {
  const Tensor x = from_values({3, 1, 2, 9, 7, 8}, {2, 3});
  SortResult up = sort(x);
  REQUIRE(up.values.to_host_f64() == std::vector<double>{1, 2, 3, 7, 8, 9});
  REQUIRE(up.indices.dtype() == DType::i64);
  REQUIRE(up.indices.to_host_i64() == std::vector<int64_t>{1, 2, 0, 1, 2, 0});
  SortResult down = sort(x, 0, /*descending=*/true);
  REQUIRE(down.values.to_host_f64() == std::vector<double>{9, 7, 8, 3, 1, 2});
  REQUIRE(down.indices.to_host_i64() == std::vector<int64_t>{1, 1, 1, 0, 0, 0});
  REQUIRE(argsort(x, 1, true).to_host_i64() == std::vector<int64_t>{0, 2, 1, 0, 2, 1});
}

TEST_CASE("sort is stable: equal values keep their order, ascending and descending", "[indexing]") {
  const Tensor x = from_values({3, 1, 2, 1, 3, 1}, {6});
  SortResult up = sort(x);
  REQUIRE(up.values.to_host_f64() == std::vector<double>{1, 1, 1, 2, 3, 3});
  REQUIRE(up.indices.to_host_i64() == std::vector<int64_t>{1, 3, 5, 2, 0, 4});
  SortResult down = sort(x, 0, true);
  REQUIRE(down.values.to_host_f64() == std::vector<double>{3, 3, 2, 1, 1, 1});
  REQUIRE(down.indices.to_host_i64() == std::vector<int64_t>{0, 4, 2, 1, 3, 5});
  // -0 and +0 are equal: they keep their order too
  REQUIRE(argsort(from_values({0.0, -0.0, 0.0}, {3})).to_host_i64() ==
          std::vector<int64_t>{0, 1, 2});
}

TEST_CASE("sort puts NaN as the largest value, as PyTorch does", "[indexing]") {
  const Tensor x = from_values({2, kIdxNaN, -kIdxInf, kIdxNaN, 1, kIdxInf}, {6}, DType::f64);
  SortResult up = sort(x);
  REQUIRE(same_indexing_values(up.values.to_host_f64(),
                               {-kIdxInf, 1, 2, kIdxInf, kIdxNaN, kIdxNaN}));
  REQUIRE(up.indices.to_host_i64() == std::vector<int64_t>{2, 4, 0, 5, 1, 3});
  SortResult down = sort(x, -1, true);
  REQUIRE(same_indexing_values(down.values.to_host_f64(),
                               {kIdxNaN, kIdxNaN, kIdxInf, 2, 1, -kIdxInf}));
  REQUIRE(down.indices.to_host_i64() == std::vector<int64_t>{1, 3, 5, 0, 4, 2});
}

TEST_CASE("sort takes i64 keys and the half dtypes", "[indexing]") {
  SortResult ids = sort(from_indices({5, -2, 5, 0, -2}, {5}));
  REQUIRE(ids.values.dtype() == DType::i64);
  REQUIRE(ids.values.to_host_i64() == std::vector<int64_t>{-2, -2, 0, 5, 5});
  REQUIRE(ids.indices.to_host_i64() == std::vector<int64_t>{1, 4, 3, 0, 2});
  for (DType dtype : {DType::f16, DType::bf16}) {
    SortResult half = sort(from_values({0.5, -3, 0.5, 2}, {4}, dtype));
    REQUIRE(half.values.dtype() == dtype);
    REQUIRE(half.values.to_host_f64() == std::vector<double>{-3, 0.5, 0.5, 2});
    REQUIRE(half.indices.to_host_i64() == std::vector<int64_t>{1, 0, 2, 3});
  }
}

TEST_CASE("sort gradient goes back to where each value came from", "[indexing]") {
  Tensor x = from_values({3, 1, 2, 5, 4, 6}, {2, 3}).requires_grad_();
  const Tensor values = sort(x, 1).values;
  values.backward(from_values({10, 20, 30, 40, 50, 60}, {2, 3}));
  // row 0 sorted as x[1], x[2], x[0]; row 1 as x[4], x[3], x[5]
  REQUIRE(x.grad().to_host_f64() == std::vector<double>{30, 10, 20, 50, 40, 60});
  REQUIRE_FALSE(sort(x, 1).indices.requires_grad());
  REQUIRE_FALSE(argsort(x).requires_grad());
}

TEST_CASE("argsort of long lines with many ties at any thread count", "[indexing]") {
  // 3 lines of 20000 values in 0..9 (above the sort's work threshold): the stable order lists the
  // positions of each value in turn, counted here without sorting.
  const int64_t lines = 3, n = 20000;
  std::vector<double> values(lines * n);
  for (int64_t e = 0; e < lines * n; ++e) values[e] = static_cast<double>((e * 7919 + e / 13) % 10);
  std::vector<int64_t> up, down;
  for (int64_t line = 0; line < lines; ++line) {
    for (int value = 0; value < 10; ++value) {
      for (int64_t k = 0; k < n; ++k) if (values[line * n + k] == value) up.push_back(k);
    }
    for (int value = 9; value >= 0; --value) {
      for (int64_t k = 0; k < n; ++k) if (values[line * n + k] == value) down.push_back(k);
    }
  }
  tg::testing::at_thread_counts([&] {
    const Tensor x = from_values(values, {lines, n});
    REQUIRE(argsort(x, 1).to_host_i64() == up);
    REQUIRE(argsort(x, 1, true).to_host_i64() == down);
    // the same lines along dim 0 of the transpose: strided lines, inner > 1
    REQUIRE(argsort(x.transpose(0, 1), 0).transpose(0, 1).contiguous().to_host_i64() == up);
  });
}

TEST_CASE("gather follows PyTorch's examples, smaller index included", "[indexing]") {
  const Tensor t = from_values({1, 2, 3, 4}, {2, 2});
  // torch.gather(t, 1, torch.tensor([[0, 0], [1, 0]])) = [[1, 1], [4, 3]]
  REQUIRE(gather(t, 1, from_indices({0, 0, 1, 0}, {2, 2})).to_host_f64() ==
          std::vector<double>{1, 1, 4, 3});
  REQUIRE(gather(t, 0, from_indices({1, 0, 1, 1}, {2, 2})).to_host_f64() ==
          std::vector<double>{3, 2, 3, 4});
  // index [2, 1] smaller than x [3, 4] off dim 1: out[i][0] = x[i][index[i][0]]
  const Tensor x = from_values({0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23}, {3, 4});
  const Tensor out = gather(x, 1, from_indices({3, 0}, {2, 1}));
  REQUIRE(out.shape() == Shape{2, 1});
  REQUIRE(out.to_host_f64() == std::vector<double>{3, 10});
  // index longer than x along dim (repeats)
  REQUIRE(gather(x, 0, from_indices({2, 1, 0, 2, 2}, {5, 1})).to_host_f64() ==
          std::vector<double>{20, 10, 0, 20, 20});
  // i64 values move as they are
  REQUIRE(gather(from_indices({7, 8, 9}, {3}), 0, from_indices({2, 2, 0}, {3})).to_host_i64() ==
          std::vector<int64_t>{9, 9, 7});
}

TEST_CASE("gather reads an expanded index and non-contiguous x as they are", "[indexing]") {
  // x [2, 3, 2]: x[b][s][d] = 100 b + 10 s + d; rows picked per b, the same for every d
  std::vector<double> values;
  for (int b = 0; b < 2; ++b) {
    for (int s = 0; s < 3; ++s) {
      for (int d = 0; d < 2; ++d) values.push_back(100 * b + 10 * s + d);
    }
  }
  const Tensor x = from_values(values, {2, 3, 2});
  const Tensor rows = from_indices({2, 0, 1, 1}, {2, 2, 1});
  const Tensor out = gather(x, 1, rows.expand({2, 2, 2}));
  REQUIRE(out.to_host_f64() == std::vector<double>{20, 21, 0, 1, 110, 111, 110, 111});
  // the transpose [2, 3] of x[:, :, 0], gathered along dim 0
  const Tensor columns = x.narrow(2, 0, 1).squeeze(2).transpose(0, 1);  // [3, 2]
  REQUIRE(gather(columns, 1, from_indices({1, 0, 1}, {3, 1})).to_host_f64() ==
          std::vector<double>{100, 10, 120});
}

TEST_CASE("gather gradient adds repeated picks (gather's adjoint is scatter_add)", "[indexing]") {
  Tensor x = from_values({1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad_();
  const Tensor out = gather(x, 1, from_indices({2, 2, 0, 1}, {2, 2}));
  out.backward(from_values({1, 10, 100, 1000}, {2, 2}));
  REQUIRE(x.grad().to_host_f64() == std::vector<double>{0, 0, 11, 100, 1000, 0});
}

TEST_CASE("scatter_add follows PyTorch's examples", "[indexing]") {
  const Tensor src = ones({2, 5});
  // torch.zeros(3, 5).scatter_add_(0, torch.tensor([[0, 1, 2, 0, 0]]), src): index [1, 5] reads
  // only src's first row
  REQUIRE(scatter_add(zeros({3, 5}), 0, from_indices({0, 1, 2, 0, 0}, {1, 5}), src)
              .to_host_f64() == std::vector<double>{1, 0, 0, 1, 1, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0});
  // ... with index [[0, 1, 2, 0, 0], [0, 1, 2, 2, 2]]
  REQUIRE(scatter_add(zeros({3, 5}), 0, from_indices({0, 1, 2, 0, 0, 0, 1, 2, 2, 2}, {2, 5}), src)
              .to_host_f64() == std::vector<double>{2, 0, 0, 1, 1, 0, 2, 0, 0, 0, 0, 0, 2, 1, 1});
  // x is kept and added to; along the last dim, repeats add up
  const Tensor x = from_values({1, 1, 1, 5, 5, 5}, {2, 3});
  const Tensor out = scatter_add(x, 1, from_indices({2, 2, 0, 1}, {2, 2}),
                                 from_values({10, 20, 30, 40}, {2, 2}));
  REQUIRE(out.to_host_f64() == std::vector<double>{1, 1, 31, 35, 45, 5});
  REQUIRE(x.to_host_f64() == std::vector<double>{1, 1, 1, 5, 5, 5});  // not in place
}

TEST_CASE("scatter_add gradients: x gets it as is, src gathers it (zero where unread)",
          "[indexing]") {
  Tensor x = zeros({2, 3}).requires_grad_();
  Tensor src = from_values({1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad_();
  const Tensor out = scatter_add(x, 1, from_indices({2, 0}, {2, 1}), src);
  out.backward(from_values({1, 2, 3, 4, 5, 6}, {2, 3}));
  REQUIRE(x.grad().to_host_f64() == std::vector<double>{1, 2, 3, 4, 5, 6});
  // src[0][0] went to out[0][2], src[1][0] to out[1][0]; the rest of src was not read
  REQUIRE(src.grad().to_host_f64() == std::vector<double>{3, 0, 0, 4, 0, 0});
}

TEST_CASE("scatter_add on the cpu adds repeats in one order at any thread count", "[indexing]") {
  // Rows of 3000 values of very different sizes into 3 bins each: the f32 sums depend on the
  // order, and the kernel adds each row in index order (summed here in that order). One row (the
  // calling thread) and 40 rows along dim 1 (the rows split among the threads).
  for (const int64_t rows : {1, 40}) {
    const int64_t n = 3000;
    std::vector<double> values(rows * n);
    std::vector<int64_t> bins(rows * n);
    std::vector<float> sums(rows * 3, 0.0f);
    for (int64_t k = 0; k < rows * n; ++k) {
      const double size = std::pow(10.0, static_cast<double>(k % 9) - 4);
      values[k] = static_cast<float>(k % 2 ? size : -size);
      bins[k] = (k * 31 + k / 7) % 3;
      sums[(k / n) * 3 + bins[k]] += static_cast<float>(values[k]);
    }
    tg::testing::at_thread_counts([&] {
      const Tensor out = scatter_add(zeros({rows, 3}), 1, from_indices(bins, {rows, n}),
                                     from_values(values, {rows, n}));
      REQUIRE(out.to_host_f64() == std::vector<double>(sums.begin(), sums.end()));
    });
  }
}

TEST_CASE("index_select picks slices along a dim; backward adds them back", "[indexing]") {
  const Tensor x = from_values({0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23}, {3, 4});
  REQUIRE(index_select(x, 0, from_indices({2, 0}, {2})).to_host_f64() ==
          std::vector<double>{20, 21, 22, 23, 0, 1, 2, 3});
  const Tensor columns = index_select(x, 1, from_indices({3, 3, 0}, {3}));
  REQUIRE(columns.shape() == Shape{3, 3});
  REQUIRE(columns.to_host_f64() == std::vector<double>{3, 3, 0, 13, 13, 10, 23, 23, 20});
  REQUIRE(index_select(x, 0, from_indices({1}, {})).shape() == Shape{1, 4});  // 0-d: one entry
  Tensor leaf = from_values({1, 2, 3, 4, 5, 6}, {3, 2}).requires_grad_();
  index_select(leaf, 0, from_indices({2, 0, 2}, {3}))
      .backward(from_values({1, 2, 10, 20, 100, 200}, {3, 2}));
  REQUIRE(leaf.grad().to_host_f64() == std::vector<double>{10, 20, 0, 0, 101, 202});
}

TEST_CASE("indexing on empty and 0-d tensors", "[indexing]") {
  REQUIRE(sort(zeros({0})).values.shape() == Shape{0});
  REQUIRE(argsort(zeros({3, 0}), 0).shape() == Shape{3, 0});
  const SortResult scalar = sort(from_values({4}, {}));
  REQUIRE(scalar.values.shape() == Shape{});
  REQUIRE(scalar.values.item() == 4);
  REQUIRE(scalar.indices.to_host_i64() == std::vector<int64_t>{0});
  REQUIRE(gather(from_values({4}, {}), 0, from_indices({0}, {})).item() == 4);
  REQUIRE(gather(zeros({2, 3}), 1, from_indices({}, {2, 0})).shape() == Shape{2, 0});
  REQUIRE(index_select(zeros({2, 3}), 1, from_indices({}, {0})).shape() == Shape{2, 0});
  REQUIRE(scatter_add(ones({2}), 0, from_indices({}, {0}), zeros({0})).to_host_f64() ==
          std::vector<double>{1, 1});
  // huge dims without elements allocate nothing
  const int64_t huge = int64_t{1} << 40;
  REQUIRE(gather(zeros({huge, 0}), 0, from_indices({}, {huge, 0})).shape() == Shape{huge, 0});
  REQUIRE(sort(zeros({0, huge}), 1).indices.shape() == Shape{0, huge});
  REQUIRE(index_select(zeros({huge, 0}), 0, from_indices({5, huge - 1}, {2})).shape() ==
          Shape{2, 0});
}

TEST_CASE("indexing errors name the op and the shapes, never touch memory", "[indexing]") {
  const Tensor x = zeros({2, 3});
  const std::string past = indexing_error([&] { gather(x, 1, from_indices({0, 3}, {2, 1})); });
  REQUIRE(past.find("op 'gather'") != std::string::npos);
  REQUIRE(past.find("index 3") != std::string::npos);
  REQUIRE(past.find("[2, 3]") != std::string::npos);
  REQUIRE(indexing_error([&] { gather(x, 1, from_indices({-1}, {1, 1})); }).find("index -1") !=
          std::string::npos);
  REQUIRE(indexing_error([&] { gather(x, 0, from_values({0}, {1, 1})); }).find("must be i64") !=
          std::string::npos);
  REQUIRE(indexing_error([&] { gather(x, 1, from_indices({0}, {1})); }).find("rank") !=
          std::string::npos);
  REQUIRE(indexing_error([&] { gather(x, 1, from_indices({0, 0, 0}, {3, 1})); })
              .find("larger than x") != std::string::npos);
  REQUIRE(indexing_error([&] { gather(x, 2, from_indices({0}, {1, 1})); }).find("dim 2") !=
          std::string::npos);
  REQUIRE(indexing_error([&] { gather(Tensor(), 0, from_indices({0}, {1})); })
              .find("x is undefined") != std::string::npos);
  // an empty indexed dim has no valid index
  REQUIRE(indexing_error([&] { gather(zeros({2, 0}), 1, from_indices({0}, {1, 1})); })
              .find("valid: [0, 0)") != std::string::npos);
  const Tensor index = from_indices({0, 1, 1, 0}, {2, 2});
  REQUIRE(indexing_error([&] { scatter_add(x, 1, index, zeros({2, 1})); })
              .find("larger than src") != std::string::npos);
  REQUIRE(indexing_error([&] { scatter_add(x, 0, from_indices({2}, {1, 1}), x); })
              .find("op 'scatter_add': index 2") != std::string::npos);
  REQUIRE(indexing_error([&] { scatter_add(x, 0, index, zeros({2, 2}, DType::f64)); })
              .find("one floating dtype") != std::string::npos);
  REQUIRE(indexing_error([&] { scatter_add(x, 0, index, zeros({4})); }).find("one rank") !=
          std::string::npos);
  REQUIRE(indexing_error([&] { index_select(x, 0, index); }).find("1-D index") !=
          std::string::npos);
  REQUIRE(indexing_error([&] { index_select(x, 1, from_indices({1, 7}, {2})); })
              .find("op 'index_select': index 7") != std::string::npos);
  REQUIRE(indexing_error([&] { sort(from_bools({true, false}, {2})); }).find("op 'sort'") !=
          std::string::npos);
  REQUIRE(indexing_error([&] { argsort(x, -3); }).find("op 'argsort'") != std::string::npos);
}
