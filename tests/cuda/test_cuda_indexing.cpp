// CUDA indexing along a dim (cuda/indexing.cu) against the CPU kernels on the same inputs:
// argsort_dim (ties, NaN, odd and long lines, inner > 1, i64 keys), gather_along (every dtype,
// strided and broadcast operands), scatter_add_along (repeats); and the ops of ops/indexing.h on
// the device, values and gradients, with their index checks.
//
// argsort and gather are exact; scatter-add with repeated destinations adds in another order on
// the device (atomicAdd), so its sums are compared within rounding.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/tensor.h"
#include "tapegrad/ops/ops.h"
#include "tests/cuda/cuda_test_support.h"

using namespace tg;
using namespace tg::testing;

namespace {

// Lines of 1, 3, 257, 1000 and 1025 elements (padded to 1, 4, 512, 1024, 2048), inner 1 and > 1.
const std::vector<DimSplit> kIndexingSplits = {
    {1, 1, 1}, {3, 1, 1}, {1, 3, 1}, {2, 257, 1}, {4, 33, 1},
    {2, 3, 5}, {3, 257, 2}, {1, 1, 7}, {1, 1000, 1}, {2, 1025, 3},
};

// Whole numbers in [-3, 3): many ties; with NaNs every 7th element and an infinity every 11th.
std::vector<double> tied_values(int64_t count, bool with_nan) {
  std::vector<double> values = random_values(count, 21, -3, 3);
  for (int64_t e = 0; e < count; ++e) {
    values[e] = std::floor(values[e]);
    if (with_nan && e % 7 == 3) values[e] = kNaN;
    if (with_nan && e % 11 == 5) values[e] = e % 2 ? kInf : -kInf;
  }
  return values;
}

// The CPU's and the device's argsort of x (on the CPU) along the split's middle axis.
void require_same_argsort(const Tensor& x, const DimSplit& split, bool descending) {
  Tensor expected = empty(x.shape(), DType::i64);
  cpu_kernels().argsort_dim(x, split, descending, expected);
  Tensor got = empty(x.shape(), DType::i64, kCuda);
  cuda_kernels().argsort_dim(on_cuda(x), split, descending, got);
  REQUIRE(on_cpu(got).to_host_i64() == expected.to_host_i64());
}

}  // namespace

TEST_CASE("cuda argsort matches the cpu: stable on ties, NaN largest, odd and long lines",
          "[cuda]") {
  for (DType dtype : {DType::f32, DType::f64, DType::i64}) {
    for (const DimSplit& split : kIndexingSplits) {
      for (const bool descending : {false, true}) {
        INFO("dtype " << dtype_name(dtype) << ", split [" << split.outer << ", " << split.n
                      << ", " << split.inner << "], descending " << descending);
        const Shape shape{split.outer, split.n, split.inner};
        const std::vector<double> values = tied_values(numel(shape), dtype != DType::i64);
        require_same_argsort(from_values(values, shape, dtype), split, descending);
      }
    }
  }
}

TEST_CASE("cuda argsort of an empty line or no lines writes nothing", "[cuda]") {
  Tensor got = empty({2, 0, 3}, DType::i64, kCuda);
  cuda_kernels().argsort_dim(empty({2, 0, 3}, DType::f32, kCuda), DimSplit{2, 0, 3}, false, got);
  REQUIRE(got.numel() == 0);
}

TEST_CASE("cuda gather_along matches the cpu in every dtype, strided and broadcast", "[cuda]") {
  // x [4, 6, 5] read through its transpose [5, 6, 4] along dim 1, index [5, 3, 4] made of a
  // [5, 3, 1] index broadcast along the last dim
  const Tensor index_cpu =
      expand_untaped(from_indices({5, 0, 2, 1, 1, 3, 0, 5, 4, 2, 2, 2, 3, 0, 1}, {5, 3, 1}),
                     {5, 3, 4});
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64}) {
    INFO("dtype " << dtype_name(dtype));
    const Tensor x = random_tensor({4, 6, 5}, dtype, 3, -8, 8).transpose(0, 2);
    const Tensor line = expand_untaped(x.narrow(1, 0, 1), {5, 3, 4});
    Tensor expected = empty({5, 3, 4}, dtype);
    cpu_kernels().gather_along(line, x.strides()[1], index_cpu, expected);
    const Tensor x_cuda = on_cuda(random_tensor({4, 6, 5}, dtype, 3, -8, 8)).transpose(0, 2);
    const Tensor line_cuda = expand_untaped(x_cuda.narrow(1, 0, 1), {5, 3, 4});
    const Tensor index_cuda = expand_untaped(on_cuda(index_cpu.narrow(2, 0, 1)), {5, 3, 4});
    Tensor got = empty({5, 3, 4}, dtype, kCuda);
    cuda_kernels().gather_along(line_cuda, x_cuda.strides()[1], index_cuda, got);
    REQUIRE(on_cpu(got).to_host_f64() == expected.to_host_f64());
  }
}

