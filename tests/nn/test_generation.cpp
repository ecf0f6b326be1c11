// Generation (nn/generation.h) with the KV cache against the uncached path, which runs the whole
// context through CharLM::forward for every token: the same logits within f32 rounding at every
// step and the same tokens, greedy and seeded, for every attention and position kind that decodes
// incrementally, batch 1 and 3, prompts shorter and longer than the window, across the window's
// restarts. Then the window policy by hand, the cache's bounds, the fallback of the kinds that
// cannot decode incrementally, draw_token, and the peak memory of generation against the context.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/autograd/storage.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/nn/generation.h"
#include "tapegrad/ops/elementwise.h"

using namespace tg;

namespace {

constexpr int64_t kVocab = 11;
constexpr int64_t kMaxLen = 24;

struct DecodingCase {
  std::string name;
  nn::AttentionSpec spec;
  bool fused = true;  // false: every attention on the explicit path
};

// Every attention/position kind that decodes incrementally, on the fused and the explicit path.
std::vector<DecodingCase> decoding_cases() {
  using nn::AttentionKind;
  using nn::PositionKind;
  std::vector<DecodingCase> cases;
  for (PositionKind position : {PositionKind::sinusoidal, PositionKind::none, PositionKind::rope,
                                PositionKind::alibi, PositionKind::t5, PositionKind::shaw}) {
    nn::AttentionSpec spec;
    spec.position = position;
    spec.relative = {.buckets = 8, .max_distance = 12, .clip = 3};
    const std::string name = "full/" + std::to_string(static_cast<int>(position));
    cases.push_back({name, spec});
    cases.push_back({name + "/explicit", spec, false});
  }
  cases.push_back({"local/sinusoidal", {.kind = AttentionKind::local, .window = 4}});
  cases.push_back({"local/alibi/explicit",
                   {.kind = AttentionKind::local, .window = 3, .position = PositionKind::alibi},
                   false});
  cases.push_back({"band/rope",
                   {.kind = AttentionKind::band, .window = 3, .dilation = 2,
                    .position = PositionKind::rope}});
  cases.push_back({"bigbird/t5",
                   {.kind = AttentionKind::bigbird, .window = 3, .global_tokens = 2,
                    .position = PositionKind::t5, .relative = {.buckets = 8, .max_distance = 12}}});
  cases.push_back({"performer/sinusoidal", {.kind = AttentionKind::performer, .features = 16, .seed = 5}});
  cases.push_back({"performer/rope",
                   {.kind = AttentionKind::performer, .features = 16, .seed = 5,
                    .position = PositionKind::rope}});
  return cases;
}

// A 2-layer char LM of random weights (seeded) in eval mode.
std::unique_ptr<nn::CharLM> small_lm(const nn::AttentionSpec& spec, bool fused, uint64_t seed = 3) {
  manual_seed(seed);
  nn::ModelConfig config;
  config.dim = 16;
  config.heads = 2;
  config.layers = 2;
  config.max_len = kMaxLen;
  config.attention = spec;
  auto model = std::make_unique<nn::CharLM>(kVocab, config);
  for (const auto& layer : model->layers) layer->attn->use_fused = fused;
  model->eval();
  return model;
}

// `count` ids in [2, kVocab), drawn from `seed`.
std::vector<int64_t> random_ids(int64_t count, uint64_t seed) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < count; ++i) {
    ids.push_back(2 + static_cast<int64_t>(philox_uniform(seed, 7, i) * (kVocab - 2)));
  }
  return ids;
}

// The largest |a - b| over two equal-sized vectors.
double max_difference(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

// Feeds the same prompt and then the same tokens to a cached and an uncached Decoder: `steps`
// next-token logits that agree within f32 rounding, each step's token the cached path's argmax.
void require_same_logits(const nn::CharLM& model, int64_t batch, int64_t window,
                         int64_t prompt_length, int64_t steps) {
  NoGrad no_grad;
  nn::Decoder cached(model, batch, window, true), uncached(model, batch, window, false);
  REQUIRE(cached.cached());
  REQUIRE_FALSE(uncached.cached());
  std::vector<int64_t> fed = random_ids(batch * prompt_length, 11);
  int64_t n = prompt_length;
  for (int64_t step = 0; step < steps; ++step) {
    const std::vector<double> a = cached.feed(fed, n).to_host_f64();
    const std::vector<double> b = uncached.feed(fed, n).to_host_f64();
    INFO("step " << step << ", context " << cached.context_length());
    REQUIRE(cached.context_length() == uncached.context_length());
    REQUIRE(cached.cache_length() == cached.context_length());
    REQUIRE(cached.cache_length() <= window);
    REQUIRE(max_difference(a, b) < 2e-5);
    fed.clear();
    for (int64_t s = 0; s < batch; ++s) {
      fed.push_back(std::max_element(a.begin() + s * kVocab, a.begin() + (s + 1) * kVocab) -
                    (a.begin() + s * kVocab));
    }
    n = 1;
  }
}

}  // namespace

