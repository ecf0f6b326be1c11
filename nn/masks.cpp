#include "tapegrad/nn/masks.h"

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/ops/ops.h"

namespace tg::nn {

Tensor causal_mask(int64_t sq, int64_t sk, Device device) {
  TG_CHECK(sq > 0 && sk > 0, "causal_mask: sizes must be positive, got ", sq, " x ", sk);
  std::vector<bool> allowed(sq * sk);
  for (int64_t i = 0; i < sq; ++i) {
    for (int64_t j = 0; j < sk; ++j) allowed[i * sk + j] = j <= i;
  }
  return from_bools(allowed, {sq, sk}, device);
}

Tensor padding_mask(const std::vector<int64_t>& lengths, int64_t max_len, Device device) {
  const int64_t batch = static_cast<int64_t>(lengths.size());
  std::vector<bool> allowed(batch * max_len);
  for (int64_t b = 0; b < batch; ++b) {
    TG_CHECK(lengths[b] >= 0 && lengths[b] <= max_len, "padding_mask: length ", lengths[b],
             " of sequence ", b, " is outside [0, ", max_len, "]");
    for (int64_t j = 0; j < max_len; ++j) allowed[b * max_len + j] = j < lengths[b];
  }
  return from_bools(allowed, {batch, 1, 1, max_len}, device);
}

Tensor combine_masks(const Tensor& a, const Tensor& b) {
  TG_CHECK(a.dtype() == DType::b8 && b.dtype() == DType::b8, "combine_masks: masks must be bool, got ",
           dtype_name(a.dtype()), " and ", dtype_name(b.dtype()));
  NoGrad no_grad;
  return mul(a.to(DType::f32), b.to(DType::f32)).to(DType::b8);
}

}  // namespace tg::nn
