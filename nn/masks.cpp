#include "tapegrad/nn/masks.h"

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/ops/ops.h"

namespace tg::nn {

namespace {

// A bool tensor of `shape` on the host, to fill in place. Its size is checked (`op` names the
// error) and it is allocated as a tensor, not built in a std::vector<bool> first: a mask too
// large to hold is then a tg::Error, never a std::length_error or a wrapped-around size.
Tensor host_mask(const Shape& shape, const char* op) {
  check_shape(shape, op);
  return empty(shape, DType::b8, kCPU);
}

}  // namespace

Tensor causal_mask(int64_t sq, int64_t sk, Device device) {
  TG_CHECK(sq > 0 && sk > 0, "causal_mask: sizes must be positive, got ", sq, " x ", sk);
  checked_mul(sq, sk, "causal_mask: sq x sk");
  Tensor mask = host_mask({sq, sk}, "causal_mask");
  uint8_t* allowed = mask.data_as<uint8_t>();
  for (int64_t i = 0; i < sq; ++i) {
    for (int64_t j = 0; j < sk; ++j) allowed[i * sk + j] = j <= i;
  }
  return mask.to(device);
}

Tensor padding_mask(const std::vector<int64_t>& lengths, int64_t max_len, Device device) {
  const int64_t batch = static_cast<int64_t>(lengths.size());
  TG_CHECK(max_len >= 0, "padding_mask: max_len ", max_len, " must be >= 0");
  checked_mul(batch, max_len, "padding_mask: batch x max_len");
  for (int64_t b = 0; b < batch; ++b) {
    TG_CHECK(lengths[b] >= 0 && lengths[b] <= max_len, "padding_mask: length ", lengths[b],
             " of sequence ", b, " is outside [0, ", max_len, "]");
  }
  Tensor mask = host_mask({batch, 1, 1, max_len}, "padding_mask");
  uint8_t* allowed = mask.data_as<uint8_t>();
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t j = 0; j < max_len; ++j) allowed[b * max_len + j] = j < lengths[b];
  }
  return mask.to(device);
}

Tensor combine_masks(const Tensor& a, const Tensor& b) {
  TG_CHECK(a.dtype() == DType::b8 && b.dtype() == DType::b8, "combine_masks: masks must be bool, got ",
           dtype_name(a.dtype()), " and ", dtype_name(b.dtype()));
  NoGrad no_grad;
  return mul(a.to(DType::f32), b.to(DType::f32)).to(DType::b8);
}

}  // namespace tg::nn
