// CUDA GEMM on cuBLAS and the embedding rows (cuda/blas.cu) against the CPU kernels on the
// same inputs: all four transpose combinations, leading dimensions above the minimum, one item,
// uniform batch offsets (strided-batched, including a shared B with stride 0) and non-uniform ones
// (arrays of pointers), beta != 0, f32, f64, f16 and bf16, and the TF32 switch.
//
// The whole C buffer is compared, padding included: the gaps between rows and items must come
// back untouched.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/tensor.h"
#include "tests/cuda/cuda_test_support.h"

using namespace tg;
using namespace tg::testing;

namespace {

// How the batch items are placed in their buffers.
enum class Layout {
  single,      // one item
  uniform,     // item i at base + i * size: strided-batched
  shared_b,    // uniform A and C, every item with the same B (stride 0)
  scattered,   // items in shuffled slots with gaps: arrays of pointers
  mixed,       // A and B uniform, C scattered: arrays of pointers as well
};

const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::single: return "single";
    case Layout::uniform: return "uniform";
    case Layout::shared_b: return "shared_b";
    case Layout::scattered: return "scattered";
    case Layout::mixed: return "mixed";
  }
  return "?";
}

struct GemmCase {
  DType dtype = DType::f32;
  bool transpose_a = false, transpose_b = false;
  int64_t m = 5, n = 7, k = 3;
  int64_t pad_a = 0, pad_b = 0, pad_c = 0;  // leading dimensions above the minimum
  double alpha = 1, beta = 0;
  Layout layout = Layout::uniform;
};

// Offsets of `items` matrices of `size` elements each under `layout` (scattered: shuffled slots
// with a gap of 3 elements between them, after a first gap of 5).
std::vector<int64_t> place(int64_t items, int64_t size, bool scattered) {
  std::vector<int64_t> offsets(static_cast<size_t>(items));
  for (int64_t i = 0; i < items; ++i) {
    const int64_t slot = scattered ? (i * 2 + 1) % items : i;  // a permutation for odd items
    offsets[static_cast<size_t>(i)] = scattered ? 5 + slot * (size + 3) : 2 + i * size;
  }
  return offsets;
}

int64_t extent(const std::vector<int64_t>& offsets, int64_t size) {
  return *std::max_element(offsets.begin(), offsets.end()) + size;
}

struct Tolerance {
  double rtol, atol;
};

Tolerance gemm_tolerance(DType dtype, int64_t k) {
  switch (dtype) {
    case DType::f64: return {1e-12, 1e-13 * k};
    case DType::f16: return {2e-3, 1e-3};  // the f32 results rounded once: at most an ulp apart
    case DType::bf16: return {1e-2, 1e-2};
    default: return {1e-5, 1e-6 * k};
  }
}

// Runs the case on both devices from the same inputs and compares the C buffers.
void check_gemm(const GemmCase& c, Tolerance tol) {
  INFO("dtype " << dtype_name(c.dtype) << ", transpose a " << c.transpose_a << " b "
                << c.transpose_b << ", m n k " << c.m << " " << c.n << " " << c.k << ", layout "
                << layout_name(c.layout) << ", alpha " << c.alpha << ", beta " << c.beta);
  const int64_t items = c.layout == Layout::single ? 1 : 3;
  // Stored shapes (row-major): A is m x k or, transposed, k x m; B is k x n or n x k.
  const int64_t a_rows = c.transpose_a ? c.k : c.m, a_cols = c.transpose_a ? c.m : c.k;
  const int64_t b_rows = c.transpose_b ? c.n : c.k, b_cols = c.transpose_b ? c.k : c.n;
  const int64_t lda = a_cols + c.pad_a, ldb = b_cols + c.pad_b, ldc = c.n + c.pad_c;
  const int64_t a_size = a_rows * lda, b_size = b_rows * ldb, c_size = c.m * ldc;

  GemmBatch batch;
  batch.dtype = c.dtype;
  batch.transpose_a = c.transpose_a;
  batch.transpose_b = c.transpose_b;
  batch.m = c.m;
  batch.n = c.n;
  batch.k = c.k;
  batch.lda = lda;
  batch.ldb = ldb;
  batch.ldc = ldc;
  batch.alpha = c.alpha;
  batch.beta = c.beta;
  batch.a_offsets = place(items, a_size, c.layout == Layout::scattered);
  batch.b_offsets = c.layout == Layout::shared_b ? std::vector<int64_t>(items, 4)
                                                 : place(items, b_size, c.layout == Layout::scattered);
  batch.c_offsets = place(items, c_size, c.layout == Layout::scattered || c.layout == Layout::mixed);

  const int64_t a_count = extent(batch.a_offsets, a_size), b_count = extent(batch.b_offsets, b_size),
                c_count = extent(batch.c_offsets, c_size);
  const Tensor a = from_values(random_values(a_count, 1), {a_count}, c.dtype);
  const Tensor b = from_values(random_values(b_count, 2), {b_count}, c.dtype);
  const Tensor c_start = from_values(random_values(c_count, 3), {c_count}, c.dtype);

  const Tensor expected = c_start.clone();
  GemmBatch on_host = batch;
  on_host.a = a.data();
  on_host.b = b.data();
  on_host.c = expected.data();
  cpu_kernels().gemm(on_host);

  const Tensor a_device = on_cuda(a), b_device = on_cuda(b), got = on_cuda(c_start);
  GemmBatch on_device = batch;
  on_device.a = a_device.data();
  on_device.b = b_device.data();
  on_device.c = got.data();
  cuda_kernels().gemm(on_device);

  require_close(got, expected, tol.rtol, tol.atol);
}

