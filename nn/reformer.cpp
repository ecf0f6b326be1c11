// Reformer's LSH attention composed from ordinary ops: the hash (matmul, cat, max), the sort
// (argsort), the moves into and out of sorted order (gather), chunked softmax attention (matmul,
// where, exp, sum) and the rounds' combination (softmax over their log-sum-exps). The tape
// differentiates it through q and v on every device; the hash and the sort carry no gradient.
#include "tapegrad/nn/reformer.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <numeric>
#include <string>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/philox.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/ops/ops.h"
#include "tapegrad/runtime/autocast.h"

namespace tg::nn {
namespace {

constexpr double kReformerSelfScore = -1e5;    // a query's own position: wins only when alone
constexpr double kReformerMaskedScore = -1e9;  // a later key (causal), a padded key, a pad slot
// Rotation columns hashed at once: beyond them the hash goes a block at a time, so its memory is
// bounded by the sequence (times this), whatever the number of buckets.
constexpr int64_t kHashColumnsAtOnce = 64;

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
  Tensor group;      // causal only: f32 [items, rounds, chunks, chunk], the slot's bucket (-1: pad)
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

// The causal layout. Nothing a query computes may depend on a later position, so the chunks
// cannot follow the global sorted order: how many positions sort before a query (later ones too)
// would move its chunk's boundaries, and with them the keys it sees. Instead each bucket's run of
// positions is cut into chunks of its own (its last chunk padded with masked slots), and a query
// sees only keys of its own bucket (`group`): those of its chunk and of the bucket's chunk before
// it, at positions up to its own. Its rank within its bucket counts earlier positions only, so its
// candidates depend on positions up to its own alone. The slot count depends on the buckets (at
// most S + occupied buckets x (C - 1), so O(S)), hence the layout is built on the host, as plain
// indices, and moved to the buckets' device. buckets i64 [items, rounds, seq]; key_real f32
// [items, seq] or undefined.
LshLayout sort_into_bucket_chunks(const Tensor& buckets, const Tensor& key_real, int64_t chunk) {
  LshLayout layout;
  layout.items = buckets.size(0);
  layout.rounds = buckets.size(1);
  layout.seq = buckets.size(2);
  layout.chunk = chunk;
  const int64_t seq = layout.seq, lines = layout.items * layout.rounds;  // a line: item and round
  const std::vector<int64_t> bucket = buckets.contiguous().to_host_i64();
  const std::vector<double> real =
      key_real.defined() ? key_real.contiguous().to_host_f64() : std::vector<double>();
  const auto round_up = [chunk](int64_t n) { return (n + chunk - 1) / chunk * chunk; };

  // Per line: each position's slot and its bucket's ordinal (positions sorted by bucket, stable).
  std::vector<int64_t> slot_of(lines * seq), group_of(lines * seq), sorted(seq);
  int64_t slots = chunk;
  for (int64_t line = 0; line < lines; ++line) {
    const int64_t* line_bucket = &bucket[line * seq];
    std::iota(sorted.begin(), sorted.end(), int64_t{0});
    std::stable_sort(sorted.begin(), sorted.end(), [&](int64_t a, int64_t b) {
      return line_bucket[a] < line_bucket[b];
    });
    int64_t next = 0, group = -1;
    for (int64_t k = 0; k < seq; ++k) {
      const int64_t position = sorted[k];
      if (k == 0 || line_bucket[position] != line_bucket[sorted[k - 1]]) {
        next = round_up(next);  // a new bucket starts a new chunk
        ++group;
      }
      slot_of[line * seq + position] = next++;
      group_of[line * seq + position] = group;
    }
    slots = std::max(slots, round_up(next));
  }
  layout.slots = slots;
  layout.chunks = slots / chunk;

  std::vector<int64_t> order(lines * slots, 0), unsort(lines * seq);
  std::vector<double> positions(lines * slots, 0.0), visible(lines * slots, 0.0),
      group(lines * slots, -1.0);
  for (int64_t line = 0; line < lines; ++line) {
    const int64_t item = line / layout.rounds;
    for (int64_t position = 0; position < seq; ++position) {
      const int64_t slot = line * slots + slot_of[line * seq + position];
      order[slot] = position;
      positions[slot] = static_cast<double>(position);
      visible[slot] = real.empty() ? 1.0 : real[item * seq + position];
      group[slot] = static_cast<double>(group_of[line * seq + position]);
      unsort[line * seq + position] = slot_of[line * seq + position];
    }
  }
  const Device device = buckets.device();
  const Shape chunked{layout.items, layout.rounds, layout.chunks, chunk};
  layout.order = from_indices(order, {layout.items, layout.rounds * slots}, device);
  layout.unsort = from_indices(unsort, {layout.items, layout.rounds, seq}, device);
  layout.positions = from_values(positions, chunked, DType::f32, device);
  layout.visible = from_values(visible, chunked, DType::f32, device);
  layout.group = from_values(group, chunked, DType::f32, device);
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
  if (layout.group.defined()) {  // the causal layout: keys of the query's own bucket only
    const Tensor query_group = layout.group.unsqueeze(-1);
    const Tensor key_group = with_previous_chunk(layout.group.unsqueeze(-1)).transpose(-1, -2);
    scores = where(equal(query_group, key_group).to(DType::b8), scores, masked_score);
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
  const Tensor points = keys.detach().unsqueeze(-3);  // [.., 1, S, d]
  const int64_t half = rotations.size(2);
  if (half <= kHashColumnsAtOnce) {
    const Tensor rotated = matmul(points, rotations.detach().to(keys.dtype()));
    return max(cat({rotated, -rotated}, -1), -1).indices;  // [.., R, S]
  }
  // Many buckets: the columns of [x W ; -x W] a block at a time, keeping each position's best so
  // far, so that memory is O(S R) and not O(S R B). The blocks go in column order (all of x W,
  // then -x W) and a later block wins only where it is strictly larger: the first maximum, as
  // above. The running best index is kept in f64 (exact below 2^53), where's dtype.
  Tensor best_value, best_index;
  for (const double sign : {1.0, -1.0}) {
    for (int64_t first = 0; first < half; first += kHashColumnsAtOnce) {
      const int64_t width = std::min(kHashColumnsAtOnce, half - first);
      const Tensor columns = rotations.detach().narrow(2, first, width).to(keys.dtype());
      const MaxResult block = max(matmul(points, columns) * sign, -1, true);  // [.., R, S, 1]
      const double offset = static_cast<double>(first + (sign < 0 ? half : 0));
      const Tensor index = block.indices.to(DType::f64) + offset;
      if (!best_value.defined()) {
        best_value = block.values;
        best_index = index;
        continue;
      }
      // max over [best, block] picks index 0 (the earlier) on a tie: 1 only where strictly larger
      const Tensor later_wins =
          max(cat({best_value, block.values}, -1), -1, true).indices.to(DType::b8);
      best_value = where(later_wins, block.values, best_value);
      best_index = where(later_wins, index, best_index);
    }
  }
  return best_index.squeeze(-1).to(DType::i64);
}

Tensor lsh_attention(const Tensor& q, const Tensor& v, const Tensor& buckets,
                     const Tensor& key_padding, bool is_causal, int64_t chunk_length,
                     double dropout_p) {
  check_lsh_shapes(q, v, buckets, key_padding, chunk_length);
  TG_CHECK(dropout_p >= 0 && dropout_p < 1, "lsh_attention: dropout_p must be in [0, 1), got ",
           dropout_p);
  const int64_t batch = q.size(0), heads = q.size(1), seq = q.size(2), items = batch * heads;
  if (seq == 0) return zeros({batch, heads, 0, v.size(-1)}, v.dtype(), v.device());  // no query
  const Tensor line_buckets = buckets.reshape({items, buckets.size(2), seq});
  const Tensor key_real = key_real_per_head(key_padding, heads);
  const int64_t chunk = std::min(chunk_length, seq);
  const LshLayout layout = is_causal ? sort_into_bucket_chunks(line_buckets, key_real, chunk)
                                     : sort_into_chunks(line_buckets, key_real, chunk);
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
  if (q.size(2) == 0) {  // an empty sequence: an empty output, as lsh_attention gives it
    return lsh_attention(q, v, zeros({q.size(0), q.size(1), rotations.size(0), 0}, DType::i64,
                                     q.device()),
                         key_padding, is_causal, std::max<int64_t>(chunk_length, 1), dropout_p);
  }
  const int64_t chunk =
      chunk_length > 0 ? chunk_length : reformer_chunk_length(q.size(2), 2 * rotations.size(2));
  // The hash of q is that of its key q / |q|: a positive scale does not move the argmax.
  return lsh_attention(q, v, reformer_buckets(q, rotations), key_padding, is_causal, chunk,
                       dropout_p);
}

}  // namespace tg::nn
