#pragma once
// softmax and log_softmax over one dim, as torch.softmax / torch.log_softmax.
// A row whose entries are all -inf (a fully masked attention row) gives softmax 0 (log_softmax
// -inf) instead of NaN, and softmax's gradient there is 0.
#include <cstdint>

#include "tapegrad/autograd/tensor.h"

namespace tg {

Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

}  // namespace tg
