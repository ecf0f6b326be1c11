#include "tapegrad/nn/generation.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/autograd/tape.h"

namespace tg::nn {

std::string cache_unavailable_reason(const CharLM& model) {
  if (model.layers.empty()) return "a model without layers has no keys or values to cache";
  const char* obstacle = why_not_incremental(model.attention);
  return obstacle ? obstacle : "";
}

Decoder::Decoder(const CharLM& model, int64_t batch, int64_t window, bool use_cache)
    : model_(model), batch_(batch), window_(window), history_(batch) {
  TG_CHECK(batch >= 1 && window >= 1 && window <= model.max_len, "Decoder: batch ", batch,
           " and window ", window, " must be >= 1, the window at most the model's max_len ",
           model.max_len);
  if (use_cache && cache_unavailable_reason(model).empty()) {
    cache_.emplace(model.make_cache(batch, window));
  }
}

Tensor Decoder::tokens_between(int64_t from, int64_t to) const {
  std::vector<int64_t> ids;
  ids.reserve(batch_ * (to - from));
  for (const auto& sequence : history_) ids.insert(ids.end(), sequence.begin() + from, sequence.begin() + to);
  return from_indices(ids, {batch_, to - from}, model_.embedding->weight.device());
}

namespace {

// Whether any module of the model is in training mode. named_modules() hands out mutable
// pointers, so it is not const; nothing but is_training() is read through them.
bool any_module_training(const CharLM& model) {
  for (const auto& [path, module] : const_cast<CharLM&>(model).named_modules()) {
    if (module->is_training()) return true;
  }
  return false;
}

}  // namespace

void Decoder::check_feed(const std::vector<int64_t>& tokens, int64_t n) const {
  TG_CHECK(n >= 1 && static_cast<int64_t>(tokens.size()) == checked_mul(batch_, n, "Decoder: tokens"),
           "Decoder::feed: ", tokens.size(), " ids for ", batch_, " sequences of ", n,
           " new tokens (n >= 1)");
  const int64_t vocab = model_.embedding->weight.size(0);
  for (int64_t id : tokens) {
    TG_CHECK(id >= 0 && id < vocab, "Decoder::feed: token id ", id, " is outside the model's ",
             "vocabulary [0, ", vocab, ")");
  }
  TG_CHECK(!any_module_training(model_), "Decoder::feed: the model is in training mode, where "
           "dropout would make the logits random; call model.eval() before decoding");
}

// Strongly exception-safe: everything feed changes -- the history, the context's start, the
// cache -- is put back when the model throws (a failed allocation, a weight written in place
// since the cache was filled). A cache that was being refilled from scratch had its old
// positions overwritten, so it is left empty instead: the next feed refills it from the context,
// which is what it would have held.
Tensor Decoder::feed(const std::vector<int64_t>& tokens, int64_t n) {
  check_feed(tokens, n);
  const int64_t fed_before = fed(), start_before = start_;
  const bool refills = cache_ && (restarts(n) || cache_->length() == 0);
  std::vector<int64_t> cache_lengths_before;
  if (cache_) {
    for (const KVCache::Layer& layer : cache_->layers) cache_lengths_before.push_back(layer.length);
  }
  try {
    return append_and_run(tokens, n);
  } catch (...) {
    for (auto& sequence : history_) sequence.resize(fed_before);
    start_ = start_before;
    for (size_t i = 0; cache_ && i < cache_->layers.size(); ++i) {
      cache_->layers[i].length = refills ? 0 : cache_lengths_before[i];
    }
    throw;
  }
}

Tensor Decoder::append_and_run(const std::vector<int64_t>& tokens, int64_t n) {
  const bool restart = restarts(n);
  for (int64_t b = 0; b < batch_; ++b) {
    history_[b].insert(history_[b].end(), tokens.begin() + b * n, tokens.begin() + (b + 1) * n);
  }
  const int64_t total = fed();
  if (restart) start_ = total - std::max((window_ + 1) / 2, std::min(n, window_));
  Tensor logits;  // [B, *, vocab]: the last position's are the next token's
  if (!cache_) {
    logits = model_.forward(tokens_between(start_, total));
  } else if (restart || cache_->length() == 0) {  // (re)fill the cache from the context
    cache_->clear();
    logits = model_.forward_cached(tokens_between(start_, total), *cache_);
  } else {  // the new tokens one position at a time
    for (int64_t position = total - n; position < total; ++position) {
      logits = model_.forward_cached(tokens_between(position, position + 1), *cache_);
    }
  }
  return logits.narrow(1, logits.size(1) - 1, 1).reshape({batch_, logits.size(2)});
}

namespace {

// Sets every logit below the k-th largest to -inf (k <= 0 or >= the vocabulary: keeps all).
void keep_top_k(std::vector<double>& logits, int64_t k) {
  if (k <= 0 || k >= static_cast<int64_t>(logits.size())) return;
  std::vector<double> sorted = logits;
  std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<>());
  const double threshold = sorted[k - 1];
  for (double& logit : logits) if (logit < threshold) logit = -INFINITY;
}

// The id whose share of softmax(logits / temperature) covers uniform01: the inverse of the
// cumulative distribution, `largest` the largest logit.
int64_t draw_from_softmax(const std::vector<double>& logits, double largest, double temperature,
                          float uniform01) {
  std::vector<double> weights(logits.size());
  double total = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    total += weights[i] = std::exp((logits[i] - largest) / temperature);
  }
  TG_CHECK(std::isfinite(total) && total > 0, "sample: the model's logits are not finite");
  double target = uniform01 * total;
  for (size_t i = 0; i < weights.size(); ++i) {
    if ((target -= weights[i]) < 0 && weights[i] > 0) return static_cast<int64_t>(i);
  }
  return std::max_element(weights.begin(), weights.end()) - weights.begin();
}

}  // namespace

