#pragma once
// Philox 4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", 2011): 4 random
// words from a 128-bit counter and a 64-bit key. Inline and TG_HOST_DEVICE so that the CPU and the
// CUDA kernels draw the same numbers from the same (seed, offset).
#include <array>
#include <cstdint>

#include "tapegrad/autograd/portable.h"

namespace tg {

TG_HOST_DEVICE inline std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter,
                                                         std::array<uint32_t, 2> key) {
  constexpr uint64_t kMul0 = 0xD2511F53, kMul1 = 0xCD9E8D57;
  constexpr uint32_t kWeyl0 = 0x9E3779B9, kWeyl1 = 0xBB67AE85;
  for (int round = 0; round < 10; ++round) {
    const uint64_t product0 = kMul0 * counter[0];
    const uint64_t product1 = kMul1 * counter[2];
    counter = {static_cast<uint32_t>(product1 >> 32) ^ counter[1] ^ key[0],
               static_cast<uint32_t>(product1),
               static_cast<uint32_t>(product0 >> 32) ^ counter[3] ^ key[1],
               static_cast<uint32_t>(product0)};
    key[0] += kWeyl0;
    key[1] += kWeyl1;
  }
  return counter;
}

// The four words of block `block` of the stream keyed by seed.
TG_HOST_DEVICE inline std::array<uint32_t, 4> philox_block(uint64_t seed, uint64_t block) {
  return philox4x32({static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0, 0},
                    {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
}

// A word as a uniform float in [0, 1) with 24 random bits.
TG_HOST_DEVICE inline float philox_word_to_unit(uint32_t word) {
  return static_cast<float>(word >> 8) * 0x1.0p-24f;
}

// Number i after position `offset` of the stream of `seed`: number n = offset + i is word n % 4
// of block n / 4. (Positions count numbers, not blocks: a range may start inside a block.)
TG_HOST_DEVICE inline float philox_uniform(uint64_t seed, uint64_t offset, int64_t i) {
  const uint64_t n = offset + static_cast<uint64_t>(i);
  return philox_word_to_unit(philox_block(seed, n / 4)[n % 4]);
}

}  // namespace tg