TEST_CASE("cuda scatter_add_along matches the cpu with repeated destinations", "[cuda]") {
  // 200 values per column added into 7 rows of [7, 9] along dim 0
  std::vector<int64_t> rows(200 * 9);
  for (size_t e = 0; e < rows.size(); ++e) rows[e] = static_cast<int64_t>((e * 5 + e / 9) % 7);
  for (DType dtype : {DType::f32, DType::f64}) {
    INFO("dtype " << dtype_name(dtype));
    const Tensor src = random_tensor({200, 9}, dtype, 4);
    const Tensor index = from_indices(rows, {200, 9});
    Tensor expected = zeros({7, 9}, dtype);
    cpu_kernels().scatter_add_along(src, index, expand_untaped(expected.narrow(0, 0, 1), {200, 9}),
                                    expected.strides()[0]);
    Tensor got = zeros({7, 9}, dtype, kCuda);
    cuda_kernels().scatter_add_along(on_cuda(src), on_cuda(index),
                                     expand_untaped(got.narrow(0, 0, 1), {200, 9}),
                                     got.strides()[0]);
    require_close(got, expected, dtype == DType::f64 ? 1e-12 : 1e-5, 1e-5);
  }
}

// sort, gather, scatter_add and index_select of x [3, 40, 2] on `device`, and the gradients of x
// and src of a weighted sum of their outputs, in one list (left on the device).
std::vector<Tensor> indexing_op_results(const Tensor& x_cpu, const Tensor& src_cpu,
                                        const Tensor& weights_cpu, Device device) {
  const Tensor x = copy_to_device(x_cpu, device).detach().requires_grad_();
  const Tensor src = copy_to_device(src_cpu, device).detach().requires_grad_();
  const Tensor weights = copy_to_device(weights_cpu, device);
  std::vector<int64_t> picks(3 * 6 * 2);
  for (size_t e = 0; e < picks.size(); ++e) picks[e] = static_cast<int64_t>((e * 13) % 40);
  const Tensor index = from_indices(picks, {3, 6, 2}, device);
  const SortResult sorted = sort(x, 1, /*descending=*/true);
  const Tensor picked = gather(x, 1, index);
  const Tensor added = scatter_add(x, 1, index, src);
  const Tensor selected = index_select(x, 1, from_indices({39, 0, 39, 7}, {4}, device));
  const Tensor loss = sum(sorted.values * weights) + sum(picked * picked) +
                      sum(added * added) + sum(selected * 3.0);
  loss.backward();
  return {sorted.values, sorted.indices, picked, added, selected, x.grad(), src.grad()};
}

TEST_CASE("cuda indexing ops match the cpu, values and gradients", "[cuda]") {
  // Whole numbers: sort meets ties, which both devices must break by position.
  std::vector<double> values = random_values(3 * 40 * 2, 8, -5, 5);
  for (double& value : values) value = std::floor(value);
  const Tensor x = from_values(values, {3, 40, 2}, DType::f64);
  const Tensor src = random_tensor({3, 7, 2}, DType::f64, 9);
  const Tensor weights = random_tensor({3, 40, 2}, DType::f64, 10);
  const std::vector<Tensor> expected = indexing_op_results(x, src, weights, kCPU);
  const std::vector<Tensor> got = indexing_op_results(x, src, weights, kCuda);
  for (size_t k = 0; k < expected.size(); ++k) {
    INFO("result " << k);
    require_close(got[k], expected[k], 1e-12, 1e-12);
  }
}

TEST_CASE("cuda indexing ops check their indices on the device", "[cuda]") {
  const Tensor x = zeros({2, 3}, DType::f32, kCuda);
  REQUIRE_THROWS_WITH(gather(x, 1, from_indices({0, 3}, {2, 1}, kCuda)),
                      Catch::Contains("op 'gather': index 3"));
  REQUIRE_THROWS_WITH(index_select(x, 0, from_indices({-2}, {1}, kCuda)),
                      Catch::Contains("op 'index_select': index -2"));
  REQUIRE_THROWS_WITH(gather(x, 1, from_indices({0}, {1, 1})), Catch::Contains("gather"));
}
