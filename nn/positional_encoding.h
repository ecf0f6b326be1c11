#pragma once
// Sinusoidal positional encoding (Vaswani et al.):
//   PE(pos, 2i) = sin(pos / 10000^(2i/d)),  PE(pos, 2i+1) = cos(pos / 10000^(2i/d)).
// A buffer, not a parameter, and not saved in the state_dict (it is a pure function of d).
#include "tapegrad/nn/module.h"

namespace tg::nn {

Tensor sinusoidal_table(int64_t max_len, int64_t dim, DType dtype = DType::f32);  // [max_len, dim]

class SinusoidalPositionalEncoding : public Module {
 public:
  SinusoidalPositionalEncoding(int64_t dim, int64_t max_len = 5000, DType dtype = DType::f32);
  // x [B, S, dim] -> x + PE[:S]; S past max_len is a tg::Error.
  Tensor forward(const Tensor& x) const;
  Tensor table;  // [max_len, dim]
  int64_t max_len;
};

}  // namespace tg::nn
