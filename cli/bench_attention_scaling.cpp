#include "tapegrad/cli/bench_attention_scaling.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/autograd/storage.h"
#include "tapegrad/nn/reformer.h"
#include "tapegrad/ops/ops.h"

namespace tg::cli {
namespace {

constexpr int64_t kHeads = 4, kHeadDim = 32, kWindow = 256;
constexpr int64_t kShortestSeq = 1024, kLongestSeq = 16384;
// From here one timed step is enough (and all there is time for); it still follows one untimed
// step, so that it reuses the allocator's cached blocks as every later training step does rather
// than paying the first touch of fresh pages (a cold first step is not what a step costs).
constexpr int64_t kOneStepFrom = 8192;
// Reformer's row: 32 buckets (chunks of 64 from S = 1024 on: nn::reformer_chunk_length), 2 rounds.
constexpr int64_t kReformerBuckets = 32, kReformerRounds = 2;

struct Layout {
  std::string name;
  SparsityLayout sparsity;
  bool reformer = false;  // nn::reformer_attention (taped ops, shared QK: k unused) instead
};

// One layout's causal attention on q, k, v [1, heads, S, d].
Tensor attend(const Layout& layout, const Tensor& q, const Tensor& k, const Tensor& v,
              const Tensor& rotations) {
  if (layout.reformer) return nn::reformer_attention(q, v, rotations, Tensor(), /*is_causal=*/true);
  return scaled_dot_product_attention(q, k, v, Tensor(), /*is_causal=*/true, 0.0, {},
                                      layout.sparsity);
}

// S = 1024, 2048, ... up to max_seq; just max_seq when it is shorter than 1024.
std::vector<int64_t> sequence_lengths(int64_t max_seq) {
  if (max_seq < kShortestSeq) return {max_seq};
  std::vector<int64_t> lengths;
  for (int64_t s = kShortestSeq; s <= std::min(max_seq, kLongestSeq); s *= 2) lengths.push_back(s);
  return lengths;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

struct Row {
  double ms = 0;
  int64_t peak_bytes = 0;
};

// Forward + backward of the fused op at one length: the median time of the timed steps, and the
// allocator's peak during one step (q, k, v and the output gradient live before it).
Row measure(const Layout& layout, int64_t seq, const AttentionScalingOptions& options) {
  const Device device = default_device();
  Tensor q = randn({1, kHeads, seq, kHeadDim}), k = randn({1, kHeads, seq, kHeadDim}),
         v = randn({1, kHeads, seq, kHeadDim});
  for (Tensor* t : {&q, &k, &v}) t->requires_grad_();
  const Tensor grad_out = randn({1, kHeads, seq, kHeadDim});
  const Tensor rotations =
      nn::reformer_rotations(kReformerRounds, kHeadDim, kReformerBuckets, /*seed=*/0);
  const auto step = [&] {
    const Tensor out = attend(layout, q, k, v, rotations);
    out.backward(grad_out);
    for (Tensor* t : {&q, &k, &v}) t->zero_grad();
  };
  const int steps = seq >= kOneStepFrom ? 1 : options.steps;
  for (int i = 0; i < (seq >= kOneStepFrom ? 1 : options.warmup); ++i) step();
  reset_allocator_stats(device);
  std::vector<double> ms;
  for (int i = 0; i < steps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    step();
    kernels(device).synchronize();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  return {median(ms), allocator_stats(device).peak_bytes};
}

}  // namespace

int bench_attention_scaling(const AttentionScalingOptions& options) {
  manual_seed(0);
  const std::vector<Layout> layouts = {
      {"full", SparsityLayout{}},
      {"local:" + std::to_string(kWindow), SparsityLayout{.kind = SparsityKind::local, .window = kWindow}},
      {"reformer:" + std::to_string(kReformerBuckets) + "," + std::to_string(kReformerRounds),
       SparsityLayout{}, true},
  };
  if (!options.json) {
    std::printf("attn-scaling: scaled_dot_product_attention (reformer: nn::reformer_attention) "
                "forward + backward, causal, q k v [1, %lld, S, %lld] f32 on %s\n",
                static_cast<long long>(kHeads),
                static_cast<long long>(kHeadDim), device_name(default_device()).c_str());
    std::printf("%-14s %7s %12s %14s\n", "layout", "S", "ms", "peak bytes");
  }
  for (const Layout& layout : layouts) {
    for (const int64_t seq : sequence_lengths(options.max_seq)) {
      const Row row = measure(layout, seq, options);
      if (options.json) {
        const nlohmann::json line = {{"workload", "attn-scaling"}, {"layout", layout.name},
                                     {"seq", seq}, {"heads", kHeads}, {"head_dim", kHeadDim},
                                     {"ms", row.ms}, {"peak_bytes", row.peak_bytes},
                                     {"device", device_name(default_device())}};
        std::cout << line.dump() << std::endl;
      } else {
        std::printf("%-14s %7lld %12.3f %14lld\n", layout.name.c_str(), static_cast<long long>(seq),
                    row.ms, static_cast<long long>(row.peak_bytes));
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

}  // namespace tg::cli
