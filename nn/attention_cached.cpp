// MultiHeadAttention's incremental decoding: one new position's query against cached keys and
// values (nn/kv_cache.h). The newest position p sees every cached key (they are all at or before
// it), so causality needs no mask; what the full forward computes from (i, j) inside the kernel —
// the sparse layout, ALiBi, T5's buckets, Shaw's keys — is taken at row i = p here.
#include <cmath>
#include <vector>

#include "tapegrad/autograd/attention_layout.h"
#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/autograd/textbook.h"
#include "tapegrad/nn/attention.h"
#include "tapegrad/nn/relative_position.h"
#include "tapegrad/nn/rope.h"
#include "tapegrad/ops/ops.h"

namespace tg::nn {
namespace {

// Which keys 0..sk-1 the query at p = sk - 1 may see under a sparse layout, as a [1, sk] mask.
Tensor newest_row_mask(const SparsityLayout& layout, int64_t sk, Device device) {
  const SparsityView view{layout};  // no random blocks: decodes_incrementally rules them out
  std::vector<bool> visible(sk);
  for (int64_t j = 0; j < sk; ++j) visible[j] = view.visible(sk - 1, j);
  return from_bools(visible, {1, sk}, device);
}

}  // namespace

Tensor MultiHeadAttention::forward_cached(const Tensor& x, KVCache::Layer& cache) const {
  const char* obstacle = why_not_incremental(spec);
  TG_CHECK(!obstacle, "MultiHeadAttention::forward_cached: this attention cannot decode one "
           "position at a time: ", obstacle ? obstacle : "");
  TG_CHECK(!grad_enabled(), "MultiHeadAttention::forward_cached: incremental decoding records "
           "nothing; run it under NoGrad");
  const int64_t offset = cache.length, n = x.dim() == 3 ? x.size(1) : 0;
  TG_CHECK(x.dim() == 3 && x.size(2) == hidden && n >= 1 && (offset == 0 || n == 1) &&
               x.size(0) == cache.keys.size(0),
           "MultiHeadAttention::forward_cached: x ", shape_str(x.shape()), " must be [",
           cache.keys.size(0), ", n, ", hidden, "] with n = 1 once the cache holds positions (it "
           "holds ", offset, ")");
  // 1. Project the new positions; keys and values go to the cache as [B, n, heads, head_dim].
  Tensor q = split_heads(q_proj->forward(x));  // [B, heads, n, head_dim]
  Tensor k_rows = k_proj->forward(x).view({x.size(0), n, heads, head_dim});
  const Tensor v_rows = v_proj->forward(x).view({x.size(0), n, heads, head_dim});
  if (spec.position == PositionKind::rope) {  // rotated by their absolute positions
    q = apply_rope(q, offset);
    k_rows = apply_rope(k_rows.transpose(1, 2), offset).transpose(1, 2);
  }
  cache.append(k_rows, v_rows);
  const Tensor k = cache.cached_keys(), v = cache.cached_values();
  // 2. The prompt attends causally as forward does; a new token attends over the whole cache.
  const Tensor context = offset == 0 ? attend(q, k, v, Tensor(), true, 0.0, false).first
                                     : attend_newest(q, k, v);
  return o_proj->forward(merge_heads(context));
}

Tensor MultiHeadAttention::attend_newest(const Tensor& q, const Tensor& k, const Tensor& v) const {
  if (!spec.has_scores()) return approximate_attention(q, k, v, Tensor(), false, 0.0);
  const int64_t sk = k.size(2);
  const SparsityLayout layout = spec.sparsity();
  const Tensor mask =
      layout.kind == SparsityKind::full ? Tensor() : newest_row_mask(layout, sk, q.device());
  const DType bias_dtype = is_half(q.dtype()) ? DType::f32 : q.dtype();
  // The bias row as the kernel's; under tg::Textbook (autograd/textbook.h) the explicit path.
  if (use_fused && !textbook_mode() && spec.position != PositionKind::shaw) {
    return scaled_dot_product_attention(q, k, v, mask, false, 0.0, {}, {}, false,
                                        newest_row_bias(sk, bias_dtype, q.device()));
  }
  Tensor bias;  // [heads, 1, Sk] or Shaw's [B, heads, 1, Sk]
  if (spec.position == PositionKind::shaw) {
    const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
    bias = shaw_relative_logits(q, relative_key->weight.to(q.dtype()), sk, sk - 1) * scale;
  } else if (Tensor row = newest_row_bias(sk, q.dtype(), q.device()); row.defined()) {
    bias = row.unsqueeze(1);
  }
  return explicit_attention(q, k, v, mask, false, 0.0, bias).first;
}

Tensor MultiHeadAttention::newest_row_bias(int64_t sk, DType dtype, Device device) const {
  if (spec.position == PositionKind::t5) {  // causal buckets of j - p
    return t5_relative_bias(relative_attention_bias->weight, 1, sk, false,
                            spec.relative.max_distance, sk - 1)
        .to(dtype);
  }
  if (spec.position != PositionKind::alibi) return Tensor();
  std::vector<double> bias(heads * sk);  // causal ALiBi: -slope (p - j)
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t j = 0; j < sk; ++j) bias[h * sk + j] = -alibi_slope(h, heads) * (sk - 1 - j);
  }
  return from_values(bias, {heads, sk}, dtype, device);
}

}  // namespace tg::nn
