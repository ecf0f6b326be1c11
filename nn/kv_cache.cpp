#include "tapegrad/nn/kv_cache.h"

#include "tapegrad/autograd/error.h"

namespace tg::nn {

KVCache::KVCache(int64_t layer_count, int64_t batch, int64_t capacity, int64_t heads,
                 int64_t head_dim, DType dtype, Device device)
    : capacity_(capacity), batch_(batch) {
  TG_CHECK(layer_count >= 1 && batch >= 1 && capacity >= 1 && heads >= 1 && head_dim >= 1,
           "KVCache: layers ", layer_count, ", batch ", batch, ", capacity ", capacity, ", heads ",
           heads, ", head_dim ", head_dim, " must all be >= 1");
  const int64_t rows = checked_mul(batch, capacity, "KVCache: batch x capacity");
  checked_mul(checked_mul(rows, heads, "KVCache: rows x heads"), head_dim, "KVCache: its size");
  layers.resize(layer_count);
  for (Layer& layer : layers) {
    layer.keys = empty({batch, capacity, heads, head_dim}, dtype, device);
    layer.values = empty({batch, capacity, heads, head_dim}, dtype, device);
  }
}

void KVCache::clear() {
  for (Layer& layer : layers) layer.length = 0;
}

void KVCache::tie_to(const std::vector<std::pair<std::string, Tensor>>& weights) {
  weights_.clear();
  for (const auto& [name, weight] : weights) {
    weights_.push_back({weight.storage(), weight.version()});
  }
}

void KVCache::check_weights(const std::vector<std::pair<std::string, Tensor>>& weights,
                            const char* who) {
  if (weights_.empty()) return tie_to(weights);
  bool same_weights = weights.size() == weights_.size();
  for (size_t i = 0; same_weights && i < weights.size(); ++i) {
    same_weights = weights_[i].storage.lock() == weights[i].second.storage();
  }
  TG_CHECK(same_weights, who, ": the cache belongs to another model (a cache is tied to the model "
           "whose make_cache made it, or that used it first; to() and load() of a model replace "
           "its weights): make a cache with this model's make_cache");
  if (length() == 0) return tie_to(weights);  // the filling begins: the versions from now
  for (size_t i = 0; i < weights.size(); ++i) {
    const auto& [name, weight] = weights[i];
    TG_CHECK(weight.version() == weights_[i].version, who, ": the model's '", name, "' ",
             shape_str(weight.shape()), " was written in place (version ", weights_[i].version,
             ", now ", weight.version(), ") after the cache's keys and values were computed: "
             "they are stale; clear() the cache and feed the context again");
  }
}

void KVCache::Layer::append(const Tensor& k, const Tensor& v) {
  const Shape& shape = keys.shape();
  const int64_t n = k.dim() == 4 ? k.size(1) : 0;
  TG_CHECK(k.dim() == 4 && k.shape() == v.shape() && k.size(0) == shape[0] &&
               k.size(2) == shape[2] && k.size(3) == shape[3] && n >= 1,
           "KVCache: keys ", shape_str(k.shape()), " and values ", shape_str(v.shape()),
           " must both be [B, n, heads, head_dim] for a cache of ", shape_str(shape));
  TG_CHECK(n <= capacity() - length, "KVCache: ", n, " more positions past the ", length,
           " held would exceed its capacity ", capacity());
  keys.narrow(1, length, n).copy_(k);
  values.narrow(1, length, n).copy_(v);
  length += n;
}

Tensor KVCache::Layer::cached_keys() const { return keys.narrow(1, 0, length).transpose(1, 2); }

Tensor KVCache::Layer::cached_values() const {
  return values.narrow(1, 0, length).transpose(1, 2);
}

const char* why_not_incremental(const AttentionSpec& spec) {
  switch (spec.kind) {
    case AttentionKind::linformer: return "linformer's projection mixes every position into its rank rows";
    case AttentionKind::reformer:
      return "reformer's hash buckets and chunks are formed over the whole sequence";
    case AttentionKind::bigbird:
      return spec.random_blocks == 0 ? nullptr : "bigbird's random key blocks are drawn for the "
                                                 "whole sequence's length";
    default: return nullptr;
  }
}

}  // namespace tg::nn
