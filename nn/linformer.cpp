// Linformer attention, composed from ordinary ops (narrow, where, matmul, softmax, dropout), so the
// tape differentiates it through q, k, v and both projections, on every device.
#include "tapegrad/nn/linformer.h"

#include <cmath>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/ops/ops.h"

namespace tg::nn {
namespace {

void check_linformer_shapes(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& proj_k,
                            const Tensor& proj_v, const Tensor& key_padding) {
  TG_CHECK(q.defined() && k.defined() && v.defined() && proj_k.defined() && proj_v.defined(),
           "linformer_attention: q, k, v, proj_k and proj_v must all be defined");
  const auto shapes = [&] {
    return "q " + shape_str(q.shape()) + ", k " + shape_str(k.shape()) + ", v " +
           shape_str(v.shape()) + ", proj_k " + shape_str(proj_k.shape()) + ", proj_v " +
           shape_str(proj_v.shape());
  };
  TG_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && k.size(0) == q.size(0) &&
               k.size(1) == q.size(1) && k.size(-1) == q.size(-1) && v.size(0) == q.size(0) &&
               v.size(1) == q.size(1) && v.size(2) == k.size(2),
           "linformer_attention: ", shapes(),
           " do not fit q [B, H, Sq, d], k [B, H, Sk, d], v [B, H, Sk, dv]");
  TG_CHECK(proj_k.dim() == 2 && proj_v.dim() == 2 && proj_k.size(1) == proj_v.size(1) &&
               proj_k.size(0) >= k.size(2) && proj_v.size(0) >= k.size(2),
           "linformer_attention: ", shapes(),
           " do not fit proj_k and proj_v [max_len, rank] with max_len >= Sk = ", k.size(2));
  if (key_padding.defined()) {
    TG_CHECK(key_padding.dtype() == DType::b8 && key_padding.dim() == 2 &&
                 key_padding.size(0) == k.size(0) && key_padding.size(1) == k.size(2),
             "linformer_attention: key_padding must be bool [B, Sk] = [", k.size(0), ", ",
             k.size(2), "], got ", dtype_name(key_padding.dtype()), " ",
             shape_str(key_padding.shape()));
  }
}

}  // namespace

Tensor linformer_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& proj_k,
                           const Tensor& proj_v, const Tensor& key_padding, bool is_causal,
                           double dropout_p) {
  TG_CHECK(!is_causal,
           "linformer_attention: causal attention is not supported: projecting keys and values "
           "along the sequence mixes every position into every projected row");
  TG_CHECK(dropout_p >= 0 && dropout_p < 1,
           "linformer_attention: dropout_p must be in [0, 1), got ", dropout_p);
  check_linformer_shapes(q, k, v, proj_k, proj_v, key_padding);
  const int64_t key_length = k.size(2);

  Tensor keys = k, values = v;
  if (key_padding.defined()) {  // padded keys and values contribute nothing to the projection
    const Tensor real = key_padding.reshape({k.size(0), 1, key_length, 1});
    const Tensor zero = scalar(0.0, k.dtype(), k.device());
    keys = where(real, k, zero);
    values = where(real, v, zero);
  }
  // k' = E^T k, v' = F^T v: [rank, Sk] @ [B, H, Sk, d] -> [B, H, rank, d].
  const Tensor projected_keys = matmul(proj_k.narrow(0, 0, key_length).transpose(0, 1), keys);
  const Tensor projected_values = matmul(proj_v.narrow(0, 0, key_length).transpose(0, 1), values);

  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  const Tensor scores = matmul(q, projected_keys.transpose(-1, -2)) * scale;  // [B, H, Sq, rank]
  Tensor weights = softmax(scores, -1);
  if (dropout_p > 0) weights = tg::dropout(weights, dropout_p, /*training=*/true);
  return matmul(weights, projected_values);  // [B, H, Sq, dv]
}

Tensor linformer_projection(int64_t max_len, int64_t rank, DType dtype) {
  TG_CHECK(max_len > 0 && rank > 0, "linformer_projection: max_len and rank must be positive, got ",
           max_len, " and ", rank);
  const double bound = 1.0 / std::sqrt(static_cast<double>(rank));
  return uniform({max_len, rank}, -bound, bound, dtype);
}

}  // namespace tg::nn
