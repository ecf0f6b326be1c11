#pragma once
// Inverted dropout, as torch.nn.functional.dropout, with masks from the Philox generator.
#include <cstdint>

#include "tapegrad/autograd/device.h"
#include "tapegrad/autograd/tensor.h"

namespace tg {

// Zeroes each element with probability p and scales the rest by 1 / (1 - p) while training;
// the identity when !training or p == 0; zeros when p == 1. p outside [0, 1] is an error.
// Draws its mask from the global generator (reserve_random), so a saved rng_state replays it.
Tensor dropout(const Tensor& x, double p, bool training);

// The scaled keep-mask dropout multiplies by: 1 / (1 - p) where the Philox number
// (seed, offset, i) is >= p, else 0. Same seed and offset, same mask, on every device.
Tensor dropout_mask(const Shape& shape, double p, DType dtype, uint64_t seed, uint64_t offset,
                    Device device = kCPU);

}  // namespace tg
