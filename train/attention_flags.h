#pragma once
// The text of `tapegrad train --attention` and `--position`, parsed strictly into an
// nn::AttentionSpec and written back in one canonical spelling (the one a checkpoint stores):
//   --attention  full | local:W | band:W[,D] | bigbird:W,R,G | linformer:K | performer:M
//   --position   sinusoidal | rope | alibi | none
// W is a window in positions, D a dilation, R random key blocks per block of 64 queries,
// G global tokens, K Linformer's rank, M Performer's random features (nn/attention_spec.h).
#include <string>

#include "tapegrad/nn/attention_spec.h"

namespace tg::train {

// A spec with kind and its numbers set (seed, max_len and position left at their defaults).
// Anything else (an unknown kind, a missing, extra, malformed, zero or too large number) is one
// tg::Error naming --attention and the text.
nn::AttentionSpec parse_attention(const std::string& text);
// The canonical text of the spec's kind and numbers: parse_attention(format_attention(s)) gives
// them back. band's dilation is left out when it is 1.
std::string format_attention(const nn::AttentionSpec& spec);

nn::PositionKind parse_position(const std::string& text);  // tg::Error naming --position
std::string format_position(nn::PositionKind position);

// The combinations that cannot work, each one tg::Error saying why: Linformer on a causal task
// (charlm: projecting along the sequence mixes later positions into earlier ones), ALiBi without
// the fused kernel's scores (linformer, performer), RoPE on an odd head_dim (it rotates pairs of
// channels), and Linformer's or Performer's tables past Limits::positions entries.
void check_attention_fits(const nn::AttentionSpec& spec, const std::string& task, int64_t max_len,
                          int64_t head_dim);

}  // namespace tg::train
