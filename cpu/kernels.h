#pragma once
// The CPU implementation of the kernel interface: plain loops over strided memory, OpenBLAS for
// GEMM, the thread pool (runtime/thread_pool.h) across rows where the work is large enough to pay for
// the threads (the thread policy: runtime/threads.h). Where a kernel is blocked or vectorised for
// speed (GEMM, softmax, attention), cpu/reference.h has the same math as plain loops, and the
// tests compare them.
#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <type_traits>

#include "tapegrad/autograd/element_types.h"
#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/tensor.h"
#include "tapegrad/runtime/thread_pool.h"
#include "tapegrad/runtime/threads.h"

namespace tg::cpu {

// The element types and their conversions (autograd/element_types.h), shared with cuda/.
using tg::BFloat16;
using tg::convert;
using tg::dispatch_any;
using tg::Half;

// Calls body(T{}) for f32 and f64; other dtypes are an error naming the kernel.
template <typename Body>
void dispatch_floating(DType dtype, const char* kernel, Body&& body) {
  if (dtype == DType::f32) return body(float{});
  if (dtype == DType::f64) return body(double{});
  fail("kernel '", kernel, "' on cpu: dtype ", dtype_name(dtype), " is not supported (f32, f64)");
}

// Calls body(Half{}) or body(BFloat16{}); other dtypes are an error naming the kernel.
template <typename Body>
void dispatch_half(DType dtype, const char* kernel, Body&& body) {
  if (dtype == DType::f16) return body(Half{});
  if (dtype == DType::bf16) return body(BFloat16{});
  fail("kernel '", kernel, "' on cpu: dtype ", dtype_name(dtype), " is not f16 or bf16");
}

// The f16 / bf16 paths of the kernels below (mixed precision): each element is loaded, converted
// to f32, computed in f32 and rounded once when stored; reductions and GEMM accumulate in f32.
void unary_half(UnaryOp op, const Tensor& x, double scalar, const Tensor& out);
void binary_half(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);
void sum_dim_half(const Tensor& x, DimSplit split, const Tensor& out);
void gemm_half(const GemmBatch& batch);

// The fast paths, each in its own file compiled for AVX2 + FMA and called only when
// fast_paths_enabled() (runtime/features.h); the kernel's plain loop is the reference.
void adam_step_f32_avx2(const AdamStep& step, float* param, const float* grad, float* exp_avg,
                        float* exp_avg_sq, int64_t count);  // cpu/fast/optim_avx2.cpp
// Elementwise f32 on AVX2 + FMA (cpu/fast/elementwise_avx2.cpp): out[i] = gelu(x[i]) (exact,
// x Phi(x)) and gelu'(x[i]) = Phi(x) + x phi(x) for i < n, within 1e-6 relative (unary's
// UnaryOp::gelu and gelu_grad); out[i] = exp(x[i]) within 2 ulp (UnaryOp::exp); and
// out[i] = exp(x[i] - shift) returning their sum (softmax_dim's rows).
void gelu_f32_avx2(const float* x, float* out, int64_t n);
void gelu_grad_f32_avx2(const float* x, float* out, int64_t n);
void exp_f32_avx2(const float* x, float* out, int64_t n);
void gelu_backward_f32_avx2(const float* g, const float* x, float* out, int64_t n);  // g gelu'(x)
float exp_shifted_f32_avx2(const float* x, float shift, float* out, int64_t n);
// The three GELU kernels above with 16 lanes (cpu/fast/elementwise_avx512.cpp, compiled for
// AVX-512 F): taken in their place where cpu_has_avx512f() (runtime/features.h), same bound.
void gelu_f32_avx512(const float* x, float* out, int64_t n);
void gelu_grad_f32_avx512(const float* x, float* out, int64_t n);
void gelu_backward_f32_avx512(const float* g, const float* x, float* out, int64_t n);

// The one call into BLAS (cpu/fast/blas.cpp): C = alpha op(A) op(B) + beta C for one row-major
// matrix, computed on the calling thread (OpenBLAS is single-threaded, runtime/threads.h); at
// most 3 rows of C as a GEMV a row, which skips the GEMM's packing of op(B).
void blas_gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
               const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
               int64_t ldc);
void blas_gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, double alpha,
               const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
               int64_t ldc);

