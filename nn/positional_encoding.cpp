#include "tapegrad/nn/positional_encoding.h"

#include <cmath>

#include "tapegrad/autograd/error.h"
#include "tapegrad/ops/ops.h"

namespace tg::nn {

namespace {

// PE(pos, col) in f64: sin of pos / 10000^(2i/dim) in column 2i, its cos in column 2i + 1.
double positional_sinusoid(int64_t pos, int64_t col, int64_t dim) {
  const int64_t i = col / 2;
  const double angle = pos / std::pow(10000.0, 2.0 * i / dim);
  return col % 2 == 0 ? std::sin(angle) : std::cos(angle);
}

}  // namespace

Tensor sinusoidal_table(int64_t max_len, int64_t dim, DType dtype) {
  TG_CHECK(max_len > 0 && dim > 0, "positional encoding: max_len and dim must be positive, got ",
           max_len, " and ", dim);
  checked_mul(max_len, dim, "positional encoding: max_len x dim");
  // Filled in a tensor, not a std::vector first: a table too large to allocate is then the
  // allocator's tg::Error, not a std::length_error.
  Tensor table = empty({max_len, dim}, DType::f64, kCPU);
  double* values = table.data_as<double>();
  for (int64_t pos = 0; pos < max_len; ++pos) {
    for (int64_t col = 0; col < dim; ++col) {
      values[pos * dim + col] = positional_sinusoid(pos, col, dim);
    }
  }
  return table.to(dtype).to(default_device());
}

Tensor sinusoidal_buffer(int64_t max_len, int64_t dim, DType dtype) {
  return sinusoidal_table(max_len, dim, dtype).unsqueeze(0).contiguous();
}

void check_sinusoidal_buffer(const Tensor& pe, int64_t dim, const std::string& name) {
  TG_CHECK(pe.dim() == 3 && pe.size(0) == 1 && pe.size(1) >= 1 && pe.size(2) == dim, "tensor '",
           name, "' has shape ", shape_str(pe.shape()), " but a positional table is [1, max_len, ",
           dim, "]");
  TG_CHECK(is_floating(pe.dtype()), "tensor '", name, "' is ", dtype_name(pe.dtype()),
           ", not a floating-point table");
  const std::vector<double> stored = pe.to_host_f64();
  for (int64_t pos = 0; pos < pe.size(1); ++pos) {
    const double tolerance = 1e-6 * static_cast<double>(1 + pos);
    for (int64_t col = 0; col < dim; ++col) {
      const double expected = positional_sinusoid(pos, col, dim), value = stored[pos * dim + col];
      TG_CHECK(std::abs(value - expected) <= tolerance, "tensor '", name, "' is not the ",
               "sinusoidal table: at position ", pos, ", column ", col, " it holds ", value,
               " where the sinusoid is ", expected, " (a positional table is computed, never ",
               "trained)");
    }
  }
}

SinusoidalPositionalEncoding::SinusoidalPositionalEncoding(int64_t dim, int64_t max_len,
                                                           DType dtype, bool persistent)
    : max_len(max_len) {
  table = register_buffer("pe", sinusoidal_buffer(max_len, dim, dtype), persistent);
}

Tensor SinusoidalPositionalEncoding::forward(const Tensor& x, int64_t offset) const {
  const int64_t dim = table.size(2);
  TG_CHECK(x.dim() >= 2 && x.size(-1) == dim, "positional encoding: input ",
           shape_str(x.shape()), " does not end in dim ", dim);
  const int64_t length = x.size(-2);
  TG_CHECK(offset >= 0 && offset <= max_len && length <= max_len - offset, "positional encoding: ",
           "positions ", offset, " .. ", offset, " + ", length, " are past max_len ", max_len,
           " (input ", shape_str(x.shape()), ")");
  return x + table.narrow(1, offset, length).squeeze(0);  // [length, dim], broadcast over the batch
}

}  // namespace tg::nn
