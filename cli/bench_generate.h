#pragma once
// `tapegrad bench --workload generate`: tokens per second of greedy generation from the charlm
// workload's model (nn::CharLM, vocab 100, 2 layers, dim 128, 4 heads, sinusoidal), batch 1,
// through the KV cache and, for reference, without it (the whole context again per token). One
// row per context C (the model's max_len and the window): 128 generates 256 tokens after a
// 64-token prompt (the window restarts on the way); 512 and 2048 generate C - 64 after 64, the
// context growing to C. Each row also gives the allocator's peak bytes of a generation.
#include <cstdint>

namespace tg::cli {

struct GenerateBenchOptions {
  int64_t max_context = 2048;    // the longest context measured (128, 512, 2048 up to it)
  int64_t max_uncached = 512;    // contexts past this skip the uncached figure (minutes of work)
  int steps = 3;                 // timed generations per row, cached (the median is reported)
  int warmup = 1;
  bool json = false;             // one JSON line per row instead of the table
};

// Runs on the default device (the caller's DefaultDeviceScope); returns the exit code.
int bench_generate(const GenerateBenchOptions& options);

}  // namespace tg::cli
