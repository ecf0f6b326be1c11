// Multi-head attention one step at a time, printing the shape after every step and the tape the
// steps recorded. docs/attention.md quotes this program's output verbatim, and
// tests/docs/test_attention_doc.cpp checks that the quote and the program still agree.
#include <algorithm>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <limits>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/nn/attention.h"
#include "tapegrad/nn/masks.h"
#include "tapegrad/ops/ops.h"

using namespace tg;

namespace {

void show(const char* step, const Tensor& t) {
  std::cout << std::left << std::setw(34) << (std::string(step) + ":") << shape_str(t.shape()) << "\n";
}

}  // namespace

int main() {
  const int64_t B = 2, S = 3, H = 16, h = 4, d = H / h;  // batch, sequence, hidden, heads, head_dim
  manual_seed(0);
  nn::MultiHeadAttention mha(H, h);
  const Tensor x = randn({B, S, H});

  std::cout << "== explicit path, B=2 S=3 H=16 h=4 (head_dim 4), causal ==\n";
  show("input x", x);
  const Tensor q_flat = mha.q_proj->forward(x);
  show("q_proj(x)", q_flat);
  const Tensor q_split = q_flat.view({B, S, h, d});
  show("view(B, S, h, d)", q_split);
  const Tensor q = q_split.transpose(1, 2);
  show("transpose(1, 2)", q);
  const Tensor k = mha.split_heads(mha.k_proj->forward(x));
  const Tensor v = mha.split_heads(mha.v_proj->forward(x));
  show("k, v (same three steps)", k);
  Tensor scores = matmul(q, k.transpose(-1, -2)) * (1.0 / std::sqrt(double(d)));
  show("scores = q k^T / sqrt(d)", scores);
  const Tensor mask = nn::causal_mask(S, S);
  show("causal_mask(S, S)", mask);
  scores = where(mask, scores, scalar(-std::numeric_limits<double>::infinity()));
  show("where(mask, scores, -inf)", scores);
  const Tensor weights = softmax(scores, -1);
  show("weights = softmax(scores, -1)", weights);
  const Tensor context = matmul(weights, v);
  show("context = weights @ v", context);
  const Tensor context_t = context.transpose(1, 2);
  show("transpose(1, 2)", context_t);
  const Tensor merged = context_t.reshape({B, S, H});
  show("reshape(B, S, H)", merged);
  const Tensor output = mha.o_proj->forward(merged);
  show("o_proj(...)", output);

  std::cout << "\n== tape after the explicit forward ==\n" << format_tape();

  clear_tape();
  const Tensor fused = mha.forward(x, Tensor(), /*is_causal=*/true).output;
  std::cout << "\n== tape of mha.forward(x, {}, is_causal=true): the fused path ==\n" << format_tape();

  double max_diff = 0;
  const std::vector<double> a = output.to_host_f64(), b = fused.to_host_f64();
  for (size_t i = 0; i < a.size(); ++i) max_diff = std::max(max_diff, std::abs(a[i] - b[i]));
  std::cout << "\nexplicit and fused outputs agree within 1e-5: " << (max_diff < 1e-5 ? "yes" : "no")
            << "\n";
  return max_diff < 1e-5 ? 0 : 1;
}
