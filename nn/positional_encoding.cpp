#include "tapegrad/nn/positional_encoding.h"

#include <cmath>

#include "tapegrad/autograd/error.h"
#include "tapegrad/ops/ops.h"

namespace tg::nn {

Tensor sinusoidal_table(int64_t max_len, int64_t dim, DType dtype) {
  TG_CHECK(max_len > 0 && dim > 0, "positional encoding: max_len and dim must be positive, got ",
           max_len, " and ", dim);
  std::vector<double> values(checked_mul(max_len, dim, "positional encoding: max_len x dim"));
  for (int64_t pos = 0; pos < max_len; ++pos) {
    for (int64_t i = 0; 2 * i < dim; ++i) {
      const double angle = pos / std::pow(10000.0, 2.0 * i / dim);
      values[pos * dim + 2 * i] = std::sin(angle);
      if (2 * i + 1 < dim) values[pos * dim + 2 * i + 1] = std::cos(angle);
    }
  }
  return from_values(values, {max_len, dim}, dtype);
}

SinusoidalPositionalEncoding::SinusoidalPositionalEncoding(int64_t dim, int64_t max_len, DType dtype)
    : max_len(max_len) {
  table = register_buffer("pe", sinusoidal_table(max_len, dim, dtype), /*persistent=*/false);
}

Tensor SinusoidalPositionalEncoding::forward(const Tensor& x) const {
  TG_CHECK(x.dim() >= 2 && x.size(-1) == table.size(1), "positional encoding: input ",
           shape_str(x.shape()), " does not end in dim ", table.size(1));
  const int64_t length = x.size(-2);
  TG_CHECK(length <= max_len, "positional encoding: sequence length ", length, " is past max_len ",
           max_len, " (input ", shape_str(x.shape()), ")");
  return x + table.narrow(0, 0, length);
}

}  // namespace tg::nn
