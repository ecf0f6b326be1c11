#pragma once
// Row lookup, as torch.nn.functional.embedding.
#include "tapegrad/autograd/tensor.h"

namespace tg {

// weight [V, D] and i64 indices of any shape -> indices.shape + [D], row weight[i] for each i.
// Every index must be in [0, V). Only weight gets a gradient.
Tensor embedding(const Tensor& indices, const Tensor& weight);

}  // namespace tg
