#include "tapegrad/train/config.h"

#include <algorithm>
#include <cmath>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/io/json_bytes.h"
#include "tapegrad/nn/layers.h"
#include "tapegrad/runtime/threads.h"
#include "tapegrad/train/attention_flags.h"
#include "tapegrad/train/datasets.h"

namespace tg::train {

nn::ModelConfig TrainConfig::model_config() const {
  nn::ModelConfig config;
  config.dim = dim;
  config.heads = heads;
  config.layers = layers;
  config.dropout = dropout;
  config.max_len = max_len;
  config.attention = parse_attention(attention);
  const nn::AttentionSpec positions = parse_position(position);
  config.attention.position = positions.position;
  config.attention.relative = positions.relative;
  config.attention.max_len = max_len;
  config.attention.seed = seed;
  return config;
}

DType TrainConfig::amp_dtype() const {
  if (amp == "fp16") return DType::f16;
  if (amp == "bf16") return DType::bf16;
  return DType::f32;
}

Device TrainConfig::compute_device() const { return parse_device(device); }

void TrainConfig::validate() const {
  TG_CHECK(task == "textcls" || task == "timeseries" || task == "charlm", "--task must be textcls, ",
           "timeseries or charlm, got '", task, "'");
  const auto in_range = [](int64_t value, int64_t low, int64_t high, const char* flag) {
    TG_CHECK(value >= low && value <= high, flag, " must be in [", low, ", ", high, "], got ", value);
  };
  const auto finite_at_least_zero = [](double value, const char* flag) {
    TG_CHECK(std::isfinite(value) && value >= 0, flag, " must be a finite number >= 0, got ", value);
  };
  in_range(dim, 1, Limits::dim, "--dim");
  in_range(heads, 1, dim, "--heads");
  TG_CHECK(dim % heads == 0, "--heads ", heads, " does not divide --dim ", dim);
  TG_CHECK(task != "timeseries" || layers != 0, "--layers 0 is not a timeseries model: --layers 1 is the ",
           "tutorial's (input_proj, one attention, output), N >= 2 stacks N encoder layers");
  in_range(layers, 0, Limits::layers, "--layers");
  in_range(max_len, 1, Limits::sequence, "--max-len");
  TG_CHECK(max_len * dim <= Limits::positions, "--max-len ", max_len, " x --dim ", dim,
           " is more than the ", Limits::positions, " entries a positional encoding table may have");
  TG_CHECK(dropout >= 0 && dropout < 1, "--dropout must be in [0, 1), got ", dropout);
  check_attention_fits(model_config().attention, task, max_len, dim / heads);
  in_range(batch, 1, Limits::batch, "--batch");
  in_range(epochs, 0, Limits::steps, "--epochs");
  in_range(steps, 0, Limits::steps, "--steps");
  in_range(warmup, 0, Limits::steps, "--warmup");
  in_range(eval_every, 0, Limits::steps, "--eval-every");
  in_range(threads, 0, kMaxThreads, "--threads (0: the cores available)");
  finite_at_least_zero(lr, "--lr");
  TG_CHECK(lr > 0, "--lr must be positive, got ", lr);
  finite_at_least_zero(weight_decay, "--weight-decay");
  finite_at_least_zero(clip, "--clip");
  TG_CHECK(schedule == "cosine" || schedule == "constant", "--schedule must be cosine or constant, got '",
           schedule, "'");
  for (size_t i = 0; i < inputs.size(); ++i) {
    TG_CHECK(!inputs[i].empty(), "--inputs: column ", i + 1, " has an empty name");
    for (size_t j = 0; j < i; ++j) TG_CHECK(inputs[i] != inputs[j], "--inputs names '", inputs[i], "' twice");
  }
  TG_CHECK(inputs.empty() || task == "timeseries", "--inputs does not apply to --task ", task);
  TG_CHECK(optimizer == "sgd" || optimizer == "adam" || optimizer == "adamw",
           "--optimizer must be sgd, adam or adamw, got '", optimizer, "'");
  TG_CHECK(val_frac >= 0 && val_frac < 1, "--val-frac must be in [0, 1), got ", val_frac);
  compute_device();  // a malformed --device is an error here; an absent one when first used
  TG_CHECK(amp == "none" || amp == "fp16" || amp == "bf16", "--amp must be none, fp16 or bf16, got '",
           amp, "'");
  nn::parse_quant_mode(quantization);  // none | dynamic | static
  in_range(window, 1, Limits::sequence, "--window");
  in_range(horizon, 1, Limits::sequence, "--horizon");
  in_range(context, 1, Limits::sequence, "--context");
  TG_CHECK(task != "timeseries" || window <= max_len, "--window ", window, " is past --max-len ",
           max_len, " (the positional encoding's length)");
  TG_CHECK(normalize == "zscore" || normalize == "none", "--normalize must be zscore or none, got '",
           normalize, "'");
  TG_CHECK(tokenizer == "char" || tokenizer == "word" || tokenizer == "whitespace",
           "--tokenizer must be char, word or whitespace, got '", tokenizer, "'");
  TG_CHECK(task != "charlm" || context <= max_len, "--context ", context, " is past --max-len ",
           max_len, " (the positional encoding's length)");
}

namespace {

nlohmann::json inputs_to_json(const std::vector<std::string>& inputs) {
  nlohmann::json names = nlohmann::json::array();
  for (const std::string& name : inputs) names.push_back(bytes_to_json(name));
  return names;
}

}  // namespace

std::vector<FlagScope> train_flag_scopes(const TrainConfig& c) {
  const std::string task = "--task " + c.task;
  // charlm --layers 0 is an embedding and a head: no attention, no layers to recompute.
  const bool has_attention = c.task != "charlm" || c.layers > 0;
  const std::string no_attention = "a model without attention (--task charlm --layers 0)";
  // sinusoidal is added to the embedding (and none leaves it out); rope, alibi, t5 and shaw act in
  // attention.
  const bool position_outside_attention = c.position == "sinusoidal" || c.position == "none";
  return {
      {{"window", "horizon", "target", "inputs", "normalize"}, c.task == "timeseries", task},
      {{"tokenizer", "truncate"}, c.task == "textcls", task},
      {{"context"}, c.task == "charlm", task},
      {{"attention", "heads", "dropout", "checkpoint-activations"}, has_attention, no_attention},
      {{"position"}, has_attention || position_outside_attention,
       no_attention + ", where --position " + c.position + " has no attention to act in"},
      tf32_scope(c.device),
      {{"eval-every", "save-best", "patience"}, c.val_frac > 0,
       "--val-frac 0 (no validation split)"},
  };
}

std::string derive_textcls_max_len(TrainConfig& config, const std::set<std::string>& given,
                                   const std::string& shown_path) {
  if (config.task != "textcls" || given.count("max-len")) return "";
  const Tokenizer tokenizer = parse_tokenizer(config.tokenizer);
  const LongestText longest = longest_textcls_text(config.data, tokenizer);
  // (validate() has checked --dim, so the quotient is at least Limits::positions / Limits::dim.)
  const int64_t cap = std::min(TextClsDefaults::max_len_cap, Limits::positions / config.dim);
  const std::string tokens = tokenizer_name(tokenizer) + " tokens";
  std::string notice;
  if (longest.tokens <= cap) {
    config.max_len = longest.tokens;
    notice = "max_len " + std::to_string(longest.tokens) + " (the longest line of " + shown_path +
             ", " + tokens + ")";
  } else {
    TG_CHECK(config.truncate, "load_textcls: '", shown_path, "' line ", longest.line, " has ",
             longest.tokens, " ", tokens, ", more than the ", cap, " a default --max-len may be: ",
             "train with --truncate to cut longer lines to their first ", cap, " tokens, or with ",
             "--max-len ", longest.tokens);
    config.max_len = cap;
    notice = "max_len " + std::to_string(cap) + " (the default's cap; the longest line of " +
             shown_path + " has " + std::to_string(longest.tokens) + " " + tokens + ")";
  }
  config.validate();
  return notice;
}

void apply_task_defaults(TrainConfig& config, const std::set<std::string>& given) {
  if (config.task != "charlm") return;
  if (!given.count("lr")) config.lr = CharLMDefaults::lr;
  if (!given.count("dropout")) config.dropout = CharLMDefaults::dropout;
}

std::vector<std::string> parse_inputs(const std::string& text) {
  std::vector<std::string> names;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    names.push_back(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    TG_CHECK(!names.back().empty(), "--inputs '", text, "': column ", names.size(),
             " has an empty name (expected COL,COL,...)");
    if (comma == std::string::npos) return names;
    start = comma + 1;
  }
}

nlohmann::json to_json(const TrainConfig& c) {
  return {{"task", c.task}, {"data", bytes_to_json(c.data)}, {"dim", c.dim}, {"heads", c.heads},
          {"layers", c.layers}, {"max_len", c.max_len}, {"dropout", c.dropout},
          {"attention", c.attention}, {"position", c.position},
          {"batch", c.batch}, {"epochs", c.epochs}, {"steps", c.steps}, {"lr", c.lr},
          {"weight_decay", c.weight_decay}, {"clip", c.clip}, {"val_frac", c.val_frac},
          {"optimizer", c.optimizer}, {"warmup", c.warmup}, {"schedule", c.schedule}, {"seed", c.seed},
          {"threads", c.threads}, {"device", c.device},
          {"checkpoint_activations", c.checkpoint_activations}, {"shuffle", c.shuffle},
          {"eval_every", c.eval_every}, {"amp", c.amp}, {"quantization", c.quantization},
          {"window", c.window}, {"horizon", c.horizon},
          {"target", bytes_to_json(c.target)}, {"inputs", inputs_to_json(c.inputs)}, {"normalize", c.normalize},
          {"tokenizer", c.tokenizer}, {"tokenizer_version", kTokenizerVersion},
          {"truncate", c.truncate}, {"context", c.context}};
}

namespace {

// One field of a stored config, of exactly the JSON type asked for.
class Fields {
 public:
  explicit Fields(const nlohmann::json& json) : json_(json) {
    TG_CHECK(json.is_object(), "checkpoint config: expected a JSON object, got ", json.type_name());
  }
  const nlohmann::json& at(const char* key) const {
    TG_CHECK(json_.contains(key), "checkpoint config: the field '", key, "' is missing");
    return json_[key];
  }
  int64_t integer(const char* key) const {
    const nlohmann::json& value = at(key);
    TG_CHECK(value.is_number_integer() &&
                 (value.is_number_unsigned() ? value.get<uint64_t>() <= INT64_MAX : true),
             "checkpoint config: '", key, "' must be an integer in int64's range, got ", value.dump());
    return value.get<int64_t>();
  }
  uint64_t unsigned_integer(const char* key) const {
    const nlohmann::json& value = at(key);
    TG_CHECK(value.is_number_unsigned(), "checkpoint config: '", key,
             "' must be a non-negative integer, got ", value.dump());
    return value.get<uint64_t>();
  }
  double number(const char* key) const {
    const nlohmann::json& value = at(key);
    TG_CHECK(value.is_number(), "checkpoint config: '", key, "' must be a number, got ", value.dump());
    return value.get<double>();
  }
  bool boolean(const char* key) const {
    const nlohmann::json& value = at(key);
    TG_CHECK(value.is_boolean(), "checkpoint config: '", key, "' must be true or false, got ",
             value.dump());
    return value.get<bool>();
  }
  std::string text(const char* key) const {
    const nlohmann::json& value = at(key);
    TG_CHECK(value.is_string(), "checkpoint config: '", key, "' must be a string, got ", value.type_name());
    return value.get<std::string>();
  }
  std::string bytes(const char* key) const { return bytes_from_json(at(key), key); }

