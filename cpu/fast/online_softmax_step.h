#pragma once
// The online softmax step of the attention tiles (cpu/fast/attention_tiles.h: online_softmax_avx2,
// online_softmax_avx512), written once for the two instruction-set files that include it. Each
// passes its own row passes (the largest entry of a row; 2^(row - shift) in place with its sum;
// 2^x of one float) and gets a copy compiled for its instruction set: the template has internal
// linkage (the unnamed namespace), so no instance is shared between the files, nor with the
// baseline code (cpu/fast/attention_tiles_avx2.cpp says why that matters).
#include <cstdint>

namespace tg::cpu::tiles {
namespace {

// For every row r of scores (rows x cols, contiguous): m' = max(row_max[r], the row's max); the
// row becomes 2^(s - m'), row_sum[r] = row_sum[r] 2^(m - m') + the row's new sum, row_max[r] = m',
// correction[r] = 2^(m - m'). A row with m' = -inf becomes 0 and keeps its statistics, with
// correction 1; the correction is also exactly 1 when the max stays or on the row's first visible
// tile (m = -inf). All rows' maxima come first, then all exps, so that rows overlap in the pipeline.
template <typename RowMax, typename Exp2Shifted, typename Exp2One>
void online_softmax_step(float* scores, int64_t rows, int64_t cols, float* row_max_of_rows,
                         float* row_sum, float* correction, RowMax row_max,
                         Exp2Shifted exp2_shifted, Exp2One exp2_one) {
  const float neg_inf = -__builtin_inff();
  for (int64_t r = 0; r < rows; ++r) {  // the new maxima, in correction for now
    const float tile_max = row_max(scores + r * cols, cols);
    correction[r] = tile_max > row_max_of_rows[r] ? tile_max : row_max_of_rows[r];
  }
  for (int64_t r = 0; r < rows; ++r) {
    float* row = scores + r * cols;
    const float old_max = row_max_of_rows[r], new_max = correction[r];
    if (new_max == neg_inf) {  // nothing visible in this row yet
      for (int64_t c = 0; c < cols; ++c) row[c] = 0.0f;
      correction[r] = 1.0f;
      continue;
    }
    correction[r] = old_max == new_max || old_max == neg_inf ? 1.0f : exp2_one(old_max - new_max);
    row_sum[r] = row_sum[r] * correction[r] + exp2_shifted(row, cols, new_max);
    row_max_of_rows[r] = new_max;
  }
}

}  // namespace
}  // namespace tg::cpu::tiles