TEST_CASE("generation: cached logits equal the uncached path's, every kind, batch 1 and 3", "[nn][generation]") {
  for (const DecodingCase& c : decoding_cases()) {
    const auto model = small_lm(c.spec, c.fused);
    for (int64_t batch : {1, 3}) {
      for (int64_t prompt_length : {3, 13}) {  // shorter and longer than the window of 9
        INFO(c.name << ", batch " << batch << ", prompt " << prompt_length);
        require_same_logits(*model, batch, 9, prompt_length, 20);  // restarts at 10, 15, 20...
      }
    }
  }
}

TEST_CASE("generation: greedy and seeded sampling draw the same tokens with and without the cache", "[nn][generation]") {
  for (const DecodingCase& c : decoding_cases()) {
    const auto model = small_lm(c.spec, c.fused);
    const std::vector<int64_t> prompt = random_ids(5, 2);
    for (double temperature : {0.0, 1.0}) {
      INFO(c.name << ", temperature " << temperature);
      nn::GenerationOptions options{.tokens = 30, .window = 12};
      options.sampling = {.temperature = temperature, .top_k = 6, .seed = 42, .banned = {0, 1}};
      const auto with_cache = nn::generate(*model, {prompt, prompt, prompt}, options);
      options.use_cache = false;
      const auto without = nn::generate(*model, {prompt, prompt, prompt}, options);
      REQUIRE(with_cache == without);
      REQUIRE(with_cache.at(0).size() == 30);
      for (int64_t id : with_cache.at(1)) REQUIRE((id >= 2 && id < kVocab));
      // greedy: the three sequences are one; sampled: each row draws its own stream
      if (temperature == 0) REQUIRE(with_cache[0] == with_cache[2]);
    }
  }
}

TEST_CASE("generation: the window policy, by hand", "[nn][generation]") {
  const auto model = small_lm({}, true);
  NoGrad no_grad;
  nn::Decoder decoder(*model, 1, 8, true);
  // a prompt longer than the window keeps its last 8 tokens
  decoder.feed(random_ids(11, 1), 11);
  CHECK(decoder.context_length() == 8);
  // the next token would make 9: the context restarts from its last 4 (ceil(8 / 2))
  decoder.feed({3}, 1);
  CHECK(decoder.context_length() == 4);
  for (int64_t i = 0; i < 4; ++i) decoder.feed({4}, 1);
  CHECK(decoder.context_length() == 8);
  CHECK(decoder.cache_length() == 8);
  decoder.feed({5}, 1);
  CHECK(decoder.context_length() == 4);
  // an odd window keeps the larger half: 7 -> 4
  nn::Decoder odd(*model, 1, 7, true);
  odd.feed(random_ids(7, 2), 7);
  odd.feed({3}, 1);
  CHECK(odd.context_length() == 4);
  // several tokens fed at once past the window: the last max(ceil(w / 2), n) stay
  nn::Decoder several(*model, 1, 8, false);
  several.feed(random_ids(6, 3), 6);
  several.feed(random_ids(6, 4), 6);
  CHECK(several.context_length() == 6);
}

