#pragma once
// The key/value cache of incremental decoding. A causal model's keys and values at positions
// 0..p-1 do not change when position p arrives, so generation keeps them: each new token runs one
// position through the model, its query attending over the cached keys, instead of the whole
// context again (O(S) work per token instead of O(S^2)). docs/generation.md walks through it.
//
// One KVCache::Layer per attention, allocated once at its capacity (the window the generator
// keeps, never past the model's max_len) and filled in place: the cache grows without copying,
// and its memory is linear in the context.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tapegrad/autograd/tensor.h"
#include "tapegrad/nn/attention_spec.h"

namespace tg::nn {

class KVCache {
 public:
  // One attention's keys and values, stored [B, capacity, heads, head_dim]: the layout a
  // projection's output has, so that a step's new rows are copied in as they come, and (batch 1)
  // the first `length` rows are the [B, heads, length, head_dim] view the fused kernel reads with
  // heads interleaved, without a copy.
  struct Layer {
    Tensor keys, values;
    int64_t length = 0;  // positions held

    // Appends k and v [B, n, heads, head_dim] at positions length..length+n-1: a tg::Error past the
    // capacity.
    void append(const Tensor& k, const Tensor& v);
    // The held positions as [B, heads, length, head_dim] views.
    Tensor cached_keys() const;
    Tensor cached_values() const;
    int64_t capacity() const { return keys.size(1); }
  };

  // `layers` attentions of `heads` x `head_dim`, for `batch` sequences of up to `capacity`
  // positions (allocated, not filled: only held positions are read); every size must be >= 1 and
  // their product a size that fits memory's arithmetic (a tg::Error naming them otherwise).
  KVCache(int64_t layers, int64_t batch, int64_t capacity, int64_t heads, int64_t head_dim,
          DType dtype, Device device);

  int64_t length() const { return layers.empty() ? 0 : layers.front().length; }  // positions held
  int64_t capacity() const { return capacity_; }
  int64_t batch() const { return batch_; }
  void clear();  // forgets every position (the memory stays, for the next prefill)

  // The model a cache belongs to. Its keys and values are one model's, computed with that model's
  // weights as they were: another model's, or the same model's after an in-place write to a weight
  // (an optimizer step, load_state_dict), would decode silently wrong. So a cache is tied to the
  // weights (the model's state_dict(), by storage) of the model whose make_cache made it, or that
  // used it first, and it keeps their storage versions from when its filling began (the first
  // positions after a construction or a clear()).
  //
  // check_weights(weights, who), before each use by a model: ties an untied cache to `weights`;
  // then a tg::Error naming `who` if they are not the tied ones, or, when the cache holds
  // positions, if one was written since the filling began ("clear() the cache and feed the
  // context again"). When it holds none, the versions are taken now: the filling begins.
  void check_weights(const std::vector<std::pair<std::string, Tensor>>& weights, const char* who);

  std::vector<Layer> layers;

 private:
  struct TiedWeight {
    std::weak_ptr<Storage> storage;  // weak: a cache does not keep a dropped model's weights
    uint64_t version = 0;            // when the filling began
  };
  void tie_to(const std::vector<std::pair<std::string, Tensor>>& weights);

  int64_t capacity_, batch_;
  std::vector<TiedWeight> weights_;  // empty: not tied yet
};

// Whether an attention can decode one position at a time over cached keys and values with the
// result of running the whole causal sequence: each position's output must depend on its own and
// earlier positions only, whatever the sequence's length. Linformer's projection mixes every
// position into its k rank rows (and is sized by the sequence); Reformer's hash buckets and chunks
// are formed over the whole sequence; bigbird's random key blocks are drawn per (Sq, Sk). The
// rest (full, local, band, bigbird without random blocks, performer; every position kind) can.
// why_not_incremental says why an attention cannot (one line), or gives null when it can.
const char* why_not_incremental(const AttentionSpec& spec);
inline bool decodes_incrementally(const AttentionSpec& spec) { return !why_not_incremental(spec); }

}  // namespace tg::nn