// Calls body(offsets) for every element of `shape` in row-major order, where offsets[k] is the
// element's position (in elements) under strides[k].
template <size_t N, typename Body>
void for_each_element(const Shape& shape, const std::array<const Shape*, N>& strides, Body&& body) {
  const int64_t total = numel(shape);
  if (total == 0) return;
  std::array<int64_t, N> position{};
  if (shape.empty()) return body(position);
  const size_t last = shape.size() - 1;
  std::array<int64_t, N> step;
  for (size_t k = 0; k < N; ++k) step[k] = (*strides[k])[last];
  std::vector<int64_t> index(shape.size(), 0);
  for (int64_t done = 0; done < total; done += shape[last]) {
    std::array<int64_t, N> p = position;
    for (int64_t i = 0; i < shape[last]; ++i) {
      body(p);
      for (size_t k = 0; k < N; ++k) p[k] += step[k];
    }
    for (size_t d = last; d-- > 0;) {  // odometer over the outer dims
      for (size_t k = 0; k < N; ++k) position[k] += (*strides[k])[d];
      if (++index[d] < shape[d]) break;
      for (size_t k = 0; k < N; ++k) position[k] -= (*strides[k])[d] * shape[d];
      index[d] = 0;
    }
  }
}

// The larger of a and b, and NaN when either is NaN: a row's maximum that carries a NaN on into
// the row's softmax, so that a row of NaNs gives NaNs as PyTorch's does (std::max skips a NaN
// second argument, and such a row would look fully masked, -inf everywhere, and give zeros).
template <typename T>
inline T max_or_nan(T a, T b) {
  return b > a || b != b ? b : a;
}

// Below this many FLOPs a product runs on the calling thread: forking costs more than it saves
// (gemm_batch in cpu/fast/blas.cpp, the linear backward in cpu/fast/linear.cpp).
constexpr double kParallelFlops = 1 << 21;

// Whether the n entries from `row` are all zero (a NaN is not): a row of a gradient that adds
// nothing (the attention and linear backwards skip them). An entry is +0 or -0 when its bits,
// the sign shifted out, are all 0. OR-ing those bits over a block of entries has no branch, so the
// compiler runs it in vector registers (std::all_of, a compare and branch an entry, was slower:
// docs/design-notes.md). A nonzero entry stops the scan at the end of its block.
template <typename T>
bool all_zero(const T* row, int64_t n) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "all_zero: f32 and f64 rows");
  using Bits = std::conditional_t<sizeof(T) == 8, uint64_t, uint32_t>;
  constexpr int64_t kBlock = 64;
  for (int64_t first = 0; first < n; first += kBlock) {
    const int64_t past = std::min(n, first + kBlock);
    Bits magnitude_bits = 0;
    for (int64_t i = first; i < past; ++i) magnitude_bits |= std::bit_cast<Bits>(row[i]) << 1;
    if (magnitude_bits != 0) return false;
  }
  return true;
}

// Row-by-row kernels over large tensors (copies, fills, broadcast elementwise ops) are split among
// the threads from this many bytes of output: one thread does not fill the memory bandwidth, and
// a linear's bias rows or a narrow's zeros run to megabytes.
constexpr int64_t kParallelBytes = int64_t{1} << 18;

// Runs body(first, past) over [0, count): in one piece on the calling thread when `bytes` (what
// all the pieces write) is at most kParallelBytes, else in chunks on the pool.
template <typename Body>
void in_pieces(int64_t count, int64_t bytes, Body&& body) {
  const double bytes_per_index = static_cast<double>(bytes) / std::max<int64_t>(count, 1);
  parallel_for(count, grain_for(bytes_per_index, kParallelBytes), body);
}

// Where row `row` (in row-major order over the dims `outer`) starts, with these strides.
inline int64_t row_offset(int64_t row, const Shape& outer, const Shape& strides) {
  int64_t offset = 0;
  for (size_t d = outer.size(); d-- > 0;) {
    offset += (row % outer[d]) * strides[d];
    row /= outer[d];
  }
  return offset;
}

