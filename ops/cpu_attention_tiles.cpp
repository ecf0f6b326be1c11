// The f32 tile kernels of attention (ops/cpu_attention_tiles.h): products and transposes as plain loops,
// which every x86-64 can run (the compiler vectorises the inner loop with SSE2), and the run-time
// choice between the baseline code and the AVX2 + FMA one (ops/cpu_attention_tiles_avx2.cpp).
#include "tapegrad/ops/cpu_attention_tiles.h"

#include <atomic>

#include "tapegrad/ops/cpu_simd.h"

namespace tg::cpu::tiles {

void gemm_portable(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_row,
                   int64_t a_col, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {  // row i of C: beta C_i, plus alpha A(i, p) B_p for each p
    float* __restrict c_row = c + i * ldc;
    for (int64_t j = 0; j < n; ++j) c_row[j] = beta == 0 ? 0.0f : beta * c_row[j];
    for (int64_t p = 0; p < k; ++p) {
      const float scaled = alpha * a[i * a_row + p * a_col];
      const float* __restrict b_row = b + p * ldb;
      for (int64_t j = 0; j < n; ++j) c_row[j] += scaled * b_row[j];
    }
  }
}

bool avx2_supported() {
  static const bool supported = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return supported;
}

namespace {
std::atomic<bool> portable_forced{false};
}

bool avx2_in_use() { return avx2_supported() && !portable_forced.load(std::memory_order_relaxed); }

void force_portable(bool portable) { portable_forced.store(portable, std::memory_order_relaxed); }

void gemm(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_row,
          int64_t a_col, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (avx2_in_use()) return gemm_avx2(m, n, k, alpha, a, a_row, a_col, b, ldb, beta, c, ldc);
  gemm_portable(m, n, k, alpha, a, a_row, a_col, b, ldb, beta, c, ldc);
}

void transpose_portable(int64_t rows, int64_t cols, const float* in, int64_t ld_in, float* out,
                        int64_t ld_out) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) out[c * ld_out + r] = in[r * ld_in + c];
  }
}

void transpose(int64_t rows, int64_t cols, const float* in, int64_t ld_in, float* out, int64_t ld_out) {
  if (avx2_in_use()) return transpose_avx2(rows, cols, in, ld_in, out, ld_out);
  transpose_portable(rows, cols, in, ld_in, out, ld_out);
}

float exp_shifted_row(float* row, int64_t cols, float shift) {
  if (avx2_in_use()) return exp_shifted_row_avx2(row, cols, shift);
  return simd::exp_shifted_row(row, cols, shift);
}

float row_max(const float* row, int64_t cols) {
  if (avx2_in_use()) return row_max_avx2(row, cols);
  return simd::row_max_of(row, cols);
}

}  // namespace tg::cpu::tiles