TEST_CASE("generation: the cache never grows past max_len, and bad windows are errors", "[nn][generation]") {
  const auto model = small_lm({}, true);
  NoGrad no_grad;
  nn::Decoder decoder(*model, 2, kMaxLen, true);
  CHECK(decoder.cache_capacity() == kMaxLen);
  std::vector<int64_t> fed = random_ids(2 * 20, 5);
  decoder.feed(fed, 20);
  for (int64_t i = 0; i < 3 * kMaxLen; ++i) {
    decoder.feed({2, 3}, 1);
    REQUIRE(decoder.cache_length() <= kMaxLen);
  }
  CHECK_THROWS_WITH(nn::Decoder(*model, 1, kMaxLen + 1), Catch::Contains("max_len 24"));
  CHECK_THROWS_WITH(nn::Decoder(*model, 0, 4), Catch::Contains("batch 0"));
  CHECK_THROWS_WITH(decoder.feed({2, 3, 4}, 2), Catch::Contains("3 ids for 2 sequences"));
  CHECK_THROWS_WITH(nn::generate(*model, {{2, 3}, {4}}, {.tokens = 1}),
                    Catch::Contains("prompts of 2 and 1 tokens"));
  // a position past the table is the positional encoding's error, not a read past it
  nn::KVCache cache = model->make_cache(1, 4);
  model->forward_cached(from_indices({2, 3, 4, 5}, {1, 4}), cache);
  CHECK_THROWS_WITH(model->forward_cached(from_indices({2}, {1, 1}), cache),
                    Catch::Contains("exceed its capacity 4"));
  CHECK_THROWS_WITH(model->make_cache(1, kMaxLen + 1), Catch::Contains("max_len 24"));
}

TEST_CASE("generation: forward_cached refuses a tape and a second multi-token feed", "[nn][generation]") {
  const auto model = small_lm({}, true);
  nn::KVCache cache = model->make_cache(1, 8);
  CHECK_THROWS_WITH(model->forward_cached(from_indices({2, 3}, {1, 2}), cache),
                    Catch::Contains("NoGrad"));
  NoGrad no_grad;
  model->forward_cached(from_indices({2, 3}, {1, 2}), cache);
  CHECK_THROWS_WITH(model->forward_cached(from_indices({2, 3}, {1, 2}), cache),
                    Catch::Contains("n = 1 once the cache holds positions"));
  CHECK_THROWS_WITH(model->forward_cached(from_indices({2, 3}, {2, 1}), cache),
                    Catch::Contains("need shape [1, n]"));
}

TEST_CASE("generation: linformer, reformer and bigbird's random blocks fall back to the uncached path", "[nn][generation]") {
  using nn::AttentionKind;
  const std::vector<std::pair<nn::AttentionSpec, std::string>> fallbacks = {
      {{.kind = AttentionKind::linformer, .rank = 4}, "linformer"},
      {{.kind = AttentionKind::reformer, .buckets = 4, .rounds = 1, .seed = 1}, "reformer"},
      {{.kind = AttentionKind::bigbird, .window = 2, .random_blocks = 1, .seed = 1}, "bigbird"}};
  for (const auto& [spec, name] : fallbacks) {
    INFO(name);
    const auto model = small_lm(spec, true);
    CHECK_THAT(nn::cache_unavailable_reason(*model), Catch::Contains(name));
    NoGrad no_grad;
    nn::Decoder decoder(*model, 1, 10, true);
    CHECK_FALSE(decoder.cached());
    // and it generates as the uncached path does (linformer cannot attend causally at all: a
    // char LM of it fails in forward, cached or not)
    const nn::GenerationOptions options{.tokens = 12, .window = 10};
    if (spec.kind == AttentionKind::linformer) {
      CHECK_THROWS_WITH(nn::generate(*model, {{2, 3, 4}}, options),
                        Catch::Contains("causal attention is not supported"));
    } else {
      CHECK(nn::generate(*model, {{2, 3, 4}}, options).at(0).size() == 12);
    }
    nn::KVCache cache(2, 1, 4, 2, 8, DType::f32, kCPU);
    CHECK_THROWS_WITH(model->layers[0]->attn->forward_cached(zeros({1, 1, 16}), cache.layers[0]),
                      Catch::Contains("cannot decode one position at a time"));
  }
  CHECK(nn::cache_unavailable_reason(*small_lm({}, true)).empty());
}

