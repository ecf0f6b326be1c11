#pragma once
// The text of `tapegrad train --attention` and `--position`, parsed strictly into an
// nn::AttentionSpec and written back in one canonical spelling (the one a checkpoint stores):
//   --attention  full | local:W | band:W[,D] | bigbird:W,R,G | linformer:K | performer:M
//                | reformer:B,R
//   --position   sinusoidal | rope | alibi | none | t5[:B[,D]] | shaw[:K]
// W is a window in positions, D a dilation, R random key blocks per block of 64 queries,
// G global tokens, K Linformer's rank, M Performer's random features, B Reformer's buckets (even)
// and R its hash rounds (at most 64) (nn/attention_spec.h); for --position, B T5's buckets
// (default 32), D the distance its last bucket starts at (default 128), K Shaw's clipping
// distance (default 16). The canonical spelling of t5 and shaw writes every number
// ("t5:32,128", "shaw:16"), so that a checkpoint never depends on a default.
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

// A spec with the position's kind and its numbers set (spec.relative; the rest left at their
// defaults); tg::Error naming --position and the text.
nn::AttentionSpec parse_position(const std::string& text);
std::string format_position(const nn::AttentionSpec& spec);

// The combinations that cannot work, each one tg::Error saying why: Linformer on a causal task
// (charlm: projecting along the sequence mixes later positions into earlier ones), ALiBi without
// the fused kernel's scores (linformer, performer, reformer), RoPE on an odd head_dim (it rotates
// pairs of channels), T5 and Shaw likewise without scores, and Linformer's, Performer's,
// Reformer's or Shaw's tables past Limits::positions entries.
void check_attention_fits(const nn::AttentionSpec& spec, const std::string& task, int64_t max_len,
                          int64_t head_dim);

// Whether the sparse layout of `spec` (local, band, bigbird) lets every query of a sequence of
// `length` positions see every key (causal: every key up to itself), so that it computes full
// attention there: local:W when W >= length, band when its dilation is 1 and W >= length, bigbird
// when its window, global tokens and random blocks cover every pair (at length <= 64 one random
// block is every block). False for the other kinds.
bool layout_covers_every_pair(const nn::AttentionSpec& spec, int64_t length, bool causal);
// The one line `train` prints then ("attention: --attention local:64 covers every (query, key)
// pair at <where>: it equals full attention there"), or "" when the layout does not cover them.
// `where` names the length, e.g. "--context 64".
std::string full_coverage_notice(const nn::AttentionSpec& spec, int64_t length, bool causal,
                                 const std::string& where);

}  // namespace tg::train
