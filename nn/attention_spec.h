#pragma once
// Which attention a MultiHeadAttention computes and how it knows positions: what the CLI's
// --attention and --position say (train/attention_flags.h parses them), kept in a checkpoint's
// config. docs/attention.md has a section per kind.
#include <cstdint>

#include "tapegrad/autograd/attention_layout.h"

namespace tg::nn {

enum class AttentionKind {
  full,       // softmax(q k^T / sqrt(d)) v over every key
  local,      // keys within `window` positions           (fused kernel, block-sparse)
  band,       // every dilation-th key within window * dilation  (fused kernel, block-sparse)
  bigbird,    // local + random key blocks + global tokens       (fused kernel, block-sparse)
  linformer,  // keys and values projected along the sequence to `rank` rows (nn/linformer.h)
  performer,  // FAVOR+ positive random features, `features` of them (nn/performer.h)
  reformer,   // LSH attention: `buckets` buckets, `rounds` hash rounds, shared QK (nn/reformer.h)
};

enum class PositionKind {
  sinusoidal,  // the model adds the sinusoidal table to its input (the default)
  rope,        // rotary: q and k rotated by their position inside attention (nn/rope.h)
  alibi,       // a per-head linear bias on the scores, inside the fused kernel
  none,
  t5,          // T5's learned bias per head and bucket of j - i, inside the fused kernel
  shaw,        // Shaw et al.'s learned relative keys, clipped at a distance (explicit path)
};

// The numbers of the learned relative positions (nn/relative_position.h): T5's buckets and the
// distance its last bucket starts at, Shaw's clipping distance k (relative keys a_{-k} .. a_k).
struct RelativePositions {
  int64_t buckets = 32;         // t5: num_buckets (T5's default)
  int64_t max_distance = 128;   // t5: max_distance (T5's default)
  int64_t clip = 16;            // shaw: k
};

struct AttentionSpec {
  AttentionKind kind = AttentionKind::full;
  int64_t window = 0;         // local, band, bigbird
  int64_t dilation = 1;       // band
  int64_t random_blocks = 0;  // bigbird: random key blocks per block of 64 queries
  int64_t global_tokens = 0;  // bigbird
  int64_t rank = 0;           // linformer: K
  int64_t features = 0;       // performer: M
  int64_t buckets = 0;        // reformer: B (even)
  int64_t rounds = 0;         // reformer: R
  uint64_t seed = 0;          // bigbird's random blocks, performer's features, reformer's rotations
  int64_t max_len = 0;        // linformer: the longest sequence its projections take (rows of E, F)
  PositionKind position = PositionKind::sinusoidal;
  RelativePositions relative = {};  // t5, shaw

  // Whether the attention forms [Sq, Sk] scores a position bias can be added to (linformer,
  // performer and reformer do not).
  bool has_scores() const {
    return kind == AttentionKind::full || kind == AttentionKind::local ||
           kind == AttentionKind::band || kind == AttentionKind::bigbird;
  }

  // The fused kernel's layout: full for full, linformer, performer and reformer.
  SparsityLayout sparsity() const {
    SparsityLayout layout;
    layout.window = window;
    layout.dilation = dilation;
    layout.random_blocks = random_blocks;
    layout.global_tokens = global_tokens;
    layout.seed = seed;
    switch (kind) {
      case AttentionKind::local: layout.kind = SparsityKind::local; break;
      case AttentionKind::band: layout.kind = SparsityKind::band; break;
      case AttentionKind::bigbird: layout.kind = SparsityKind::bigbird; break;
      default: layout.kind = SparsityKind::full; break;
    }
    return layout;
  }
};

}  // namespace tg::nn
