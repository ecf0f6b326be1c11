#pragma once
// Sinusoidal positional encoding (Vaswani et al.):
//   PE(pos, 2i) = sin(pos / 10000^(2i/d)),  PE(pos, 2i+1) = cos(pos / 10000^(2i/d)).
// A buffer "pe" of shape [1, max_len, dim], as the classic tutorial's PositionalEncoding
// registers it, never a parameter. It is a pure function of (max_len, dim): computed, never
// trained. Persistent (in the state_dict, as the tutorial's) only where a model asks for it: the
// tutorial-form models, so that their state_dict loads into the tutorial's classes with
// strict=True (nn/models.h).
#include <string>

#include "tapegrad/nn/module.h"

namespace tg::nn {

// The tutorial's PositionalEncoding default max_len: the rows of the table `tapegrad export`
// writes.
constexpr int64_t kTutorialMaxLen = 5000;

Tensor sinusoidal_table(int64_t max_len, int64_t dim, DType dtype = DType::f32);  // [max_len, dim]
// The same as the tutorial's buffer: [1, max_len, dim].
Tensor sinusoidal_buffer(int64_t max_len, int64_t dim, DType dtype = DType::f32);

// Checks that `pe` is a table of the tutorial's form [1, L, dim] (any L >= 1) holding the
// sinusoid of its L rows: each value within 1e-6 * (1 + pos) of sin/cos computed in f64, which
// admits a table computed in f32 as the tutorial computes it (its angles, pos * div_term, carry
// a relative error of a few f32 epsilons) and nothing else. tg::Error naming `name`, the shape,
// or the first position and column that disagree with both values.
void check_sinusoidal_buffer(const Tensor& pe, int64_t dim, const std::string& name);

class SinusoidalPositionalEncoding : public ModuleOf<SinusoidalPositionalEncoding> {
 public:
  // `persistent`: the table is in state_dict() (as "pe"), as in the tutorial's module.
  SinusoidalPositionalEncoding(int64_t dim, int64_t max_len = kTutorialMaxLen,
                               DType dtype = DType::f32, bool persistent = false);
  // x [B, S, dim] -> x + PE[offset : offset + S] (positions from `offset`: incremental decoding);
  // a position past max_len is a tg::Error.
  Tensor forward(const Tensor& x, int64_t offset = 0) const;
  Tensor table;  // [1, max_len, dim], the buffer "pe"
  int64_t max_len;
};

}  // namespace tg::nn
