// Learned relative positions: T5's buckets and Shaw's clipped relative keys, both looked up with
// the embedding op so that the tape carries their gradients to the tables.
#include "tapegrad/nn/relative_position.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/ops/ops.h"

namespace tg::nn {

int64_t t5_relative_position_bucket(int64_t relative_position, bool bidirectional,
                                    int64_t num_buckets, int64_t max_distance) {
  TG_CHECK(num_buckets >= 4 && max_distance >= num_buckets,
           "t5_relative_position_bucket: needs num_buckets >= 4 and max_distance >= num_buckets, "
           "got ", num_buckets, " buckets, max_distance ", max_distance);
  constexpr int64_t kFarthest = int64_t{1} << 62;  // |relative_position| capped: no overflow
  relative_position = std::clamp(relative_position, -kFarthest, kFarthest);
  int64_t bucket = 0, buckets = num_buckets, distance = 0;
  if (bidirectional) {  // keys after the query take the upper half
    buckets /= 2;
    if (relative_position > 0) bucket += buckets;
    distance = std::abs(relative_position);
  } else {  // causal: only keys before the query count, later ones fall in bucket 0
    distance = -std::min<int64_t>(relative_position, 0);
  }
  const int64_t max_exact = buckets / 2;  // half of the buckets hold one distance each
  if (distance < max_exact) return bucket + distance;
  // the rest, log-spaced from max_exact to max_distance, in f32 as PyTorch's
  // torch.log(rp.float() / max_exact) / math.log(max_distance / max_exact) * (buckets - max_exact)
  const float ratio = static_cast<float>(distance) / static_cast<float>(max_exact);
  const float range = static_cast<float>(
      std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact)));
  const float spread = std::log(ratio) / range * static_cast<float>(buckets - max_exact);
  const int64_t large = max_exact + static_cast<int64_t>(std::min(spread, 1e9f));  // truncated
  return bucket + std::min(large, buckets - 1);
}

Tensor t5_relative_bias(const Tensor& table, int64_t sq, int64_t sk, bool bidirectional,
                        int64_t max_distance, int64_t query_offset) {
  TG_CHECK(table.defined() && table.dim() == 2 && sq >= 1 && sk >= 1, "t5_relative_bias: table ",
           table.defined() ? shape_str(table.shape()) : std::string("undefined"),
           " must be [num_buckets, heads], for Sq ", sq, ", Sk ", sk, " (both >= 1)");
  TG_CHECK(query_offset >= 0 && query_offset <= (int64_t{1} << 40), "t5_relative_bias: query "
           "offset ", query_offset, " must be in [0, 2^40]");
  // Sq + Sk - 1 checked, and the buckets written into a tensor (no std::vector first): sizes too
  // large are a tg::Error, never a wrapped count or a std::length_error.
  const int64_t offsets = checked_add(sq, sk - 1, "t5_relative_bias: Sq + Sk - 1");
  Tensor bucket_ids = empty({offsets}, DType::i64, kCPU);
  int64_t* buckets = bucket_ids.data_as<int64_t>();
  // entry o is row i, key j with j - i = o - (Sq - 1): query position i + query_offset
  for (int64_t o = 0; o < offsets; ++o) {
    buckets[o] = t5_relative_position_bucket(o - (sq - 1) - query_offset, bidirectional,
                                             table.size(0), max_distance);
  }
  // [Sq + Sk - 1, heads] rows of the table -> [heads, Sq + Sk - 1]
  return embedding(bucket_ids.to(table.device()), table).transpose(0, 1);
}

Tensor shaw_relative_logits(const Tensor& q, const Tensor& table, int64_t sk,
                            int64_t query_offset) {
  TG_CHECK(q.defined() && table.defined() && q.dim() >= 2 && table.dim() == 2 &&
               table.size(1) == q.size(-1) && table.size(0) >= 3 && table.size(0) % 2 == 1 &&
               sk >= 1 && query_offset >= 0 && query_offset <= (int64_t{1} << 40),
           "shaw_relative_logits: q ",
           q.defined() ? shape_str(q.shape()) : std::string("undefined"),
           " [..., Sq, d] and table ",
           table.defined() ? shape_str(table.shape()) : std::string("undefined"),
           " [2k + 1, d] (k >= 1) do not fit, for Sk ", sk, " (query offset ", query_offset,
           " in [0, 2^40])");
  const int64_t clip = (table.size(0) - 1) / 2, sq = q.size(-2);
  const int64_t rows = numel(q.shape()) / std::max<int64_t>(q.size(-1), 1);  // one per query
  TG_CHECK(sk <= (int64_t{1} << 31) / std::max<int64_t>(rows, 1), "shaw_relative_logits: ", rows,
           " query rows x Sk ", sk, " is more than 2^31 scores");
  // Only the distances that occur, j - i for i in [offset, offset + Sq), j in [0, Sk), clipped to
  // [-k, k]: at most Sq + Sk - 1 rows of the table, however large k is. Multiplying by all 2k + 1
  // rows would make the cost and memory grow with k (and a large clip with a short context would
  // pay for rows no pair reads). The narrow's backward puts their gradient into the table's rows.
  const int64_t last_query = query_offset + std::max<int64_t>(sq - 1, 0);
  const int64_t nearest = std::clamp<int64_t>(-last_query, -clip, clip);
  const int64_t farthest = std::clamp<int64_t>(sk - 1 - query_offset, -clip, clip);
  const int64_t width = farthest - nearest + 1;
  const Tensor used_rows = table.narrow(0, nearest + clip, width);  // distances nearest..farthest
  const Tensor per_distance = matmul(q, used_rows.transpose(0, 1));  // [..., Sq, width]
  // Row r of per_distance (query i = r mod Sq) gives key j its column clip(j - i, -k, k) - nearest.
  std::vector<int64_t> picks(rows * sk);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = r % sq + query_offset;
    for (int64_t j = 0; j < sk; ++j) {
      picks[r * sk + j] = r * width + std::clamp(j - i, -clip, clip) - nearest;
    }
  }
  Shape out_shape = q.shape();
  out_shape.back() = sk;
  // The lookup in f32 for f16 / bf16 (mixed precision), whose rows the embedding op does not take
  const DType dtype = per_distance.dtype();
  const Tensor flat = (is_half(dtype) ? per_distance.to(DType::f32) : per_distance)
                          .reshape({rows * width, 1});
  return embedding(from_indices(picks, {rows, sk}, q.device()), flat).view(out_shape).to(dtype);
}

}  // namespace tg::nn