 private:
  const nlohmann::json& json_;
};

// A stored flag text, parsed and written back in its canonical spelling; an unparsable one is a
// tg::Error naming the field.
template <typename Parse, typename Format>
std::string canonical(const std::string& text, const char* key, Parse parse, Format format) {
  try {
    return format(parse(text));
  } catch (const Error& error) {
    fail("checkpoint config: '", key, "' ", error.what());
  }
}

// Checkpoints from before tokenizer_version (1) meant by "word" what "whitespace" is now: they
// load as it, so that they keep tokenizing as they were trained. A version other than 1 or 2 is
// from a newer tapegrad, whose tokenizers this one cannot promise to reproduce.
void check_tokenizer_version(const Fields& f, const nlohmann::json& json, std::string& tokenizer) {
  const int64_t version = json.contains("tokenizer_version") ? f.integer("tokenizer_version") : 1;
  TG_CHECK(version == 1 || version == kTokenizerVersion, "checkpoint config: 'tokenizer_version' ",
           version, " is not one this tapegrad reads (1 or ", kTokenizerVersion, ")");
  if (version == 1 && tokenizer == "word") tokenizer = "whitespace";
}

}  // namespace

TrainConfig config_from_json(const nlohmann::json& json) {
  const Fields f(json);
  TrainConfig c;
  c.task = f.text("task");
  c.data = f.bytes("data");
  c.dim = f.integer("dim");
  c.heads = f.integer("heads");
  c.layers = f.integer("layers");
  c.max_len = f.integer("max_len");
  c.dropout = f.number("dropout");
  // Checkpoints from before the attention variants have neither field: full, sinusoidal.
  if (json.contains("attention")) {
    c.attention = canonical(f.text("attention"), "attention", parse_attention, format_attention);
  }
  if (json.contains("position")) {
    c.position = canonical(f.text("position"), "position", parse_position, format_position);
  }
  c.batch = f.integer("batch");
  c.epochs = f.integer("epochs");
  c.steps = f.integer("steps");
  c.lr = f.number("lr");
  c.weight_decay = f.number("weight_decay");
  c.clip = f.number("clip");
  c.val_frac = f.number("val_frac");
  c.optimizer = f.text("optimizer");
  c.warmup = f.integer("warmup");
  c.schedule = json.contains("schedule") ? f.text("schedule") : "cosine";  // older checkpoints: cosine
  c.seed = f.unsigned_integer("seed");
  const int64_t threads = f.integer("threads");
  TG_CHECK(threads >= 0 && threads <= kMaxThreads, "checkpoint config: 'threads' ", threads,
           " is outside [0, ", kMaxThreads, "]");
  c.threads = static_cast<int>(threads);
  c.device = f.text("device");
  c.checkpoint_activations = f.boolean("checkpoint_activations");
  c.shuffle = f.boolean("shuffle");
  c.eval_every = f.integer("eval_every");
  c.amp = json.contains("amp") ? f.text("amp") : "none";  // older checkpoints have none
  // older checkpoints (and every trained one) hold f32 Linears; tapegrad quantize writes the others
  c.quantization = json.contains("quantization") ? f.text("quantization") : "none";
  c.window = f.integer("window");
  c.horizon = f.integer("horizon");
  c.target = f.bytes("target");
  if (json.contains("inputs")) {  // older checkpoints read every column
    const nlohmann::json& inputs = f.at("inputs");
    TG_CHECK(inputs.is_array(), "checkpoint config: 'inputs' must be an array, got ", inputs.type_name());
    for (const nlohmann::json& name : inputs) c.inputs.push_back(bytes_from_json(name, "inputs"));
  }
  c.normalize = f.text("normalize");
  c.tokenizer = f.text("tokenizer");
  check_tokenizer_version(f, json, c.tokenizer);
  c.truncate = json.contains("truncate") ? f.boolean("truncate") : false;  // older: never cut
  c.context = f.integer("context");
  try {
    c.validate();
  } catch (const Error& error) {
    fail("checkpoint config: ", error.what());
  }
  return c;
}

}  // namespace tg::train
