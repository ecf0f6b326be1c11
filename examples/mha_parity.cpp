// Writes what bench/compare_torch_mha.py compares with PyTorch: one small MultiHeadAttention's
// weights (state_dict names q_proj / k_proj / v_proj / o_proj, PyTorch's (out, in) layout), an
// input, and tapegrad's outputs on it for each mask kind, from both attention paths:
//
//   x                      [B, S, E] f32 input (self-attention: query = key = value = x)
//   lengths                [B] i64, real positions of each sequence (padding past them)
//   padding_mask           [B, 1, 1, S] bool, true = may attend (tapegrad's convention)
//   out.<kind>.fused       [B, S, E] the fused kernel's output, kind = none | causal | padding
//   out.<kind>.explicit    [B, S, E] the explicit path's (softmax weights formed, use_fused = false)
//
// usage: mha_parity OUT.safetensors
#include <cstdio>
#include <string>

#include "tapegrad/autograd/rng.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/io/safetensors.h"
#include "tapegrad/nn/attention.h"
#include "tapegrad/nn/masks.h"
#include "tapegrad/ops/ops.h"

using namespace tg;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT.safetensors\n", argv[0]);
    return 2;
  }
  constexpr int64_t kBatch = 2, kSeq = 6, kDim = 16, kHeads = 4;
  manual_seed(2024);
  nn::MultiHeadAttention mha(kDim, kHeads);
  mha.eval();
  const Tensor x = randn({kBatch, kSeq, kDim});
  const std::vector<int64_t> lengths = {kSeq, 4};
  const Tensor padding = nn::padding_mask(lengths, kSeq);  // [B, 1, 1, S]

  std::vector<std::pair<std::string, Tensor>> tensors = mha.state_dict();
  tensors.emplace_back("x", x);
  tensors.emplace_back("lengths", from_indices(lengths, {kBatch}));
  tensors.emplace_back("padding_mask", padding);
  NoGrad no_grad;
  for (const bool fused : {true, false}) {
    mha.use_fused = fused;
    const std::string path = fused ? ".fused" : ".explicit";
    tensors.emplace_back("out.none" + path, mha.forward(x, x, x).output);
    tensors.emplace_back("out.causal" + path, mha.forward(x, x, x, Tensor(), false, /*is_causal=*/true).output);
    tensors.emplace_back("out.padding" + path, mha.forward(x, x, x, padding).output);
  }
  save_safetensors(argv[1], tensors, {{"heads", std::to_string(kHeads)}, {"parameters", std::to_string(mha.parameter_count())}});
  std::printf("wrote %s: MultiHeadAttention(%lld, %lld heads), %lld parameters\n", argv[1],
              static_cast<long long>(kDim), static_cast<long long>(kHeads),
              static_cast<long long>(mha.parameter_count()));
  return 0;
}
