#pragma once
// The AVX2 + FMA tile kernels of the fused attention kernel (cpu/fast/attention.cpp), in f32: small
// matrix products, the transposes they need, exp2 / max over a row of scores, and the online
// softmax step of a tile.
//
// On short sequences and heads (a 32 x 32 tile of scores from head_dim 16) a product is a few
// thousand multiply-adds, less than what a BLAS call spends on checking, dispatching and packing.
// Every product of the kernel (S = Q K^T, P V, and the backward's four) has one shape here:
//
//   C (m x n, ldc) = alpha A B + beta C,   A(i, p) = a[i * a_row + p * a_col],
//                                          B (k x n) row-major with leading dimension ldb;
//
// a transposed A (P^T dO, dS^T Q) is a pair of strides, and a transposed B (K^T, V^T) is copied
// transposed first (transpose_avx2). beta = 0 never reads C (it may hold anything, NaN included).
// The row helpers are those of cpu/fast/simd.h (four SSE2 lanes) on eight lanes.
//
// The _avx2 functions live in cpu/fast/attention_tiles_avx2.cpp, the one file compiled with
// -mavx2 -mfma, and the attention kernel calls them only where cpu::fast_paths_enabled()
// (runtime/features.h): elsewhere, or inside a FastPathsOff scope, it runs as on a CPU without
// AVX2, on BLAS and cpu/fast/simd.h. tests/cpu/fast/test_attention_tiles.cpp checks these
// against double-precision loops and std::exp2; tests/cpu/test_reference.cpp runs the attention
// kernel both ways.
#include <cstdint>

namespace tg::cpu::tiles {

// C = alpha A B + beta C (the shape above), in register blocks of 6 rows x 16 columns.
void gemm_avx2(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_row,
               int64_t a_col, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// The same product, with what the backward does next to it applied as each block is stored, while
// the block is still in registers: a pass over the tile fewer. C(i, j) = 2^(alpha (A B)(i, j) -
// shift[i]) (P from the scores, base 2: as exp2_rows_avx2 below), and C(i, j) = P(i, j)
// ((A B)(i, j) - dot[i]) (dS from dP = dO V^T: as softmax_backward_rows_avx2), P m x n with rows
// ld_probs apart.
void exp2_gemm_avx2(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_row,
                    int64_t a_col, const float* b, int64_t ldb, const float* shift, float* c,
                    int64_t ldc);
void softmax_grad_gemm_avx2(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_row,
                            int64_t a_col, const float* b, int64_t ldb, const float* probs,
                            int64_t ld_probs, const float* dot, float* c, int64_t ldc);

// The three products above on AVX-512 F (cpu/fast/attention_tiles_avx512.cpp, compiled with
// -mavx512f): the same contract, 16-float vectors in blocks of up to 8 rows x 32 columns. Where
// the CPU has two 512-bit FMA units they do twice the multiply-adds a cycle.
void gemm_avx512(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_row,
                 int64_t a_col, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void exp2_gemm_avx512(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_row,
                      int64_t a_col, const float* b, int64_t ldb, const float* shift, float* c,
                      int64_t ldc);
void softmax_grad_gemm_avx512(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_row,
                              int64_t a_col, const float* b, int64_t ldb, const float* probs,
                              int64_t ld_probs, const float* dot, float* c, int64_t ldc);

// Which products the attention kernel runs on its tiles (cpu/fast/attention_tiles.cpp): AVX-512
// where the CPU has AVX-512 F (cpu::cpu_has_avx512f), else AVX2. TAPEGRAD_ATTENTION_TILES=avx2 or avx512 chooses (read
// once; avx512 on a CPU without it, or another value, is a tg::Error), and an Avx2TilesScope
// forces AVX2 while it exists (the tests compare the two on one machine).
inline constexpr const char* kTilesVariable = "TAPEGRAD_ATTENTION_TILES";
bool avx512_tiles();
class Avx2TilesScope {
 public:
  Avx2TilesScope();
  ~Avx2TilesScope();
  Avx2TilesScope(const Avx2TilesScope&) = delete;
  Avx2TilesScope& operator=(const Avx2TilesScope&) = delete;
};

// The scores of a few query rows against keys read where they lie (incremental decoding: one new
// position against the cache): C(r, j) = alpha (a_r . key_j) for r < m, j < cols, a_r = a + r lda
// and key_j = keys + j ld_keys, k entries each. A key's products are summed in eight lanes (the
// chunk past k masked), and eight keys' lane sums are added up together, in one vector, by
// horizontal adds. AVX2 on every CPU with it: at long contexts the keys stream from L3 and the
// loop waits on them, not on its FMAs (bench/RESULTS.md, generation, late night).
void key_dots_avx2(int64_t m, int64_t cols, int64_t k, float alpha, const float* a, int64_t lda,
                   const float* keys, int64_t ld_keys, float* c, int64_t ldc);

// out (cols x rows, leading dimension ld_out) = in (rows x cols, leading dimension ld_in)^T, in
// 8 x 8 blocks.
void transpose_avx2(int64_t rows, int64_t cols, const float* in, int64_t ld_in, float* out,
                    int64_t ld_out);

// row[c] = 2^(row[c] - shift) for c < cols, returning the sum of the new row; and the largest
// entry of a row (-inf when empty or all -inf, NaNs skipped). As simd::exp2_shifted_row and
// simd::row_max_of (cpu/fast/simd.h), whose accuracy and edge cases they share. The tile passes
// below are made of these; they are declared here so that the tests check them row by row.
float exp2_shifted_row_avx2(float* row, int64_t cols, float shift);
float row_max_avx2(const float* row, int64_t cols);

// One step of the forward's online softmax over a tile of scores in base-2 units (rows x cols,
// contiguous), for every row r: the new running max m' = max(row_max[r], the row's max); the row
// becomes 2^(s - m'), row_sum[r] becomes row_sum[r] * 2^(m - m') + the row's new sum, row_max[r]
// m', and correction[r] = 2^(m - m'), by which the caller rescales the row's accumulator. A row whose m'
// is -inf (nothing visible yet) becomes 0 and keeps its statistics, with correction 1. As the
// plain loop online_softmax (cpu/fast/attention.cpp), a row at a time; here all rows'
// maxima come first and then all exps, so that rows overlap in the pipeline.
void online_softmax_avx2(float* scores, int64_t rows, int64_t cols, float* row_max, float* row_sum,
                         float* correction);
// The same step on AVX-512 F (cpu/fast/attention_tiles_avx512.cpp), 16 lanes: the same values
// to rounding (each exp2 lane for lane; a row's sum folds 16 lanes instead of 8). The kernel
// takes it where it takes the AVX-512 products (avx512_tiles()).
void online_softmax_avx512(float* scores, int64_t rows, int64_t cols, float* row_max,
                           float* row_sum, float* correction);

// The backward's two row passes over a tile (rows x cols, rows ld apart): the probabilities
// p = 2^(s - lse[r]) (scores and log-sum-exps in base-2 units), every row at once (rows whose lse
// is -inf are left alone: the caller zeroed them), and the softmax gradient ds = p * (dp - dot[r])
// in place of dp.
void exp2_rows_avx2(float* scores, int64_t rows, int64_t cols, int64_t ld, const float* lse);
void softmax_backward_rows_avx2(float* d_probs, const float* probs, int64_t rows, int64_t cols,
                                int64_t ld, const float* dot);

}  // namespace tg::cpu::tiles