TEST_CASE("generation: draw_token, greedy, top-k, banned ids and bad logits", "[nn][generation]") {
  const std::vector<double> logits = {5.0, 1.0, 2.0, 4.0, 4.0};
  nn::SamplingOptions greedy{.temperature = 0, .banned = {0}};
  CHECK(nn::draw_token(logits, greedy, 0.5f) == 3);  // 0 banned; a tie goes to the lower id
  // top-2 among ids 2..4 at temperature 1: ids 3 and 4, equally likely
  nn::SamplingOptions top2{.temperature = 1.0, .top_k = 2, .banned = {0, 1}};
  CHECK(nn::draw_token(logits, top2, 0.25f) == 3);
  CHECK(nn::draw_token(logits, top2, 0.75f) == 4);
  // temperature 1 over ids 2 and 3: p(2) = e^2 / (e^2 + e^4)
  nn::SamplingOptions two{.temperature = 1.0, .banned = {0, 1, 4}};
  const double p2 = std::exp(2.0) / (std::exp(2.0) + std::exp(4.0));
  CHECK(nn::draw_token(logits, two, static_cast<float>(p2 * 0.99)) == 2);
  CHECK(nn::draw_token(logits, two, static_cast<float>(p2 * 1.01)) == 3);
  CHECK_THROWS_WITH(nn::draw_token({1.0, 2.0}, {.banned = {0, 1}}, 0.5f),
                    Catch::Contains("the model has 2 output tokens, none to draw (banned: 0, 1)"));
  CHECK_THROWS_WITH(nn::draw_token({1.0, NAN, 2.0}, {}, 0.5f), Catch::Contains("not finite"));
  CHECK_THROWS_WITH(nn::draw_token({1.0, 2.0}, {.temperature = -1}, 0.5f),
                    Catch::Contains("temperature must be a finite number >= 0"));
}

TEST_CASE("generation: peak memory grows linearly with the context", "[nn][generation]") {
  // Generation filling contexts of 64, 128 and 256 positions: the cache is linear in the
  // context and so is the fused kernel's work space, so the peak grows at most ~linearly (an
  // S^2 score matrix would quadruple the growth at each doubling).
  std::vector<double> peaks;
  for (int64_t context : {64, 128, 256}) {
    manual_seed(1);
    nn::ModelConfig config;
    config.dim = 16;
    config.heads = 2;
    config.layers = 2;
    config.max_len = context;
    nn::CharLM model(kVocab, config);
    model.eval();
    reset_allocator_stats();
    const int64_t before = allocator_stats().current_bytes;
    nn::generate(model, {random_ids(context / 2, 1)}, {.tokens = context / 2, .window = context});
    peaks.push_back(static_cast<double>(allocator_stats().peak_bytes - before));
  }
  INFO("peaks " << peaks[0] << ", " << peaks[1] << ", " << peaks[2]);
  // the growth per doubling: linear doubles it (plus the constant part: less than double)
  CHECK((peaks[2] - peaks[1]) / (peaks[1] - peaks[0]) < 2.2);
  CHECK(peaks[2] / peaks[0] < 4.4);
}

// A feed that throws changes nothing: a Decoder fed a bad token, or whose model fails inside the
// forward, then decodes exactly as one that never saw that feed (the reference: a fresh Decoder).
TEST_CASE("generation: a feed that throws leaves the decoder as it was", "[nn][generation]") {
  const auto model = small_lm({}, true);
  NoGrad no_grad;
  for (bool use_cache : {true, false}) {
    INFO("cache " << use_cache);
    nn::Decoder decoder(*model, 1, 8, use_cache), reference(*model, 1, 8, use_cache);
    const std::vector<int64_t> prompt = random_ids(5, 9);
    decoder.feed(prompt, 5);
    reference.feed(prompt, 5);
    CHECK_THROWS_WITH(decoder.feed({3, kVocab}, 2), Catch::Contains("token id 11 is outside"));
    CHECK_THROWS_WITH(decoder.feed({-1}, 1), Catch::Contains("token id -1"));
    REQUIRE(decoder.context_length() == 5);
    REQUIRE(decoder.cache_length() == (use_cache ? 5 : 0));
    // then a feed past the window (a restart) and single tokens give the reference's logits
    for (const std::vector<int64_t>& next : {std::vector<int64_t>{4, 5, 6, 7}, {3}, {2}}) {
      const int64_t n = static_cast<int64_t>(next.size());
      REQUIRE(max_difference(decoder.feed(next, n).to_host_f64(), reference.feed(next, n).to_host_f64()) == 0);
      REQUIRE(decoder.context_length() == reference.context_length());
    }
  }
  // the model throws inside the forward (a weight written since the cache was filled): the
  // history and the cache are put back
  nn::Decoder decoder(*model, 1, 8, true);
  decoder.feed({2, 3, 4}, 3);
  const Tensor weight = model->head->weight;
  const Tensor saved = weight.clone();
  weight.copy_(saved);  // the same values, but a write: the cache's keys may be stale
  CHECK_THROWS_WITH(decoder.feed({5, 6}, 2), Catch::Contains("written in place"));
  REQUIRE(decoder.context_length() == 3);
  REQUIRE(decoder.cache_length() == 3);
}