// Sets tg::math_modes().allow_tf32 for a scope.
class Tf32Scope {
 public:
  explicit Tf32Scope(bool allowed) : previous_(math_modes().allow_tf32) {
    math_modes().allow_tf32 = allowed;
  }
  ~Tf32Scope() { math_modes().allow_tf32 = previous_; }

 private:
  bool previous_;
};

}  // namespace

TEST_CASE("cuda gemm matches the cpu for every transpose, layout and dtype", "[cuda]") {
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    for (const bool transpose_a : {false, true}) {
      for (const bool transpose_b : {false, true}) {
        for (Layout layout : {Layout::single, Layout::uniform, Layout::shared_b, Layout::scattered,
                              Layout::mixed}) {
          GemmCase c;
          c.dtype = dtype;
          c.transpose_a = transpose_a;
          c.transpose_b = transpose_b;
          c.m = 5;
          c.n = 7;
          c.k = 33;
          c.pad_a = 2;
          c.pad_b = 1;
          c.pad_c = 3;
          c.alpha = 0.75;
          c.beta = layout == Layout::uniform ? 0.0 : -0.5;
          c.layout = layout;
          check_gemm(c, gemm_tolerance(dtype, c.k));
        }
      }
    }
  }
}

TEST_CASE("cuda gemm handles vectors, tight leading dimensions and an empty k", "[cuda]") {
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    // (m, n, k): a row times a matrix, a matrix times a column, an outer product, k = 0.
    for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3>>{
             {1, 9, 4}, {6, 1, 4}, {3, 4, 1}, {1, 1, 17}, {4, 3, 0}}) {
      for (Layout layout : {Layout::single, Layout::uniform, Layout::scattered}) {
        GemmCase c;
        c.dtype = dtype;
        c.m = m;
        c.n = n;
        c.k = k;
        c.transpose_b = m == 1;
        c.pad_a = k == 0 ? 1 : 0;  // a leading dimension of at least 1 even when k = 0
        c.beta = 2.0;
        c.layout = layout;
        check_gemm(c, gemm_tolerance(dtype, std::max<int64_t>(k, 1)));
      }
    }
  }
}

TEST_CASE("cuda gemm with TF32 allowed stays close to f32 and off is full precision", "[cuda]") {
  for (const bool allowed : {true, false}) {
    INFO("allow_tf32 " << allowed);
    const Tf32Scope scope(allowed);
    for (Layout layout : {Layout::single, Layout::uniform, Layout::scattered}) {
      GemmCase c;
      c.transpose_a = true;
      c.m = 9;
      c.n = 6;
      c.k = 65;
      c.pad_c = 1;
      c.beta = 1.0;
      c.layout = layout;
      // TF32 keeps 10 mantissa bits of each input: products of numbers in [-1, 1] are off by
      // about 2^-10 at worst, summed over k of them. Without TF32, f32's own tolerance.
      check_gemm(c, allowed ? Tolerance{1e-2, 1e-3 * c.k} : gemm_tolerance(DType::f32, c.k));
    }
    // The switch must not leak into the other dtypes.
    GemmCase d;
    d.dtype = DType::f64;
    d.k = 65;
    check_gemm(d, gemm_tolerance(DType::f64, d.k));
  }
}

