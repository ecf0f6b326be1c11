#pragma once
// Generation from a character LM: a Decoder that feeds tokens and gives the next token's logits
// (with a KV cache, one position per token; without, the whole context every time), the draw of a
// token from logits (greedy, or temperature and top-k with a seeded uniform), and generate(),
// the loop of the two. docs/generation.md walks through it.
//
// The window policy, one rule for both paths: the model sees at most `window` positions. When a
// feed of n tokens would take the context past the window, the context restarts from the last
// max(ceil(window / 2), min(n, window)) tokens, positions counted from 0 again: a prompt longer
// than the window keeps its last `window` tokens; a full window during generation keeps its
// newer half. The cached path then refills its cache from those tokens (one forward over them),
// so it computes exactly what the uncached path computes, and each restart is paid once per
// window / 2 tokens instead of once per token.
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "tapegrad/nn/kv_cache.h"
#include "tapegrad/nn/models.h"

namespace tg::nn {

class Decoder {
 public:
  // `batch` sequences through `model` (in eval mode), seeing at most `window` positions
  // (1 <= window <= model.max_len); use_cache: with a KV cache of `window` positions when the
  // model can decode incrementally (cached() says whether it does).
  Decoder(const CharLM& model, int64_t batch, int64_t window, bool use_cache = true);

  // Appends tokens (row-major [batch, n] ids in [0, vocab), n >= 1) to every sequence and returns
  // the logits [batch, vocab] of the position after them: the next token's. Run it under NoGrad,
  // with every module of the model in eval mode: decoding in training mode would draw dropout
  // masks into the logits, so it is refused (tg::Error: call model.eval() first) rather than
  // switched for the caller, whose model is const here. A feed that throws changes nothing: the
  // tokens are not appended, and the cache is as it was (or empty, to be refilled from the
  // context by the next feed).
  Tensor feed(const std::vector<int64_t>& tokens, int64_t n);

  bool cached() const { return cache_.has_value(); }
  int64_t context_length() const { return fed() - start_; }  // the positions the model sees
  int64_t cache_length() const { return cache_ ? cache_->length() : 0; }
  int64_t cache_capacity() const { return cache_ ? cache_->capacity() : 0; }
  int64_t window() const { return window_; }

 private:
  // The tokens at positions [from, to) of every sequence, as a [batch, to - from] tensor.
  Tensor tokens_between(int64_t from, int64_t to) const;
  // How many tokens every sequence has been fed.
  int64_t fed() const { return static_cast<int64_t>(history_.front().size()); }
  // Whether feeding n more tokens takes the context past the window (the window policy above).
  bool restarts(int64_t n) const { return fed() + n - start_ > window_; }
  // tg::Error unless feed(tokens, n) can run: the ids' count and range, the model's mode.
  void check_feed(const std::vector<int64_t>& tokens, int64_t n) const;
  // feed's work once checked: appends the tokens and runs the model (state changes as it goes).
  Tensor append_and_run(const std::vector<int64_t>& tokens, int64_t n);

  const CharLM& model_;
  int64_t batch_, window_;
  std::vector<std::vector<int64_t>> history_;  // every token fed, per sequence
  int64_t start_ = 0;                          // the context's first position
  std::optional<KVCache> cache_;
};

// Why a model cannot use a KV cache (its attention kind, or no layers), or "" when it can.
std::string cache_unavailable_reason(const CharLM& model);

struct SamplingOptions {
  double temperature = 1.0;      // 0: greedy (the largest logit, the lowest id on a tie)
  int64_t top_k = 0;             // draw among the k largest logits (0 or >= vocab: all)
  uint64_t seed = 0;             // sequence b's draw n uses philox_uniform(seed, b, n)
  std::vector<int64_t> banned;   // ids never drawn (the CLI's: padding and unknown)
};

// One token from logits [V] at the options' temperature, top-k and banned ids; uniform01 in
// [0, 1) picks it (unused when greedy). tg::Error when nothing can be drawn (every id banned, or
// logits that are not finite).
int64_t draw_token(std::vector<double> logits, const SamplingOptions& options, float uniform01);

struct GenerationOptions {
  int64_t tokens = 0;      // new tokens per sequence
  int64_t window = 0;      // the Decoder's window (0: the model's max_len)
  bool use_cache = true;
  SamplingOptions sampling;
  // Called with each step's next-token logits, row-major [batch, vocab], before the draw (a
  // caller's own checks), and after the draw with its token of every sequence (streaming output).
  std::function<void(int64_t step, const std::vector<double>& logits)> on_logits;
  std::function<void(int64_t step, const std::vector<int64_t>& drawn)> on_step;
};

// The drawn tokens of every sequence, [batch][tokens], after prompts of equal length >= 1. Runs
// under NoGrad; the model must be in eval mode (Decoder::feed).
std::vector<std::vector<int64_t>> generate(const CharLM& model,
                                           const std::vector<std::vector<int64_t>>& prompts,
                                           const GenerationOptions& options);

}  // namespace tg::nn