int64_t draw_token(std::vector<double> logits, const SamplingOptions& options, float uniform01) {
  TG_CHECK(std::isfinite(options.temperature) && options.temperature >= 0, "sample: the "
           "temperature must be a finite number >= 0 (0: greedy), got ", options.temperature);
  TG_CHECK(std::all_of(logits.begin(), logits.end(), [](double v) { return !std::isnan(v) && v < INFINITY; }),
           "sample: the model's logits are not finite");
  for (int64_t id : options.banned) {
    if (id >= 0 && id < static_cast<int64_t>(logits.size())) logits[id] = -INFINITY;
  }
  const auto largest_at = std::max_element(logits.begin(), logits.end());
  if (largest_at == logits.end() || *largest_at == -INFINITY) {
    std::string banned;
    for (int64_t id : options.banned) banned += (banned.empty() ? "" : ", ") + std::to_string(id);
    fail("sample: the model has ", logits.size(), " output tokens, none to draw (banned: ",
         banned.empty() ? "none" : banned, ")");
  }
  if (options.temperature == 0) return largest_at - logits.begin();  // greedy
  const double largest = *largest_at;
  keep_top_k(logits, options.top_k);
  return draw_from_softmax(logits, largest, options.temperature, uniform01);
}

std::vector<std::vector<int64_t>> generate(const CharLM& model,
                                           const std::vector<std::vector<int64_t>>& prompts,
                                           const GenerationOptions& options) {
  const int64_t batch = static_cast<int64_t>(prompts.size());
  TG_CHECK(batch >= 1 && !prompts[0].empty() && options.tokens >= 0, "generate: ", batch,
           " prompts (need >= 1, non-empty) and ", options.tokens, " tokens (need >= 0)");
  const int64_t prompt_length = static_cast<int64_t>(prompts[0].size());
  std::vector<int64_t> fed;
  for (const auto& prompt : prompts) {
    TG_CHECK(static_cast<int64_t>(prompt.size()) == prompt_length, "generate: prompts of ",
             prompt_length, " and ", prompt.size(), " tokens (they must have one length)");
    fed.insert(fed.end(), prompt.begin(), prompt.end());
  }
  NoGrad no_grad;
  Decoder decoder(model, batch, options.window > 0 ? options.window : model.max_len, options.use_cache);
  std::vector<std::vector<int64_t>> drawn(batch);
  int64_t n = prompt_length;
  for (int64_t step = 0; step < options.tokens; ++step) {
    const std::vector<double> logits = decoder.feed(fed, n).to_host_f64();
    if (options.on_logits) options.on_logits(step, logits);
    const size_t vocab = logits.size() / batch;
    for (int64_t b = 0; b < batch; ++b) {
      const std::vector<double> row(logits.begin() + b * vocab, logits.begin() + (b + 1) * vocab);
      fed[b] = draw_token(row, options.sampling,
                          philox_uniform(options.sampling.seed, static_cast<uint64_t>(b), step));
      drawn[b].push_back(fed[b]);
    }
    fed.resize(batch);
    n = 1;
    if (options.on_step) options.on_step(step, fed);
  }
  return drawn;
}

}  // namespace tg::nn
