#pragma once
// `tapegrad bench --workload attn-scaling`: how the fused attention op's time and memory grow with
// the sequence length, for full causal attention and a causal local window, and Reformer's LSH
// attention (nn::reformer_attention, 32 buckets, 2 rounds: taped ops, not a fused kernel). One row
// per (layout, S): forward + backward on q, k, v [1, 4, S, 32] f32 (the reformer ignores k).
#include <cstdint>

namespace tg::cli {

struct AttentionScalingOptions {
  int64_t max_seq = 16384;  // the longest S measured (S = 1024, 2048, ..., up to it)
  int steps = 3;            // timed steps per row (the median is reported); 1 at S >= 8192
  int warmup = 1;
  bool json = false;        // one JSON line per row instead of the table
};

// Runs on the default device (the caller's DefaultDeviceScope); returns the exit code.
int bench_attention_scaling(const AttentionScalingOptions& options);

}  // namespace tg::cli
