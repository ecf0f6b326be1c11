// CUDA reductions (cuda/reduce.cu) against the CPU kernels on the same inputs: sum_dim,
// max_dim, gather_dim, scatter_add_dim, softmax_dim and normalize_rows, for every dtype each one
// supports and for odd splits (rows of 1, 3 and 257 elements, inner > 1).
//
// Sums run in another order on the device, so they are compared with tolerances; max, gather and
// scatter-add (one addition per destination) are exact.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/tensor.h"
#include "tests/cuda/cuda_test_support.h"

using namespace tg;
using namespace tg::testing;

namespace {

// Row lengths of 1, 3, 257 (more than one block of threads), with inner 1 and inner > 1.
const std::vector<DimSplit> kSplits = {
    {1, 1, 1}, {3, 1, 1}, {1, 3, 1}, {2, 257, 1}, {4, 33, 1}, {2, 3, 5}, {3, 257, 2}, {1, 1, 7},
};

Shape split_shape(const DimSplit& s) { return {s.outer, s.n, s.inner}; }
Shape kept_shape(const DimSplit& s) { return {s.outer, s.inner}; }

struct Tolerance {
  double rtol, atol;
};

// Sums of up to 257 values in [-2, 2]: the order of the additions moves the last bits.
Tolerance sum_tolerance(DType dtype) {
  switch (dtype) {
    case DType::f64: return {1e-12, 1e-12};
    case DType::f16: return {2e-3, 1e-3};   // both round the f32 sum once: at most an ulp apart
    case DType::bf16: return {1e-2, 1e-2};
    default: return {1e-5, 1e-4};
  }
}

}  // namespace

TEST_CASE("cuda sum over a dim matches the cpu in every dtype", "[cuda]") {
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    for (const DimSplit& split : kSplits) {
      INFO("dtype " << dtype_name(dtype) << ", split [" << split.outer << ", " << split.n << ", "
                    << split.inner << "]");
      const Tensor x = random_tensor(split_shape(split), dtype, 11, -2, 2);
      Tensor expected = empty(kept_shape(split), dtype);
      cpu_kernels().sum_dim(x, split, expected);
      Tensor got = empty(kept_shape(split), dtype, kCuda);
      cuda_kernels().sum_dim(on_cuda(x), split, got);
      const Tolerance tol = sum_tolerance(dtype);
      require_close(got, expected, tol.rtol, tol.atol);
    }
  }
}

TEST_CASE("cuda sum over an empty dim gives zeros", "[cuda]") {
  const DimSplit split{2, 0, 3};
  Tensor got = full({2, 3}, 5.0, DType::f32, kCuda);
  cuda_kernels().sum_dim(empty({2, 0, 3}, DType::f32, kCuda), split, got);
  require_close(got, zeros({2, 3}));
}

TEST_CASE("cuda max over a dim matches the cpu with ties", "[cuda]") {
  for (DType dtype : {DType::f32, DType::f64}) {
    for (const DimSplit& split : kSplits) {
      INFO("dtype " << dtype_name(dtype) << ", split [" << split.outer << ", " << split.n << ", "
                    << split.inner << "]");
      // Whole numbers from a small range: many ties, which the first index must win.
      std::vector<double> values = random_values(split.outer * split.n * split.inner, 5, -3, 3);
      for (double& v : values) v = std::floor(v);
      for (const bool with_ties : {true, false}) {
        const Tensor x = with_ties ? from_values(values, split_shape(split), dtype)
                                   : random_tensor(split_shape(split), dtype, 6, -2, 2);
        Tensor expected_values = empty(kept_shape(split), dtype);
        Tensor expected_indices = empty(kept_shape(split), DType::i64);
        cpu_kernels().max_dim(x, split, expected_values, expected_indices);
        Tensor got_values = empty(kept_shape(split), dtype, kCuda);
        Tensor got_indices = empty(kept_shape(split), DType::i64, kCuda);
        cuda_kernels().max_dim(on_cuda(x), split, got_values, got_indices);
        require_close(got_values, expected_values);
        REQUIRE(on_cpu(got_indices).to_host_i64() == expected_indices.to_host_i64());
      }
    }
  }
}

