// `tapegrad sample`: text from a charlm checkpoint, one character at a time (temperature, top-k,
// greedy), each new one run through the model's KV cache (nn/generation.h); for a textcls
// checkpoint, the class probabilities of the prompt.
#include <boost/program_options.hpp>
#include <algorithm>
#include <cmath>
#include <iostream>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/cli/cli.h"
#include "tapegrad/cli/options.h"
#include "tapegrad/io/strict_numbers.h"
#include "tapegrad/nn/generation.h"
#include "tapegrad/ops/ops.h"
#include "tapegrad/train/checkpoint_file.h"
#include "tapegrad/train/datasets.h"
#include "tapegrad/train/flag_scope.h"
#include "tapegrad/train/tasks.h"

namespace tg::cli {
namespace {

// Characters one `sample` may generate: the text streams out as it is drawn, but each character
// costs a forward pass, so a mistyped count should be an error, not an afternoon.
constexpr int64_t kMaxSampleTokens = 1'000'000;

int sample_charlm(const train::Checkpoint& checkpoint, const std::string& prompt, int64_t tokens,
                  const nn::SamplingOptions& sampling, bool use_cache, Device device) {
  const train::Vocabulary vocab = train::vocabulary_from_json(checkpoint.data_state.at("vocab"));
  nn::CharLM model(vocab.size(), checkpoint.config.model_config());
  model.to(device);
  train::load_model(model, checkpoint);
  model.eval();
  std::vector<int64_t> ids;
  for (const std::string& ch : train::tokenize(prompt, train::Tokenizer::chars)) ids.push_back(vocab.id(ch));
  TG_CHECK(!ids.empty(), "--prompt must not be empty");
  // The window policy of nn/generation.h over the context the model was trained on.
  nn::GenerationOptions options;
  options.tokens = tokens;
  options.window = std::min(checkpoint.config.context, checkpoint.config.max_len);
  options.use_cache = use_cache;
  options.sampling = sampling;
  if (const std::string why = nn::cache_unavailable_reason(model); use_cache && !why.empty()) {
    std::cerr << "tapegrad sample: no KV cache: " << why << "; every character recomputes the context\n";
  }
  options.on_logits = [&](int64_t step, const std::vector<double>& logits) {
    train::check_finite_results(logits, "the logits of character " + std::to_string(step + 1), checkpoint);
  };
  options.on_step = [&](int64_t step, const std::vector<int64_t>& drawn) {
    std::cout << vocab.tokens[drawn.front()] << std::flush;
    // A closed pipe (`| head`) ends the sampling at once rather than after every token.
    TG_CHECK(std::cout.good(), "writing the sample to stdout failed after ", step + 1, " characters");
  };
  std::cout << prompt << std::flush;  // then each character as it is drawn
  nn::generate(model, {ids}, options);
  std::cout << "\n" << std::flush;
  TG_CHECK(std::cout.good(), "writing the sample to stdout failed");
  return 0;
}

int classify(const train::Checkpoint& checkpoint, const std::string& prompt, Device device) {
  const train::Vocabulary vocab = train::vocabulary_from_json(checkpoint.data_state.at("vocab"));
  const auto labels = train::labels_from_json(checkpoint.data_state.at("labels"));
  nn::TextClassifier model(vocab.size(), static_cast<int64_t>(labels.size()), checkpoint.config.model_config());
  model.to(device);
  train::load_model(model, checkpoint);
  model.eval();
  std::vector<int64_t> ids;
  for (const auto& token : train::tokenize(prompt, train::parse_tokenizer(checkpoint.config.tokenizer))) {
    ids.push_back(vocab.id(token));
  }
  TG_CHECK(!ids.empty(), "--prompt has no tokens");
  // As the model read its data: cut to the first max_len tokens (--truncate), or refused.
  if (checkpoint.config.truncate && static_cast<int64_t>(ids.size()) > checkpoint.config.max_len) {
    ids.resize(checkpoint.config.max_len);
  }
  TG_CHECK(static_cast<int64_t>(ids.size()) <= checkpoint.config.max_len, "--prompt has ",
           ids.size(), " tokens, past the model's max_len ", checkpoint.config.max_len);
  NoGrad no_grad;
  const int64_t length = static_cast<int64_t>(ids.size());
  const Tensor logits = model.forward(from_indices(ids, {1, length}, device), {length});
  train::check_finite_results(logits.to_host_f64(), "the class logits of --prompt", checkpoint);
  const auto probs = softmax(logits, -1).to_host_f64();
  const int64_t best = std::max_element(probs.begin(), probs.end()) - probs.begin();
  std::cout << labels[best] << "\n";
  for (size_t i = 0; i < labels.size(); ++i) std::cout << "  " << labels[i] << ": " << probs[i] << "\n";
  return 0;
}

}  // namespace

int sample(const Args& args) {
  namespace po = boost::program_options;
  std::string load, prompt;
  int64_t tokens = 200, top_k = 0;
  double temperature = 1.0;
  std::string seed = "0";
  std::string device_text = "cpu";
  int threads = 0;
  bool textbook = false;
  po::options_description options("tapegrad sample: generate from a charlm checkpoint (textcls: classify the prompt)");
  options.add_options()("help,h", "show this help")
      ("load", po::value(&load), "checkpoint written by tapegrad train --save")
      ("prompt", po::value(&prompt), "the text to start from")
      ("tokens", po::value(&tokens)->default_value(tokens), "characters to generate (at most 1000000)")
      ("temperature", po::value(&temperature)->default_value(temperature), "softmax temperature (> 0; 0: greedy)")
      ("top-k", po::value(&top_k)->default_value(top_k), "sample among the k most likely (0: all)")
      ("seed", po::value(&seed)->default_value(seed), "random seed (0 to 2^64-1)")
      ("device", po::value(&device_text)->default_value(device_text), "cpu | cuda | cuda:N")
      ("no-cache", "recompute the whole context for every character instead of keeping each "
                   "layer's keys and values (the same characters, slower: for comparison)")
      ("tf32", po::bool_switch(&math_modes().allow_tf32), "cuda: let f32 GEMMs use TF32 tensor cores");
  add_threads_option(options, threads);
  add_textbook_option(options, textbook);
  const po::variables_map vm = parse_command_line(args, options);
  if (vm.count("help")) {
    std::cout << options << "\nexamples:\n  tapegrad sample --load lm.safetensors --prompt \"The \" --tokens 300 --temperature 0.8 --top-k 10\n"
                 "  tapegrad sample --load cls.safetensors --prompt \"Computers are useless\"\n";
    return 0;
  }
  TG_CHECK(!load.empty(), "--load is required");
  TG_CHECK(std::isfinite(temperature) && temperature >= 0, "--temperature must be a finite "
           "number >= 0 (0: greedy, the most likely character), got ", temperature);
  TG_CHECK(tokens >= 0 && tokens <= kMaxSampleTokens, "--tokens must be in [0, ", kMaxSampleTokens,
           "], got ", tokens);
  TG_CHECK(top_k >= 0, "--top-k must be >= 0, got ", top_k);
  use_threads_option(threads);
  const std::unique_ptr<Textbook> textbook_scope = open_textbook(textbook, device_text);
  const uint64_t seed_value = train::parse_uint64(seed, "--seed");
  const Device device = parse_device(device_text);
  const train::Checkpoint checkpoint = train::load_checkpoint(load);
  // A textcls checkpoint classifies the prompt: the generation flags do not apply to it.
  train::check_flags_apply(
      given_options(vm),
      {{{"tokens", "temperature", "top-k", "seed", "no-cache"}, checkpoint.config.task != "textcls",
        "a textcls checkpoint (sample classifies the --prompt, generating nothing)"},
       train::tf32_scope(device_text)});
  if (checkpoint.config.task == "charlm") {
    const nn::SamplingOptions sampling{temperature, top_k, seed_value, {0, 1}};  // never padding or unknown
    return sample_charlm(checkpoint, prompt, tokens, sampling, !vm.count("no-cache"), device);
  }
  if (checkpoint.config.task == "textcls") return classify(checkpoint, prompt, device);
  fail("sample needs a charlm or textcls checkpoint; ", load, " is a ", checkpoint.config.task, " model");
}

}  // namespace tg::cli
