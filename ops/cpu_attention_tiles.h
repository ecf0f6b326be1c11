#pragma once
// The f32 tile kernels of the fused attention kernel (ops/cpu_attention.cpp): small matrix
// products, the transposes they need, and exp / max over a row of scores.
//
// On short sequences and heads (a 32 x 32 tile of scores from head_dim 16) a product is a few
// thousand multiply-adds, less than what a BLAS call spends on checking, dispatching and packing.
// Every product of the kernel (S = Q K^T, P V, and the backward's four) has one shape here:
//
//   C (m x n, ldc) = alpha A B + beta C,   A(i, p) = a[i * a_row + p * a_col],
//                                          B (k x n) row-major with leading dimension ldb;
//
// a transposed A (P^T dO, dS^T Q) is a pair of strides, and a transposed B (K^T, V^T) is copied
// transposed first (transpose). beta = 0 never reads C (it may hold anything, NaN included).
// The row helpers are those of ops/cpu_simd.h (four SSE2 lanes), on eight lanes.
//
// Two implementations of each: AVX2 with FMA (ops/cpu_attention_tiles_avx2.cpp, compiled with
// -mavx2 -mfma and called only on a CPU that has both: products in register blocks of 4 rows x
// 16 columns, transposes in 8 x 8 blocks), and the baseline x86-64 one (ops/cpu_attention_tiles.cpp:
// plain loops, and ops/cpu_simd.h for the rows). Each entry point picks one at run time;
// tests/ops/test_cpu_attention_tiles.cpp checks both against double-precision loops or std::exp.
#include <cstdint>

namespace tg::cpu::tiles {

// ---- Entry points: AVX2 when avx2_in_use(), else the baseline code -------------------------------

// C = alpha A B + beta C (the shape above).
void gemm(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_row,
          int64_t a_col, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// out (cols x rows, leading dimension ld_out) = in (rows x cols, leading dimension ld_in)^T.
void transpose(int64_t rows, int64_t cols, const float* in, int64_t ld_in, float* out, int64_t ld_out);

// row[c] = exp(row[c] - shift) for c < cols, returning the sum of the new row; and the largest
// entry of a row (-inf when empty or all -inf, NaNs skipped). As simd::exp_shifted_row and
// simd::row_max_of (ops/cpu_simd.h), whose accuracy and edge cases both implementations share.
float exp_shifted_row(float* row, int64_t cols, float shift);
float row_max(const float* row, int64_t cols);

// ---- The choice ----------------------------------------------------------------------------------

// Whether this CPU has AVX2 and FMA.
bool avx2_supported();
// Whether the entry points use AVX2: supported, and not turned off by force_portable(true).
bool avx2_in_use();
// true: the entry points use the baseline code; false: they pick by the CPU again. The tests run
// the attention kernel both ways. Not meant to be flipped while attention runs on other threads.
void force_portable(bool portable);

// ---- The implementations by name (the _avx2 ones only where avx2_supported()) -------------------

void gemm_portable(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_row,
                   int64_t a_col, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void gemm_avx2(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_row,
               int64_t a_col, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void transpose_portable(int64_t rows, int64_t cols, const float* in, int64_t ld_in, float* out,
                        int64_t ld_out);
void transpose_avx2(int64_t rows, int64_t cols, const float* in, int64_t ld_in, float* out,
                    int64_t ld_out);
float exp_shifted_row_avx2(float* row, int64_t cols, float shift);
float row_max_avx2(const float* row, int64_t cols);

}  // namespace tg::cpu::tiles