class CpuKernels final : public Kernels {
 public:
  const char* name() const override { return "cpu"; }
  void* allocate(size_t nbytes) override;
  void deallocate(void* ptr, size_t nbytes) override;
  void copy(const Tensor& src, const Tensor& dst) override;
  void fill(const Tensor& dst, double value) override;
  void unary(UnaryOp op, const Tensor& x, double scalar, const Tensor& out) override;
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) override;
  void where(const Tensor& condition, const Tensor& a, const Tensor& b, const Tensor& out) override;
  void compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out) override;
  void predicate(PredicateOp op, const Tensor& x, const Tensor& out) override;
  void sum_dim(const Tensor& x, DimSplit split, const Tensor& out) override;
  void max_dim(const Tensor& x, DimSplit split, const Tensor& values, const Tensor& indices) override;
  void gather_dim(const Tensor& x, DimSplit split, const Tensor& index, const Tensor& out) override;
  void scatter_add_dim(const Tensor& src, DimSplit split, const Tensor& index, const Tensor& out) override;
  void gather_along(const Tensor& line, int64_t step, const Tensor& index,
                    const Tensor& out) override;
  void scatter_add_along(const Tensor& src, const Tensor& index, const Tensor& line,
                         int64_t step) override;
  void argsort_dim(const Tensor& x, DimSplit split, bool descending,
                   const Tensor& indices) override;
  void softmax_dim(const Tensor& x, DimSplit split, bool log, const Tensor& out) override;
  void gemm(const GemmBatch& batch) override;
  bool linear_backward(const Tensor& g, const Tensor& x, const Tensor& weight, const Tensor& dx,
                       const Tensor& dw, const Tensor& db) override;  // cpu/fast/linear.cpp
  void index_select_rows(const Tensor& table, const Tensor& index, const Tensor& out) override;
  void index_add_rows(const Tensor& src, const Tensor& index, const Tensor& table) override;
  void normalize_rows(const Tensor& x, double eps, const Tensor& out, const Tensor& mean,
                      const Tensor& rstd) override;
  bool layer_norm_forward(const Tensor& x, double eps, const Tensor& weight, const Tensor& bias,
                          Tensor* y, Tensor* xhat, Tensor* mean,
                          Tensor* rstd) override;  // cpu/fast/layer_norm.cpp
  Tensor gelu_backward(const Tensor& g, const Tensor& x) override;  // cpu/elementwise.cpp
  bool layer_norm_backward(const Tensor& g, const Tensor& xhat, const Tensor& rstd,
                           const Tensor& weight, Tensor* dx, Tensor* dweight,
                           Tensor* dbias) override;  // cpu/fast/layer_norm.cpp
  void uniform(const Tensor& out, uint64_t seed, uint64_t offset) override;
  void attention_forward(const AttentionProblem& problem, const Tensor& out,
                         const Tensor& logsumexp) override;
  void attention_backward(const AttentionProblem& problem, const Tensor& out,
                          const Tensor& logsumexp, const Tensor& grad_out, const Tensor& grad_q,
                          const Tensor& grad_k, const Tensor& grad_v) override;
  void copy_from_host(const void* host_bytes, const Tensor& dst) override;
  void copy_to_host(const Tensor& src, void* host_bytes) override;
  IndexSummary screen_indices(const Tensor& index, int64_t ignore, const Tensor& safe,
                              const Tensor& keep) override;
  void sgd_step(const SgdStep& step, const Tensor& param, const Tensor& grad,
                const Tensor& momentum_buffer) override;
  void adam_step(const AdamStep& step, const Tensor& param, const Tensor& grad,
                 const Tensor& exp_avg, const Tensor& exp_avg_sq) override;
  void accumulate_sum_of_squares(const Tensor& x, const Tensor& total) override;
  void unscale_and_check(const Tensor& grad, double inv_scale, const Tensor& out,
                         const Tensor& found_inf) override;
  void quantize_rows(const Tensor& x, double fixed_scale, int levels, const Tensor& q,
                     const Tensor& scale) override;
  int int8_activation_levels() override;
  int int8_weight_levels() override;
  void gemm_i8(const Tensor& a, const Tensor& b, const Tensor& acc) override;
  void quantized_product(const Tensor& a, const Tensor& b, const Tensor& row_scale,
                         const Tensor& col_scale, const Tensor& bias, const Tensor& out) override;
  void quantized_linear(const Tensor& x, double fixed_scale, int levels, const Tensor& b,
                        const Tensor& col_scale, const Tensor& bias, const Tensor& out) override;
  void dequantize_product(const Tensor& acc, const Tensor& row_scale, const Tensor& col_scale,
                          const Tensor& bias, const Tensor& out) override;
};

}  // namespace tg::cpu