TEST_CASE("cuda max over a dim treats NaN, infinities and signed zeros as the cpu does", "[cuda]") {
  // Rows of 4 (inner 1): NaN first, NaN later (NaN propagates: the first NaN is picked), all NaN
  // but the first, all -inf, +inf, -0 before +0 (equal: the first wins), and a NaN between equal
  // maxima.
  const std::vector<std::vector<double>> rows = {
      {kNaN, 5, 7, 1},    {1, kNaN, 7, 2},      {3, kNaN, kNaN, kNaN}, {-kInf, -kInf, -kInf, -kInf},
      {1, kInf, 2, kInf}, {-0.0, 0.0, -1, -0.0}, {4, kNaN, 4, 3},       {kNaN, kNaN, kNaN, kNaN},
  };
  std::vector<double> flat;
  for (const auto& row : rows) flat.insert(flat.end(), row.begin(), row.end());
  const int64_t count = static_cast<int64_t>(rows.size());
  for (DType dtype : {DType::f32, DType::f64}) {
    INFO("dtype " << dtype_name(dtype));
    for (const DimSplit split : {DimSplit{count, 4, 1}, DimSplit{1, 4, count}}) {
      // inner = count: the same numbers read as columns of a [1, 4, count] tensor instead.
      const Tensor x = from_values(flat, split_shape(split), dtype);
      Tensor expected_values = empty(kept_shape(split), dtype);
      Tensor expected_indices = empty(kept_shape(split), DType::i64);
      cpu_kernels().max_dim(x, split, expected_values, expected_indices);
      Tensor got_values = empty(kept_shape(split), dtype, kCuda);
      Tensor got_indices = empty(kept_shape(split), DType::i64, kCuda);
      cuda_kernels().max_dim(on_cuda(x), split, got_values, got_indices);
      require_close(got_values, expected_values);
      REQUIRE(on_cpu(got_indices).to_host_i64() == expected_indices.to_host_i64());
    }
  }
  // Spot checks of the rule itself (rows as given, inner 1).
  const Tensor x = from_values(flat, {count, 4, 1}, DType::f32);
  Tensor values = empty({count, 1}, DType::f32, kCuda);
  Tensor indices = empty({count, 1}, DType::i64, kCuda);
  cuda_kernels().max_dim(on_cuda(x), DimSplit{count, 4, 1}, values, indices);
  REQUIRE(on_cpu(indices).to_host_i64() == std::vector<int64_t>{0, 1, 1, 0, 1, 0, 1, 0});
}

TEST_CASE("cuda max over a dim propagates a NaN wherever it sits, as the cpu does", "[cuda]") {
  // Rows longer than a block's threads (257, 600): each thread scans elements blockDim.x apart, so
  // a NaN at the first, a middle or the last position lands in a different thread's partial pick
  // and must win the tree. Also two NaNs (the first wins) and inner > 1.
  for (DType dtype : {DType::f32, DType::f64}) {
    for (const DimSplit split : {DimSplit{2, 257, 1}, DimSplit{1, 600, 1}, DimSplit{2, 257, 3},
                                 DimSplit{3, 33, 1}, DimSplit{1, 1, 4}}) {
      const int64_t n = split.n;
      for (const std::vector<int64_t>& nan_at : std::vector<std::vector<int64_t>>{
               {0}, {n / 2}, {n - 1}, {n - 1, n / 3}, {}}) {
        INFO("dtype " << dtype_name(dtype) << ", split [" << split.outer << ", " << n << ", "
                      << split.inner << "], NaNs " << nan_at.size());
        std::vector<double> values = random_values(split.outer * n * split.inner, 9, -2, 2);
        for (int64_t o = 0; o < split.outer; ++o) {
          for (int64_t k : nan_at) values[(o * n + k) * split.inner + split.inner - 1] = kNaN;
        }
        const Tensor x = from_values(values, split_shape(split), dtype);
        Tensor expected_values = empty(kept_shape(split), dtype);
        Tensor expected_indices = empty(kept_shape(split), DType::i64);
        cpu_kernels().max_dim(x, split, expected_values, expected_indices);
        Tensor got_values = empty(kept_shape(split), dtype, kCuda);
        Tensor got_indices = empty(kept_shape(split), DType::i64, kCuda);
        cuda_kernels().max_dim(on_cuda(x), split, got_values, got_indices);
        require_close(got_values, expected_values);
        REQUIRE(on_cpu(got_indices).to_host_i64() == expected_indices.to_host_i64());
        if (nan_at.empty()) continue;
        // the cpu's pick is the first NaN: the reference by hand
        const int64_t first_nan = *std::min_element(nan_at.begin(), nan_at.end());
        REQUIRE(std::isnan(expected_values.to_host_f64()[split.inner - 1]));
        REQUIRE(expected_indices.to_host_i64()[split.inner - 1] == first_nan);
      }
    }
  }
}

