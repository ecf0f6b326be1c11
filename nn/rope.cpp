// Rotary position embedding: the cos/sin tables are built on the host in f64, then the rotation is
// written with narrow, mul, sub/add and cat, so the tape differentiates it like any other op chain.
#include "tapegrad/nn/rope.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/ops/ops.h"

namespace tg::nn {
namespace {

// cos and sin of the angle (offset + s) * 10000^(-2c/d), each [length, d/2], in `like`'s dtype and
// on its device.
std::pair<Tensor, Tensor> rope_tables(int64_t length, int64_t head_dim, int64_t offset,
                                      const Tensor& like) {
  const int64_t half = head_dim / 2;
  std::vector<double> cosines(checked_mul(length, half, "apply_rope: S x d/2"));
  std::vector<double> sines(cosines.size());
  for (int64_t c = 0; c < half; ++c) {
    // theta_c = 10000^(-2c/d): channel pair c turns once every 2 pi / theta_c positions.
    const double frequency =
        std::pow(10000.0, -2.0 * static_cast<double>(c) / static_cast<double>(head_dim));
    for (int64_t s = 0; s < length; ++s) {
      const double angle = static_cast<double>(offset + s) * frequency;
      cosines[s * half + c] = std::cos(angle);
      sines[s * half + c] = std::sin(angle);
    }
  }
  return {from_values(cosines, {length, half}, like.dtype(), like.device()),
          from_values(sines, {length, half}, like.dtype(), like.device())};
}

}  // namespace

Tensor apply_rope(const Tensor& x, int64_t offset) {
  TG_CHECK(x.defined() && x.dim() >= 2, "apply_rope: x must be [..., S, d], got ",
           x.defined() ? shape_str(x.shape()) : std::string("an undefined tensor"));
  const int64_t head_dim = x.size(-1);
  TG_CHECK(head_dim % 2 == 0,
           "apply_rope: the last dim d must be even (channel pairs (c, c + d/2)), got x ",
           shape_str(x.shape()));
  const int64_t half = head_dim / 2;
  const auto [cosine, sine] = rope_tables(x.size(-2), head_dim, offset, x);  // [S, d/2], broadcast
  const Tensor first = x.narrow(-1, 0, half);                                // x[c]
  const Tensor second = x.narrow(-1, half, half);                            // x[c + d/2]
  // A rotation of each pair by its angle; its transpose (the backward) rotates back.
  return cat({first * cosine - second * sine, second * cosine + first * sine}, -1);
}

}  // namespace tg::nn