TEST_CASE("generation: a cache belongs to its model and to its weights as they were", "[nn][generation]") {
  const auto model = small_lm({}, true, 3), other = small_lm({}, true, 4);
  NoGrad no_grad;
  SECTION("another model's cache is refused, empty or filled") {
    nn::KVCache cache = model->make_cache(1, 8);
    CHECK_THROWS_WITH(other->forward_cached(from_indices({2, 3}, {1, 2}), cache),
                      Catch::Contains("the cache belongs to another model"));
    model->forward_cached(from_indices({2, 3}, {1, 2}), cache);
    CHECK_THROWS_WITH(other->forward_cached(from_indices({4}, {1, 1}), cache),
                      Catch::Contains("the cache belongs to another model"));
    // a cache built directly is tied to the first model that uses it
    nn::KVCache direct(2, 1, 8, 2, 8, DType::f32, kCPU);
    other->forward_cached(from_indices({2}, {1, 1}), direct);
    CHECK_THROWS_WITH(model->forward_cached(from_indices({4}, {1, 1}), direct),
                      Catch::Contains("another model"));
    // and a cache of another shape is named as such
    nn::KVCache wide(2, 1, 8, 4, 4, DType::f32, kCPU);
    CHECK_THROWS_WITH(model->forward_cached(from_indices({2}, {1, 1}), wide), Catch::Contains("2 heads of 8"));
  }
  SECTION("a weight written in place after the filling makes the cache stale until cleared") {
    nn::KVCache cache = model->make_cache(1, 8);
    const Tensor tokens = from_indices({2, 3, 4, 5}, {1, 4});
    model->forward_cached(from_indices({2, 3, 4}, {1, 3}), cache);
    const Tensor weight = model->layers[0]->attn->k_proj->weight;
    weight.copy_(weight * 1.5);  // an optimizer step
    CHECK_THROWS_WITH(model->forward_cached(from_indices({5}, {1, 1}), cache),
                      Catch::Contains("layers.0.attn.k_proj.weight") && Catch::Contains("clear() the cache"));
    REQUIRE(cache.length() == 3);
    // refilled after clear(): the logits of the whole sequence under the new weights
    cache.clear();
    const std::vector<double> refilled = model->forward_cached(tokens, cache).to_host_f64();
    REQUIRE(max_difference(refilled, model->forward(tokens).to_host_f64()) < 2e-5);
  }
}

TEST_CASE("generation: a model in training mode is refused, not decoded with dropout", "[nn][generation]") {
  nn::ModelConfig config;
  config.dim = 16;
  config.heads = 2;
  config.layers = 2;
  config.max_len = kMaxLen;
  config.dropout = 0.5;
  manual_seed(3);
  nn::CharLM model(kVocab, config);  // in training mode, as built
  NoGrad no_grad;
  nn::Decoder decoder(model, 1, 8, true);
  CHECK_THROWS_WITH(decoder.feed({2, 3}, 2), Catch::Contains("training mode") && Catch::Contains("model.eval()"));
  REQUIRE(decoder.context_length() == 0);
  CHECK_THROWS_WITH(nn::generate(model, {{2, 3}}, {.tokens = 2}), Catch::Contains("training mode"));
  model.eval();
  model.layers[1]->dropout1->train();  // one module left in training mode is enough to refuse
  CHECK_THROWS_WITH(decoder.feed({2, 3}, 2), Catch::Contains("training mode"));
  // in eval mode: the same logits twice (no dropout draws), and those of the uncached forward
  model.eval();
  const std::vector<double> first = decoder.feed({2, 3}, 2).to_host_f64();
  nn::Decoder again(model, 1, 8, true);
  REQUIRE(max_difference(first, again.feed({2, 3}, 2).to_host_f64()) == 0);
  const std::vector<double> logits = model.forward(from_indices({2, 3}, {1, 2})).to_host_f64();
  REQUIRE(max_difference(first, std::vector<double>(logits.end() - kVocab, logits.end())) < 2e-5);
}
