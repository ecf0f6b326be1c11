// Attention, drawn: a small model (token embeddings plus sinusoidal positions, one causal
// MultiHeadAttention of 4 heads, a linear head) learns to repeat the previous token of a sentence;
// then one forward with need_weights draws each head's weights over the sentence's words
// (tapegrad::plot, plot/plot.h), and the loss curve of the training. The heads that learned the
// task put their weight just left of the diagonal: each word looks at the word before it. The
// first steps run under the Profiler (runtime/profiler.h), which writes them as a Chrome trace
// that ui.perfetto.dev or chrome://tracing opens: every op, backward node and Adam step in order
// (the step as a ProfileRegion, work named by the program itself).
//
//   attention_plot [OUT_DIR]   writes OUT_DIR/attention.png, OUT_DIR/loss.png and
//                              OUT_DIR/trace.json (default: .)
//
// Exits 1 unless the loss fell below a tenth of where it started.
#include <tapegrad/plot/plot.h>
#include <tapegrad/tapegrad.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace {

const std::vector<std::string> kWords = {"the", "cat", "sat", "on", "a", "warm", "mat", "today"};
constexpr int64_t kVocab = 8, kLength = 8, kDim = 32, kHeads = 4, kBatch = 16;

struct PreviousToken : tg::nn::Module {
  std::shared_ptr<tg::nn::Embedding> embedding =
      register_module("embedding", std::make_shared<tg::nn::Embedding>(kVocab, kDim));
  std::shared_ptr<tg::nn::MultiHeadAttention> attention =
      register_module("attention", std::make_shared<tg::nn::MultiHeadAttention>(kDim, kHeads));
  std::shared_ptr<tg::nn::Linear> head =
      register_module("head", std::make_shared<tg::nn::Linear>(kDim, kVocab));
  tg::Tensor positions = tg::nn::sinusoidal_table(kLength, kDim);  // [kLength, kDim]

  // tokens [B, kLength] -> the attention's output and weights [B, heads, kLength, kLength] (only
  // with need_weights), and the logits [B, kLength, kVocab].
  struct Out {
    tg::Tensor logits, weights;
  };
  Out forward(const tg::Tensor& tokens, bool need_weights = false) const {
    const tg::Tensor x = embedding->forward(tokens) + positions;
    const tg::nn::AttentionOutput attended =
        attention->forward(x, x, x, tg::Tensor(), need_weights, /*is_causal=*/true,
                           /*average_attn_weights=*/false);  // one map a head
    return {head->forward(attended.output), attended.weights};
  }
};

// A batch of random sentences [kBatch, kLength] and their targets: the token before each one
// (the first position repeats its own).
std::pair<tg::Tensor, tg::Tensor> batch(std::mt19937& random) {
  std::uniform_int_distribution<int64_t> word(0, kVocab - 1);
  std::vector<int64_t> tokens, targets;
  for (int64_t b = 0; b < kBatch; ++b) {
    for (int64_t i = 0; i < kLength; ++i) tokens.push_back(word(random));
    for (int64_t i = 0; i < kLength; ++i) targets.push_back(tokens[b * kLength + (i > 0 ? i - 1 : 0)]);
  }
  return {tg::from_indices(tokens, {kBatch, kLength}), tg::from_indices(targets, {kBatch * kLength})};
}

}  // namespace

int main(int argc, char** argv) {
  const std::string out_dir = argc > 1 ? argv[1] : ".";
  tg::manual_seed(0);
  std::mt19937 random(0);
  PreviousToken model;
  tg::Adam optimizer(model.parameters(), /*lr=*/0.01);

  tg::plot::Series losses{"train loss", {}, {}};
  const auto train_step = [&] {
    const auto [tokens, targets] = batch(random);
    optimizer.zero_grad();
    const tg::Tensor logits = model.forward(tokens).logits;
    tg::Tensor loss = tg::cross_entropy(logits.reshape({kBatch * kLength, kVocab}), targets);
    loss.backward();
    {
      const tg::ProfileRegion region("Adam.step");  // a slice of its own in the trace
      optimizer.step();
    }
    losses.x.push_back(static_cast<double>(losses.x.size() + 1));
    losses.y.push_back(loss.item());
  };
  {
    // The first four steps profiled, as torch.profiler.schedule(wait=1, warmup=1, active=2):
    // step 0 is not recorded, step 1 is recorded and dropped (it pays for the first
    // allocations), steps 2 and 3 are kept. step() ends each one.
    tg::Profiler profiler({.schedule = {.wait = 1, .warmup = 1, .active = 2}});
    for (int step = 0; step < 4; ++step) {
      train_step();
      profiler.step();
    }
    profiler.export_chrome_trace(out_dir + "/trace.json");
  }
  while (losses.x.size() < 300) train_step();
  std::printf("loss: %.3f at step 1, %.3f at step 300\n", losses.y.front(), losses.y.back());

  // One sentence, its attention drawn: [1, heads, kLength, kLength], a panel a head.
  model.eval();
  const tg::Tensor sentence = tg::from_indices({0, 1, 2, 3, 4, 5, 6, 7}, {1, kLength});
  const tg::Tensor weights = model.forward(sentence, /*need_weights=*/true).weights;
  tg::plot::attention_grid(out_dir + "/attention.png", weights,
                           {.title = "each word attends to the word before it", .tokens = kWords});
  tg::plot::loss_curves(out_dir + "/loss.png", {losses}, {.title = "learning the previous token"});
  std::printf("wrote %s/attention.png, loss.png and trace.json\n", out_dir.c_str());

  const bool learned = losses.y.back() < losses.y.front() / 10;
  std::printf("%s\n", learned ? "ok" : "FAILED: the loss did not fall below a tenth");
  return learned ? 0 : 1;
}
