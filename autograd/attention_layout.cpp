// bigbird's random key blocks (autograd/attention_layout.h).
#include "tapegrad/autograd/attention_layout.h"

#include <algorithm>
#include <numeric>

#include "tapegrad/autograd/rng.h"

namespace tg {

std::vector<int64_t> bigbird_random_blocks(const SparsityLayout& layout, int64_t sq, int64_t sk) {
  if (layout.kind != SparsityKind::bigbird || layout.random_blocks <= 0 || sq <= 0 || sk <= 0) return {};
  const int64_t query_blocks = (sq + kSparseBlock - 1) / kSparseBlock;
  const int64_t key_blocks = (sk + kSparseBlock - 1) / kSparseBlock;
  const int64_t per_block = std::min(layout.random_blocks, key_blocks);
  std::vector<int64_t> table(query_blocks * per_block);
  std::vector<int64_t> order(key_blocks);
  std::vector<float> uniforms(per_block);
  for (int64_t block = 0; block < query_blocks; ++block) {
    // a partial Fisher-Yates shuffle: the first per_block entries of a random permutation, drawn
    // from numbers block * per_block ... of the stream (offset 0 of the layout's own seed)
    std::iota(order.begin(), order.end(), int64_t{0});
    philox_uniform_fill(layout.seed, 0, block * per_block, per_block, uniforms.data());
    for (int64_t r = 0; r < per_block; ++r) {
      const int64_t left = key_blocks - r;
      const int64_t pick = r + std::min(left - 1, static_cast<int64_t>(uniforms[r] * left));
      std::swap(order[r], order[pick]);
    }
    std::sort(order.begin(), order.begin() + per_block);
    std::copy(order.begin(), order.begin() + per_block, table.begin() + block * per_block);
  }
  return table;
}

}  // namespace tg
