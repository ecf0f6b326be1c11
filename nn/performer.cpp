// Performer (FAVOR+): the random features drawn on the host from Philox(seed), and the attention
// composed from ordinary ops (matmul, exp, sum, where, div), so the tape differentiates it through
// q, k and v on every device.
#include "tapegrad/nn/performer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <tuple>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/philox.h"
#include "tapegrad/nn/masks.h"
#include "tapegrad/ops/ops.h"
#include "tapegrad/runtime/autocast.h"

namespace tg::nn {
namespace {

// Normal number `index` of the stream Philox(seed) at offset 0: Box-Muller on uniforms 2i and
// 2i + 1, as tg::randn; 1 - u keeps the logarithm finite. The global generator is not touched.
double philox_normal(uint64_t seed, int64_t index) {
  const double u1 = 1.0 - philox_uniform(seed, 0, 2 * index);
  const double u2 = philox_uniform(seed, 0, 2 * index + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

// Rows of `block` ([d, d], row-major) made orthonormal in place: modified Gram-Schmidt, run twice
// ("twice is enough") so the rows stay orthogonal to rounding.
void orthonormalize_rows(std::vector<double>& block, int64_t d) {
  for (int64_t row = 0; row < d; ++row) {
    double* r = block.data() + row * d;
    for (int pass = 0; pass < 2; ++pass) {
      for (int64_t earlier = 0; earlier < row; ++earlier) {
        const double* e = block.data() + earlier * d;
        double dot = 0;
        for (int64_t c = 0; c < d; ++c) dot += r[c] * e[c];
        for (int64_t c = 0; c < d; ++c) r[c] -= dot * e[c];  // r -= (r . e) e
      }
    }
    double norm = 0;
    for (int64_t c = 0; c < d; ++c) norm += r[c] * r[c];
    norm = std::sqrt(norm);
    TG_CHECK(norm > 1e-12, "performer_features: a Gaussian block of size ", d,
             " came out singular");
    for (int64_t c = 0; c < d; ++c) r[c] /= norm;
  }
}

void check_performer_shapes(const Tensor& q, const Tensor& k, const Tensor& v,
                            const Tensor& projection, const Tensor& key_padding) {
  TG_CHECK(q.defined() && k.defined() && v.defined() && projection.defined(),
           "performer_attention: q, k, v and projection must all be defined");
  const std::string shapes = "q " + shape_str(q.shape()) + ", k " + shape_str(k.shape()) + ", v " +
                             shape_str(v.shape()) + ", projection " + shape_str(projection.shape());
  TG_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && k.size(0) == q.size(0) &&
               k.size(1) == q.size(1) && k.size(-1) == q.size(-1) && v.size(0) == q.size(0) &&
               v.size(1) == q.size(1) && v.size(2) == k.size(2),
           "performer_attention: ", shapes,
           " do not fit q [B, H, Sq, d], k [B, H, Sk, d], v [B, H, Sk, dv]");
  TG_CHECK(projection.dim() == 2 && projection.size(1) == q.size(-1) && projection.size(0) > 0,
           "performer_attention: ", shapes, " do not fit projection [M, d] with d = ", q.size(-1));
  TG_CHECK(is_floating(q.dtype()) && k.dtype() == q.dtype() && v.dtype() == q.dtype() &&
               projection.dtype() == q.dtype(),
           "performer_attention: q, k, v and projection must share one floating dtype, got ",
           dtype_name(q.dtype()), ", ", dtype_name(k.dtype()), ", ", dtype_name(v.dtype()), ", ",
           dtype_name(projection.dtype()));
  if (key_padding.defined()) {
    TG_CHECK(key_padding.dtype() == DType::b8 && key_padding.dim() == 2 &&
                 key_padding.size(0) == k.size(0) && key_padding.size(1) == k.size(2),
             "performer_attention: key_padding must be bool [B, Sk] = [", k.size(0), ", ",
             k.size(2), "], got ", dtype_name(key_padding.dtype()), " ",
             shape_str(key_padding.shape()));
  }
}


// -inf of x's dtype on x's device: the log of a feature that is 0.
Tensor minus_infinity(const Tensor& x) {
  return scalar(-std::numeric_limits<double>::infinity(), x.dtype(), x.device());
}

// Non-causal FAVOR+, in O(S M dv): (numerator [B, H, Sq, dv], denominator [B, H, Sq, 1]).
// Every query sees every real key, so the keys share one shift, detached: the maximum over all
// real keys and features of the head (one constant for the whole head cancels in the ratio; a
// per-key shift would weight the keys differently and would not).
std::pair<Tensor, Tensor> all_key_sums(const Tensor& query_features, const Tensor& key_logs,
                                       const Tensor& v, const Tensor& real,
                                       double inv_sqrt_features) {
  const Tensor minus_inf = minus_infinity(key_logs);
  const Tensor visible_logs =
      real.defined() ? where(real, key_logs.detach(), minus_inf) : key_logs.detach();
  const Tensor key_shift =
      max(max(visible_logs, -1, true).values, -2, true).values;  // [B, H, 1, 1]
  Tensor logs = key_logs - key_shift;
  // Padded keys: log phi = -inf, so phi = 0 and exp's backward gives them gradient 0 (never NaN).
  if (real.defined()) logs = where(real, logs, minus_inf);
  const Tensor key_features = exp(logs) * inv_sqrt_features;  // phi(k), [B, H, Sk, M]
  const Tensor key_values =
      matmul(key_features.transpose(-1, -2), v);         // sum_j phi(k_j) v_j^T, [M, dv]
  const Tensor key_sum = sum(key_features, {-2}, true);  // sum_j phi(k_j), [1, M]
  return {matmul(query_features, key_values),
          matmul(query_features, key_sum.transpose(-1, -2))};
}

// Causal FAVOR+: the weights of the keys j <= i only, each row scaled by its own constant. No cumsum op: the prefix
// sums go through the masked [Sq, Sk] matrix A_ij = phi(q_i) . phi(k_j), O(S^2 M), but exact.
// Nothing a query computes may read a later key, so no shift may be taken over all the keys (a
// later key with large features would underflow the earlier ones to 0). Each key is shifted by its
// own maximum c_j instead, and row i is scaled back by e^(c_j - m_i), m_i = max over the real keys
// j <= i of c_j:
//   A_ij e^-(m_i + s_i) = phi~(q_i) . phi~(k_j) e^(c_j - m_i)      (s_i: the query's own shift)
// One factor e^-(m_i + s_i) per row, which cancels in the ratio, and c_j <= m_i, so the scale is
// at most 1 and never overflows. The shifts are detached, as for the queries. Returns the
// [.., Sq, Sk] matrix, 0 above the diagonal and at padded keys.
Tensor causal_kernel(const Tensor& query_features, const Tensor& key_logs, const Tensor& real,
                     double inv_sqrt_features) {
  Tensor key_shift = max(key_logs.detach(), -1, true).values;  // c_j, [B, H, Sk, 1]
  Tensor logs = key_logs - key_shift;
  if (real.defined()) {  // a padded key has phi = 0 and sets no row's maximum
    logs = where(real, logs, minus_infinity(logs));
    key_shift = where(real, key_shift, minus_infinity(key_shift));
  }
  const Tensor key_features = exp(logs) * inv_sqrt_features;  // phi~(k), [B, H, Sk, M]

  const Device device = key_logs.device();
  const Tensor visible = causal_mask(query_features.size(-2), key_logs.size(-2), device);
  const Tensor shifts = key_shift.transpose(-1, -2);  // [B, H, 1, Sk]
  const Tensor minus_inf = minus_infinity(shifts);
  const Tensor row_max = max(where(visible, shifts, minus_inf), -1, true).values;  // m_i
  // A row with no real key yet has m_i = -inf: subtract 0 there, so that e^(-inf - 0) = 0 and not
  // e^(-inf + inf) = NaN. The invisible entries become -inf before exp, whatever they held.
  const Tensor zero = scalar(0.0, row_max.dtype(), device);
  const Tensor row_shift = where(equal(row_max, minus_inf).to(DType::b8), zero, row_max);
  const Tensor scale = exp(where(visible, shifts - row_shift, minus_inf));  // e^(c_j - m_i)

  const Tensor products = matmul(query_features, key_features.transpose(-1, -2));  // [.., Sq, Sk]
  return where(visible, products * scale.to(products.dtype()),
               scalar(0.0, products.dtype(), device));
}

// phi(q) shifted by each query's own maximum (detached): one constant per query, which scales
// that query's numerator and denominator alike, so it cancels in the ratio (its true gradient is
// zero and detaching loses nothing).
Tensor query_features_of(const Tensor& q, const Tensor& projection) {
  const Tensor query_logs = performer_log_features(q, projection);  // [.., Sq, M]
  const Tensor query_shift = max(query_logs.detach(), -1, true).values;
  return exp(query_logs - query_shift) / std::sqrt(static_cast<double>(projection.size(0)));
}

}  // namespace

Tensor performer_log_features(const Tensor& x, const Tensor& projection) {
  const Tensor scaled = x * std::pow(static_cast<double>(x.size(-1)), -0.25);
  return matmul(scaled, projection.transpose(0, 1)) - sum(scaled * scaled, {-1}, true) * 0.5;
}

Tensor performer_causal_kernel(const Tensor& q, const Tensor& k, const Tensor& projection) {
  const double inv_sqrt_features = 1.0 / std::sqrt(static_cast<double>(projection.size(0)));
  return causal_kernel(query_features_of(q, projection), performer_log_features(k, projection),
                       Tensor(), inv_sqrt_features);
}

Tensor performer_features(int64_t features, int64_t head_dim, uint64_t seed, DType dtype) {
  TG_CHECK(features > 0 && head_dim > 0,
           "performer_features: features and head_dim must be positive, got ", features, " and ",
           head_dim);
  const int64_t d = head_dim;
  std::vector<double> matrix(checked_mul(features, d, "performer_features: features x head_dim"));
  // Block b takes normals [2 b d^2, 2 b d^2 + d^2) for its Gaussian d x d matrix and the next d^2
  // for the d norm vectors, so a block does not depend on M: fewer features are a prefix of more.
  for (int64_t first_row = 0, b = 0; first_row < features; first_row += d, ++b) {
    const int64_t base =
        checked_mul(2 * b, checked_mul(d, d, "performer_features"), "performer_features");
    std::vector<double> block(d * d);
    for (int64_t i = 0; i < d * d; ++i) block[i] = philox_normal(seed, base + i);
    orthonormalize_rows(block, d);
    const int64_t rows = std::min(d, features - first_row);  // the last block is truncated
    for (int64_t r = 0; r < rows; ++r) {
      double chi_squared = 0;  // |g|^2 of an independent Gaussian d-vector: its norm is chi(d)
      for (int64_t c = 0; c < d; ++c) {
        const double g = philox_normal(seed, base + d * d + r * d + c);
        chi_squared += g * g;
      }
      const double norm = std::sqrt(chi_squared);
      for (int64_t c = 0; c < d; ++c) matrix[(first_row + r) * d + c] = norm * block[r * d + c];
    }
  }
  return from_values(matrix, {features, d}, dtype);
}

Tensor performer_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                           const Tensor& projection_matrix, const Tensor& key_padding,
                           bool is_causal) {
  // Under autocast FAVOR+ is GEMM-class, as scaled_dot_product_attention: q, k, v and the f32
  // projection buffer enter in the autocast dtype; inside, each op applies its own policy
  // (runtime/autocast.h): the matmuls in half, exp, max and the sums in f32.
  const Tensor q = autocast_to_half(query), k = autocast_to_half(key), v = autocast_to_half(value);
  const Tensor projection = autocast_to_half(projection_matrix);
  check_performer_shapes(q, k, v, projection, key_padding);
  // No query, or no key to see: the output is empty, or every query sees no key and gets 0 (as
  // softmax attention over no key does). Returned before any maximum over an empty dimension.
  if (q.size(2) == 0 || k.size(2) == 0) {
    return zeros({q.size(0), q.size(1), q.size(2), v.size(3)}, q.dtype(), q.device());
  }
  const double inv_sqrt_features = 1.0 / std::sqrt(static_cast<double>(projection.size(0)));

  const Tensor query_features = query_features_of(q, projection);  // phi(q), [B, H, Sq, M]
  const Tensor key_logs = performer_log_features(k, projection);    // [B, H, Sk, M]
  Tensor real;  // [B, 1, Sk, 1], true = a real key
  if (key_padding.defined()) real = key_padding.reshape({k.size(0), 1, k.size(2), 1});
  Tensor numerator, denominator;  // [B, H, Sq, dv], [B, H, Sq, 1]
  if (is_causal) {
    const Tensor weights = causal_kernel(query_features, key_logs, real, inv_sqrt_features);
    numerator = matmul(weights, v);          // sum_{j<=i} A_ij v_j
    denominator = sum(weights, {-1}, true);  // sum_{j<=i} A_ij
  } else {
    std::tie(numerator, denominator) =
        all_key_sums(query_features, key_logs, v, real, inv_sqrt_features);
  }
  // A query that sees no real key has 0 / 0: it gets 0 (as softmax attention over no key), by
  // dividing by 1 there instead (equal is a constant to the tape).
  return numerator / (denominator + equal(denominator, scalar(0.0, q.dtype(), q.device())));
}

}  // namespace tg::nn
