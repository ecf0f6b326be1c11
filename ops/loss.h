#pragma once
// Losses with mean reduction, as torch.nn.functional.cross_entropy / nll_loss / mse_loss.
#include <cstdint>

#include "tapegrad/autograd/tensor.h"

namespace tg {

// -mean over non-ignored rows i of log_probs[i, target[i]]. log_probs [N, C], target i64 [N].
// Rows whose target is ignore_index count neither in the sum nor in the mean; when every row
// is ignored the loss is 0 (PyTorch gives NaN, 0 / 0).
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, int64_t ignore_index = -100);

// nll_loss(log_softmax(logits)). The classes are the LAST dim: logits [..., C] with target of
// shape [...] (so [N, C] with [N], or [B, S, C] with [B, S] for a sequence model). PyTorch wants
// the classes in dim 1 ([N, C, d1, ...]); last-dim classes avoid a transpose for transformers.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index = -100);

// mean((input - target)^2); the shapes must match exactly (PyTorch would warn and broadcast).
Tensor mse_loss(const Tensor& input, const Tensor& target);

}  // namespace tg