TEST_CASE("cuda gemm rejects integer dtypes and mismatched offsets", "[cuda]") {
  const Tensor buffer = zeros({16}, DType::i64, kCuda);
  GemmBatch batch;
  batch.dtype = DType::i64;
  batch.m = batch.n = batch.k = batch.lda = batch.ldb = batch.ldc = 2;
  batch.a = batch.b = batch.c = buffer.data();
  batch.a_offsets = batch.b_offsets = batch.c_offsets = {0};
  REQUIRE_THROWS_AS(cuda_kernels().gemm(batch), Error);
  batch.dtype = DType::f32;
  batch.b_offsets = {0, 4};
  REQUIRE_THROWS_AS(cuda_kernels().gemm(batch), Error);
}

TEST_CASE("cuda embedding rows select and add up as on the cpu", "[cuda]") {
  for (DType dtype : {DType::f32, DType::f64}) {
    INFO("dtype " << dtype_name(dtype));
    const int64_t rows = 7, width = 5;
    const Tensor table = from_values(random_values(rows * width, 4), {rows, width}, dtype);
    // Repeated indices, index shaped [2, 3]: out and src are [2, 3, width].
    const Tensor index = from_indices({3, 0, 6, 3, 3, 1}, {2, 3});

    Tensor expected = empty({2, 3, width}, dtype);
    cpu_kernels().index_select_rows(table, index, expected);
    Tensor got = empty({2, 3, width}, dtype, kCuda);
    cuda_kernels().index_select_rows(on_cuda(table), on_cuda(index), got);
    require_close(got, expected);

    // Multiples of 1/8 add up exactly in any order: the atomic adds must match exactly.
    std::vector<double> eighths = random_values(6 * width, 5, -16, 16);
    for (double& v : eighths) v = std::round(v * 8) / 8;
    for (const bool exact : {true, false}) {
      const Tensor src = exact ? from_values(eighths, {2, 3, width}, dtype)
                               : from_values(random_values(6 * width, 6), {2, 3, width}, dtype);
      Tensor expected_table = table.clone();
      Tensor got_table = on_cuda(table);
      cpu_kernels().index_add_rows(src, index, expected_table);
      cuda_kernels().index_add_rows(on_cuda(src), on_cuda(index), got_table);
      if (exact) require_close(got_table, expected_table);
      else require_close(got_table, expected_table, dtype == DType::f64 ? 1e-14 : 1e-6, 1e-6);
    }
  }
  // A wide table: more elements than one block of threads.
  const Tensor wide = from_values(random_values(3 * 300, 7), {3, 300}, DType::f32);
  const Tensor index = from_indices({2, 2, 0, 1, 2}, {5});
  Tensor expected = empty({5, 300});
  cpu_kernels().index_select_rows(wide, index, expected);
  Tensor got = empty({5, 300}, DType::f32, kCuda);
  cuda_kernels().index_select_rows(on_cuda(wide), on_cuda(index), got);
  require_close(got, expected);
  const Tensor src = from_values(random_values(5 * 300, 8), {5, 300}, DType::f32);
  Tensor expected_table = wide.clone();
  Tensor got_table = on_cuda(wide);
  cpu_kernels().index_add_rows(src, index, expected_table);
  cuda_kernels().index_add_rows(on_cuda(src), on_cuda(index), got_table);
  require_close(got_table, expected_table, 1e-6, 1e-6);
}

TEST_CASE("cuda embedding rows reject the dtypes the cpu rejects", "[cuda]") {
  const Tensor table = zeros({4, 3}, DType::f16, kCuda);
  const Tensor index = zeros({2}, DType::i64, kCuda);
  const Tensor rows = zeros({2, 3}, DType::f16, kCuda);
  REQUIRE_THROWS_AS(cuda_kernels().index_select_rows(table, index, rows), Error);
  REQUIRE_THROWS_AS(cuda_kernels().index_add_rows(rows, index, table), Error);
}