TEST_CASE("cuda gather and scatter add over a dim match the cpu exactly", "[cuda]") {
  for (DType dtype : {DType::f32, DType::f64}) {
    for (const DimSplit& split : kSplits) {
      INFO("dtype " << dtype_name(dtype) << ", split [" << split.outer << ", " << split.n << ", "
                    << split.inner << "]");
      std::mt19937 engine(7);
      std::uniform_int_distribution<int64_t> pick(0, split.n - 1);
      std::vector<int64_t> picked(static_cast<size_t>(split.outer * split.inner));
      for (int64_t& p : picked) p = pick(engine);
      const Tensor index = from_indices(picked, kept_shape(split));

      const Tensor x = random_tensor(split_shape(split), dtype, 8, -2, 2);
      Tensor expected = empty(kept_shape(split), dtype);
      cpu_kernels().gather_dim(x, split, index, expected);
      Tensor got = empty(kept_shape(split), dtype, kCuda);
      cuda_kernels().gather_dim(on_cuda(x), split, on_cuda(index), got);
      require_close(got, expected);

      const Tensor src = random_tensor(kept_shape(split), dtype, 9, -2, 2);
      Tensor expected_out = random_tensor(split_shape(split), dtype, 10, -2, 2);
      Tensor got_out = on_cuda(expected_out);
      cpu_kernels().scatter_add_dim(src, split, index, expected_out);
      cuda_kernels().scatter_add_dim(on_cuda(src), split, on_cuda(index), got_out);
      require_close(got_out, expected_out);
    }
  }
}

TEST_CASE("cuda softmax and log softmax over a dim match the cpu", "[cuda]") {
  for (DType dtype : {DType::f32, DType::f64}) {
    const Tolerance tol = dtype == DType::f64 ? Tolerance{1e-12, 1e-14} : Tolerance{1e-5, 1e-6};
    for (const DimSplit& split : kSplits) {
      for (const bool log : {false, true}) {
        INFO("dtype " << dtype_name(dtype) << ", log " << log << ", split [" << split.outer << ", "
                      << split.n << ", " << split.inner << "]");
        // Large values: without subtracting the maximum, exp would overflow.
        std::vector<double> values = random_values(split.outer * split.n * split.inner, 12, -8, 8);
        values[0] += 100;
        const Tensor x = from_values(values, split_shape(split), dtype);
        Tensor expected = empty(split_shape(split), dtype);
        cpu_kernels().softmax_dim(x, split, log, expected);
        Tensor got = empty(split_shape(split), dtype, kCuda);
        cuda_kernels().softmax_dim(on_cuda(x), split, log, got);
        require_close(got, expected, tol.rtol, tol.atol);
      }
    }
  }
}

