// Reformer's LSH attention composed from ordinary ops: the hash (matmul, cat, max), the sort
// (argsort), the moves into and out of sorted order (gather), chunked softmax attention (matmul,
// where, exp, sum) and the rounds' combination (softmax over their log-sum-exps). The tape
// differentiates it through q and v on every device; the hash and the sort carry no gradient.
#include "tapegrad/nn/reformer.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "tapegrad/autograd/autocast.h"
#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/philox.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/ops/ops.h"

namespace tg::nn {
namespace {

constexpr double kReformerSelfScore = -1e5;    // a query's own position: wins only when alone
constexpr double kReformerMaskedScore = -1e9;  // a later key (causal), a padded key, a pad slot

// Normal number `index` of the stream Philox(seed) at offset 0: Box-Muller on uniforms 2i and
// 2i + 1, as tg::randn; 1 - u keeps the logarithm finite. The global generator is not touched.
double reformer_normal(uint64_t seed, int64_t index) {
  const double u1 = 1.0 - philox_uniform(seed, 0, 2 * index);
  const double u2 = philox_uniform(seed, 0, 2 * index + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

// The sorted order of every round, cut into chunks: what the gathers and the masks read.
// Per (batch, head) item and round there are `slots` = chunks x chunk sorted slots; slot s < seq
// holds position order[s], the slots past seq pad the last chunk and are masked.
struct LshLayout {
  int64_t items = 0, rounds = 0, seq = 0, chunk = 0, chunks = 0, slots = 0;
  Tensor order;      // i64 [items, rounds * slots]: the position in each slot (0 in pad slots)
  Tensor unsort;     // i64 [items, rounds, seq]: the slot of each position, per round
  Tensor positions;  // f32 [items, rounds, chunks, chunk]: `order` as numbers, for the masks
  Tensor visible;    // f32 [items, rounds, chunks, chunk]: 1 for a real key in a real slot, else 0
};

// Sorts positions by (bucket, position) per round (argsort is stable: within a bucket positions
// keep their order) and pads each round to whole chunks. buckets i64 [items, rounds, seq];
// key_real f32 [items, seq] (1 = a real key) or undefined.
LshLayout sort_into_chunks(const Tensor& buckets, const Tensor& key_real, int64_t chunk) {
  LshLayout layout;
  layout.items = buckets.size(0);
  layout.rounds = buckets.size(1);
  layout.seq = buckets.size(2);
  layout.chunk = chunk;
  layout.chunks = (layout.seq + chunk - 1) / chunk;
  layout.slots = layout.chunks * chunk;
  const int64_t pad = layout.slots - layout.seq;
  const Device device = buckets.device();

  const Tensor sorted_positions = argsort(buckets, -1);  // [items, rounds, seq]
  layout.unsort = argsort(sorted_positions, -1);         // the inverse permutation
  Tensor order = sorted_positions;
  if (pad > 0) {
    order = cat({order, zeros({layout.items, layout.rounds, pad}, DType::i64, device)}, -1);
  }
  layout.order = order.reshape({layout.items, layout.rounds * layout.slots});
  const Shape chunked{layout.items, layout.rounds, layout.chunks, chunk};
  layout.positions = order.to(DType::f32).view(chunked);

  std::vector<double> slot_is_real(layout.slots, 0.0);  // 1 for the first seq slots
  std::fill(slot_is_real.begin(), slot_is_real.begin() + layout.seq, 1.0);
  const Tensor real_slot = from_values(slot_is_real, {1, 1, layout.chunks, chunk}, DType::f32,
                                       device);
  layout.visible = real_slot.expand(chunked).contiguous();
  if (key_real.defined()) {  // a padded key stays masked wherever the sort takes it
    layout.visible = gather(key_real, 1, layout.order).view(chunked) * real_slot;
  }
  return layout;
}

// x [items, rounds, chunks, C, d] -> [items, rounds, chunks, 2C, d]: each chunk followed by the
// one before it in sorted order (the first chunk's is the last, as in the paper's code). With a
// single chunk there is no other: it attends to itself only.
Tensor with_previous_chunk(const Tensor& x) {
  const int64_t chunks = x.size(2);
  if (chunks == 1) return x;
  const Tensor previous = cat({x.narrow(2, chunks - 1, 1), x.narrow(2, 0, chunks - 1)}, 2);
  return cat({x, previous}, 3);
}

// The rows of x [items, S, d] in sorted order, chunked: [items, rounds, chunks, C, d].
Tensor sorted_chunks(const Tensor& x, const LshLayout& layout) {
  const int64_t width = x.size(-1);
  const Tensor index =
      layout.order.unsqueeze(-1).expand({layout.items, layout.rounds * layout.slots, width});
  return gather(x, 1, index).view(
      {layout.items, layout.rounds, layout.chunks, layout.chunk, width});
}

// Chunk queries against their window's keys, masked: [items, rounds, chunks, C, K] in f32 or f64.
// The own position gets -1e5 (so a query attends to itself only when it sees nothing else);
// later keys (causal), padded keys and pad slots get -1e9: finite, so no row is ever all -inf.
Tensor masked_chunk_scores(const Tensor& queries, const Tensor& window_keys,
                           const LshLayout& layout, bool is_causal) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(queries.size(-1)));
  // Under autocast the product is half; the scores and the masking run in f32.
  Tensor scores = autocast_to_f32(matmul(queries, window_keys.transpose(-1, -2))) * scale;
  const Tensor self_score = scalar(kReformerSelfScore, scores.dtype(), scores.device());
  const Tensor masked_score = scalar(kReformerMaskedScore, scores.dtype(), scores.device());
  const Tensor query_position = layout.positions.unsqueeze(-1);  // [.., C, 1]
  const Tensor key_position =                                     // [.., 1, K]
      with_previous_chunk(layout.positions.unsqueeze(-1)).transpose(-1, -2);
  // (equal gives 1 or 0 in its inputs' dtype; .to(b8) makes that the bool where takes)
  scores = where(equal(query_position, key_position).to(DType::b8), self_score, scores);
  if (is_causal) {  // key <= query, as relu(key - query) == 0: tapegrad compares only by equal
    const Tensor zero = scalar(0.0, DType::f32, scores.device());
    const Tensor earlier = equal(relu(key_position - query_position), zero).to(DType::b8);
    scores = where(earlier, scores, masked_score);
  }
  const Tensor key_visible = with_previous_chunk(layout.visible.unsqueeze(-1)).transpose(-1, -2);
  return where(key_visible.to(DType::b8), scores, masked_score);
}

// One attention per chunk and round: (outputs [items, rounds, slots, dv], log-sum-exps
// [items, rounds, slots, 1]) in sorted order. Shared QK: the keys are the sorted queries,
// normalised (normalising commutes with the sort).
std::pair<Tensor, Tensor> attend_in_chunks(const Tensor& q, const Tensor& v,
                                           const LshLayout& layout, bool is_causal,
                                           double dropout_p) {
  const Tensor queries = sorted_chunks(q, layout);  // [items, rounds, chunks, C, d]
  const Tensor window_keys = with_previous_chunk(reformer_keys(queries));
  const Tensor window_values = with_previous_chunk(sorted_chunks(v, layout));
  const Tensor scores = masked_chunk_scores(queries, window_keys, layout, is_causal);
  // softmax with its log-sum-exp: the shift is detached (the result does not depend on it).
  const Tensor shift = max(scores.detach(), -1, true).values;
  const Tensor exps = exp(scores - shift);
  const Tensor total = sum(exps, {-1}, true);
  Tensor weights = exps / total;
  if (dropout_p > 0) weights = tg::dropout(weights, dropout_p, /*training=*/true);
  const Tensor outputs = matmul(weights, window_values);  // [items, rounds, chunks, C, dv]
  const Tensor lse = log(total) + shift;                  // [items, rounds, chunks, C, 1]
  const Shape sorted{layout.items, layout.rounds, layout.slots};
  return {outputs.reshape({sorted[0], sorted[1], sorted[2], v.size(-1)}),
          lse.reshape({sorted[0], sorted[1], sorted[2], 1})};
}

// x [items, rounds, slots, w] in sorted order -> [items, rounds, seq, w] in position order.
Tensor unsorted(const Tensor& x, const LshLayout& layout) {
  const Tensor index =
      layout.unsort.unsqueeze(-1).expand({layout.items, layout.rounds, layout.seq, x.size(-1)});
  return gather(x, 2, index);
}

void check_lsh_shapes(const Tensor& q, const Tensor& v, const Tensor& buckets,
                      const Tensor& key_padding, int64_t chunk_length) {
  TG_CHECK(q.defined() && v.defined() && buckets.defined(),
           "lsh_attention: q, v and buckets must all be defined");
  const std::string shapes = "q " + shape_str(q.shape()) + ", v " + shape_str(v.shape()) +
                             ", buckets " + shape_str(buckets.shape());
  TG_CHECK(q.dim() == 4 && v.dim() == 4 && v.size(0) == q.size(0) && v.size(1) == q.size(1) &&
               v.size(2) == q.size(2),
           "lsh_attention: ", shapes, " do not fit q [B, H, S, d], v [B, H, S, dv]");
  TG_CHECK(buckets.dtype() == DType::i64 && buckets.dim() == 4 && buckets.size(0) == q.size(0) &&
               buckets.size(1) == q.size(1) && buckets.size(2) >= 1 && buckets.size(3) == q.size(2),
           "lsh_attention: ", shapes, " (", dtype_name(buckets.dtype()),
           ") do not fit i64 buckets [B, H, R, S] with R >= 1");
  TG_CHECK(is_floating(q.dtype()) && (v.dtype() == q.dtype() || autocast_dtype()),
           "lsh_attention: q and v must share one floating dtype, got ", dtype_name(q.dtype()),
           " and ", dtype_name(v.dtype()));
  TG_CHECK(chunk_length >= 1, "lsh_attention: chunk_length must be >= 1, got ", chunk_length);
  if (key_padding.defined()) {
    TG_CHECK(key_padding.dtype() == DType::b8 && key_padding.dim() == 2 &&
                 key_padding.size(0) == q.size(0) && key_padding.size(1) == q.size(2),
             "lsh_attention: key_padding must be bool [B, S] = [", q.size(0), ", ", q.size(2),
             "], got ", dtype_name(key_padding.dtype()), " ", shape_str(key_padding.shape()));
  }
}

// key_padding bool [B, S] -> f32 [B * H, S], 1 for a real key; undefined stays undefined.
Tensor key_real_per_head(const Tensor& key_padding, int64_t heads) {
  if (!key_padding.defined()) return Tensor();
  const Tensor one = scalar(1.0, DType::f32, key_padding.device());
  const Tensor zero = scalar(0.0, DType::f32, key_padding.device());
  const int64_t batch = key_padding.size(0), seq = key_padding.size(1);
  return where(key_padding, one, zero).unsqueeze(1).expand({batch, heads, seq}).reshape(
      {batch * heads, seq});
}

}  // namespace

int64_t reformer_chunk_length(int64_t seq, int64_t buckets) {
  TG_CHECK(seq >= 1 && buckets >= 2, "reformer_chunk_length: need seq >= 1 and buckets >= 2, got ",
           seq, " and ", buckets);
  const int64_t paper = (2 * seq + buckets - 1) / buckets;  // ceil(2 S / B)
  return std::max<int64_t>(1, std::min(paper, kReformerMaxChunk));
}

Tensor reformer_rotations(int64_t rounds, int64_t head_dim, int64_t buckets, uint64_t seed,
                          DType dtype) {
  TG_CHECK(rounds >= 1 && head_dim >= 1 && buckets >= 2 && buckets % 2 == 0,
           "reformer_rotations: need rounds >= 1, head_dim >= 1 and an even number of buckets "
           ">= 2, got rounds ",
           rounds, ", head_dim ", head_dim, ", buckets ", buckets);
  const int64_t half = buckets / 2;
  const int64_t count = checked_mul(checked_mul(rounds, head_dim, "reformer_rotations"), half,
                                    "reformer_rotations: rounds x head_dim x buckets / 2");
  std::vector<double> values(count);
  for (int64_t i = 0; i < count; ++i) values[i] = reformer_normal(seed, i);
  return from_values(values, {rounds, head_dim, half}, dtype);
}

Tensor reformer_keys(const Tensor& q) { return q / sqrt(sum(q * q, {-1}, true) + 1e-6); }

Tensor reformer_buckets(const Tensor& keys, const Tensor& rotations) {
  TG_CHECK(keys.defined() && rotations.defined() && keys.dim() >= 2 && rotations.dim() == 3 &&
               rotations.size(1) == keys.size(-1),
           "reformer_buckets: keys ", keys.defined() ? shape_str(keys.shape()) : "undefined",
           " and rotations ", rotations.defined() ? shape_str(rotations.shape()) : "undefined",
           " do not fit keys [.., S, d], rotations [R, d, B/2]");
  NoGrad no_grad;  // the hash is a constant to the tape
  const Tensor rotated = matmul(keys.detach().unsqueeze(-3), rotations.detach().to(keys.dtype()));
  return max(cat({rotated, -rotated}, -1), -1).indices;  // [.., R, S]
}

Tensor lsh_attention(const Tensor& q, const Tensor& v, const Tensor& buckets,
                     const Tensor& key_padding, bool is_causal, int64_t chunk_length,
                     double dropout_p) {
  check_lsh_shapes(q, v, buckets, key_padding, chunk_length);
  TG_CHECK(dropout_p >= 0 && dropout_p < 1, "lsh_attention: dropout_p must be in [0, 1), got ",
           dropout_p);
  const int64_t batch = q.size(0), heads = q.size(1), seq = q.size(2), items = batch * heads;
  const LshLayout layout =
      sort_into_chunks(buckets.reshape({items, buckets.size(2), seq}),
                       key_real_per_head(key_padding, heads), std::min(chunk_length, seq));
  const auto [sorted_outputs, sorted_lse] =
      attend_in_chunks(q.reshape({items, seq, q.size(-1)}), v.reshape({items, seq, v.size(-1)}),
                       layout, is_causal, dropout_p);
  // Undo the sort, then weigh round r by exp(z_r - logsumexp_r z_r): the paper's combination.
  const Tensor outputs = unsorted(sorted_outputs, layout);      // [items, rounds, seq, dv]
  const Tensor round_weights = softmax(unsorted(sorted_lse, layout), 1);  // [.., seq, 1]
  return sum(outputs * round_weights, {1}).view({batch, heads, seq, v.size(-1)});
}

Tensor reformer_attention(const Tensor& q, const Tensor& v, const Tensor& rotations,
                          const Tensor& key_padding, bool is_causal, double dropout_p,
                          int64_t chunk_length) {
  TG_CHECK(q.defined() && q.dim() == 4 && rotations.defined() && rotations.dim() == 3,
           "reformer_attention: q ", q.defined() ? shape_str(q.shape()) : "undefined",
           " and rotations ", rotations.defined() ? shape_str(rotations.shape()) : "undefined",
           " do not fit q [B, H, S, d], rotations [R, d, B/2]");
  const int64_t chunk =
      chunk_length > 0 ? chunk_length : reformer_chunk_length(q.size(2), 2 * rotations.size(2));
  // The hash of q is that of its key q / |q|: a positive scale does not move the argmax.
  return lsh_attention(q, v, reformer_buckets(q, rotations), key_padding, is_causal, chunk,
                       dropout_p);
}

}  // namespace tg::nn