TEST_CASE("cuda softmax of masked rows matches the cpu", "[cuda]") {
  // Rows of 5: fully masked (-inf everywhere: 0, or -inf for log), partly masked, one entry
  // left, constant, with a NaN (all NaN), all NaN (all NaN, not a masked row's zeros), a NaN
  // among -inf (all NaN), and +inf (inf - inf: NaN).
  const std::vector<double> flat = {-kInf, -kInf, -kInf, -kInf, -kInf,  //
                                    1.5,   -kInf, 0.25,  -kInf, -3,     //
                                    -kInf, -kInf, -kInf, 2,     -kInf,  //
                                    0,     0,     0,     0,     0,      //
                                    1,     kNaN,  2,     -kInf, 0,      //
                                    kNaN,  kNaN,  kNaN,  kNaN,  kNaN,   //
                                    -kInf, -kInf, kNaN,  -kInf, -kInf,  //
                                    1,     kInf,  2,     3,     -kInf};
  for (DType dtype : {DType::f32, DType::f64}) {
    for (const bool log : {false, true}) {
      for (const DimSplit split : {DimSplit{8, 5, 1}, DimSplit{1, 5, 8}}) {
        INFO("dtype " << dtype_name(dtype) << ", log " << log << ", inner " << split.inner);
        const Tensor x = from_values(flat, split_shape(split), dtype);
        Tensor expected = empty(split_shape(split), dtype);
        cpu_kernels().softmax_dim(x, split, log, expected);
        Tensor got = empty(split_shape(split), dtype, kCuda);
        cuda_kernels().softmax_dim(on_cuda(x), split, log, got);
        require_close(got, expected, 1e-6, 1e-7);
      }
    }
  }
}

TEST_CASE("cuda row normalisation matches the cpu", "[cuda]") {
  const std::vector<Shape> shapes = {{1, 1}, {3, 1}, {1, 3}, {2, 257}, {5, 33}, {2, 3, 7}};
  for (DType dtype : {DType::f32, DType::f64}) {
    const Tolerance tol = dtype == DType::f64 ? Tolerance{1e-12, 1e-12} : Tolerance{1e-5, 1e-5};
    for (const Shape& shape : shapes) {
      INFO("dtype " << dtype_name(dtype) << ", shape " << shape_str(shape));
      // Rows with an offset (mean about 10) and one constant row (variance 0: rstd = 1/sqrt(eps)).
      std::vector<double> values = random_values(numel(shape), 13, 8, 12);
      const int64_t width = shape.back();
      for (int64_t k = 0; k < width; ++k) values[static_cast<size_t>(k)] = 3.0;
      const Tensor x = from_values(values, shape, dtype);
      const int64_t rows = numel(shape) / width;
      for (const double eps : {1e-5, 0.5}) {
        Tensor out = empty(shape, dtype), mean = empty({rows}, dtype), rstd = empty({rows}, dtype);
        cpu_kernels().normalize_rows(x, eps, out, mean, rstd);
        Tensor got_out = empty(shape, dtype, kCuda), got_mean = empty({rows}, dtype, kCuda),
               got_rstd = empty({rows}, dtype, kCuda);
        cuda_kernels().normalize_rows(on_cuda(x), eps, got_out, got_mean, got_rstd);
        require_close(got_out, out, tol.rtol, tol.atol);
        require_close(got_mean, mean, tol.rtol, tol.atol);
        require_close(got_rstd, rstd, tol.rtol, tol.atol);
      }
    }
  }
}

TEST_CASE("cuda reductions reject the dtypes the cpu rejects", "[cuda]") {
  const DimSplit split{2, 3, 1};
  const Tensor half = empty({2, 3, 1}, DType::f16, kCuda);
  const Tensor half_out = empty({2, 1}, DType::f16, kCuda);
  const Tensor whole = empty({2, 3, 1}, DType::i64, kCuda);
  const Tensor whole_out = empty({2, 1}, DType::i64, kCuda);
  const Tensor index = zeros({2, 1}, DType::i64, kCuda);
  REQUIRE_THROWS_AS(cuda_kernels().sum_dim(whole, split, whole_out), Error);
  REQUIRE_THROWS_AS(cuda_kernels().max_dim(half, split, half_out, index), Error);
  REQUIRE_THROWS_AS(cuda_kernels().gather_dim(half, split, index, half_out), Error);
  REQUIRE_THROWS_AS(cuda_kernels().scatter_add_dim(half_out, split, index, half), Error);
  REQUIRE_THROWS_AS(cuda_kernels().softmax_dim(half, split, false, half), Error);
  const Tensor rows = empty({2}, DType::f16, kCuda);
  REQUIRE_THROWS_AS(cuda_kernels().normalize_rows(half, 1e-5, half, rows, rows), Error);
}
