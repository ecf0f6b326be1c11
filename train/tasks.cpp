#include "tapegrad/train/tasks.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/io/json_bytes.h"
#include "tapegrad/ops/ops.h"

namespace tg::train {
namespace {

// How many of the predictions (argmax of logits [B, C]) equal the labels.
int64_t count_correct(const Tensor& logits, const Tensor& labels) {
  const auto predicted = max(logits.detach(), -1).indices.to_host_i64();
  const auto truth = labels.to_host_i64();
  int64_t correct = 0;
  for (size_t i = 0; i < truth.size(); ++i) correct += predicted[i] == truth[i] ? 1 : 0;
  return correct;
}

// ---- the data state's fields --------------------------------------------------------------------

constexpr const char* kStateError = "checkpoint data state: ";

const nlohmann::json& state_field(const nlohmann::json& state, const char* key) {
  TG_CHECK(state.is_object(), kStateError, "expected a JSON object, got ", state.type_name());
  TG_CHECK(state.contains(key), kStateError, "the field '", key, "' is missing");
  return state[key];
}

// A byte string as one line of an error message (its JSON form: escapes, or byte values).
std::string quoted(const std::string& bytes) { return bytes_to_json(bytes).dump(); }

nlohmann::json byte_strings_to_json(const std::vector<std::string>& strings) {
  nlohmann::json values = nlohmann::json::array();
  for (const std::string& bytes : strings) values.push_back(bytes_to_json(bytes));
  return values;
}

std::vector<std::string> byte_strings_from_json(const nlohmann::json& values, const char* key) {
  TG_CHECK(values.is_array(), kStateError, "'", key, "' must be an array, got ", values.type_name());
  std::vector<std::string> strings;
  for (const nlohmann::json& value : values) strings.push_back(bytes_from_json(value, key));
  return strings;
}

void check_distinct(const std::vector<std::string>& strings, const char* key) {
  std::set<std::string> seen;
  for (const std::string& bytes : strings) {
    TG_CHECK(seen.insert(bytes).second, kStateError, "'", key, "' holds ", quoted(bytes), " twice");
  }
}

std::vector<double> numbers_from_json(const nlohmann::json& values, const char* key) {
  TG_CHECK(values.is_array(), kStateError, "'", key, "' must be an array, got ", values.type_name());
  std::vector<double> numbers;
  for (const nlohmann::json& value : values) {
    TG_CHECK(value.is_number(), kStateError, "'", key, "' must hold numbers, got ", value.dump());
    numbers.push_back(value.get<double>());
  }
  return numbers;
}

// The timeseries fields: columns, their normalisation, and the target column, which must be the
// one the config's target picks (as load_timeseries picks it: the last column when empty).
void timeseries_state_from_json(const TrainConfig& config, const nlohmann::json& state, DataState& out) {
  out.columns = byte_strings_from_json(state_field(state, "columns"), "columns");
  const int64_t width = static_cast<int64_t>(out.columns.size());
  TG_CHECK(width >= 1, kStateError, "'columns' is empty");
  out.norm.mean = numbers_from_json(state_field(state, "mean"), "mean");
  out.norm.stddev = numbers_from_json(state_field(state, "stddev"), "stddev");
  TG_CHECK(static_cast<int64_t>(out.norm.mean.size()) == width &&
               static_cast<int64_t>(out.norm.stddev.size()) == width,
           kStateError, width, " columns but ", out.norm.mean.size(), " means and ",
           out.norm.stddev.size(), " stddevs");
  for (int64_t c = 0; c < width; ++c) {
    TG_CHECK(std::isfinite(out.norm.mean[c]) && std::isfinite(out.norm.stddev[c]) && out.norm.stddev[c] > 0,
             kStateError, "column ", quoted(out.columns[c]), " has mean ", out.norm.mean[c], " and stddev ",
             out.norm.stddev[c], " (both must be finite, the stddev positive)");
  }
  const nlohmann::json& target = state_field(state, "target_column");
  TG_CHECK(target.is_number_integer() && target.get<int64_t>() >= 0 && target.get<int64_t>() < width,
           kStateError, "'target_column' must be a column index in [0, ", width, "), got ", target.dump());
  out.target_column = target.get<int64_t>();
  const auto named = std::find(out.columns.begin(), out.columns.end(), config.target);
  const int64_t expected = config.target.empty() ? width - 1 : named - out.columns.begin();
  TG_CHECK(out.target_column == expected, kStateError, "'target_column' ", out.target_column,
           " is not the config's target ", config.target.empty() ? "(the last column)" : quoted(config.target));
  for (const std::string& input : config.inputs) {
    TG_CHECK(std::find(out.columns.begin(), out.columns.end(), input) != out.columns.end(), kStateError,
             "the config's input column ", quoted(input), " is not among 'columns'");
  }
}

// The optional "sha256" of the training data (train --resume compares it with --data's): when
// present, 64 lowercase hex digits, as sha256_hex writes it.
void check_data_hash(const nlohmann::json& state) {
  if (!state.contains("sha256")) return;
  const nlohmann::json& hash = state["sha256"];
  const bool ok = hash.is_string() && hash.get<std::string>().size() == 64 &&
                  hash.get<std::string>().find_first_not_of("0123456789abcdef") == std::string::npos;
  TG_CHECK(ok, kStateError, "'sha256' must be 64 lowercase hex digits, got ", hash.dump());
}

class TextClsTask : public Task {
 public:
  TextClsTask(const TrainConfig& config, const std::string& path, const nlohmann::json* state,
              bool whole_file) : device_(config.compute_device()) {
    const double val_frac = whole_file ? 0.0 : config.val_frac;
    const Tokenizer tokenizer = parse_tokenizer(config.tokenizer);
    const LongLines long_lines = config.truncate ? LongLines::truncate : LongLines::error;
    if (state) {
      const DataState stored = data_state_from_json(config, *state);
      data_ = load_textcls(path, tokenizer, config.max_len, val_frac, &stored.vocab, &stored.labels,
                           long_lines);
    } else {
      data_ = load_textcls(path, tokenizer, config.max_len, val_frac, nullptr, nullptr, long_lines);
    }
    if (config.truncate) notice_ = truncation_notice(data_, config.max_len);
    model_ = std::make_shared<nn::TextClassifier>(data_.vocab.size(),
                                                  static_cast<int64_t>(data_.labels.size()),
                                                  config.model_config());
    model_->checkpoint_layers = config.checkpoint_activations;
    model_->to(device_);
    int64_t tokens = 0;
    for (const auto& example : data_.train) tokens += static_cast<int64_t>(example.tokens.size());
    mean_tokens_ = std::max<int64_t>(1, tokens / std::max<int64_t>(1, data_.train.size()));
    for (const auto* split : {&data_.train, &data_.val}) {
      for (const auto& example : *split) {
        longest_ = std::max<int64_t>(longest_, static_cast<int64_t>(example.tokens.size()));
      }
    }
  }
  nn::Module& model() override { return *model_; }
  int64_t examples(bool train) const override {
    return static_cast<int64_t>(train ? data_.train.size() : data_.val.size());
  }
  Tensor loss(const std::vector<int64_t>& ids, bool train, int64_t* correct) override {
    const TextBatch batch = make_text_batch(train ? data_.train : data_.val, ids);
    const Tensor labels = batch.labels.to(device_);
    const Tensor logits = model_->forward(batch.tokens.to(device_), batch.lengths);
    if (correct) *correct += count_correct(logits, labels);
    return cross_entropy(logits, labels);
  }
  Tensor shard_loss(const std::vector<int64_t>& batch, int64_t first, int64_t count) override {
    int64_t longest = 0;
    for (const int64_t id : batch) {
      if (id >= 0 && id < examples(true)) longest = std::max<int64_t>(longest, data_.train[id].tokens.size());
    }
    const std::vector<int64_t> ids(batch.begin() + first, batch.begin() + first + count);
    const TextBatch shard = make_text_batch(data_.train, ids, longest);
    return cross_entropy(model_->forward(shard.tokens.to(device_), shard.lengths), shard.labels.to(device_));
  }
  int64_t tokens_per_example() const override { return mean_tokens_; }
  int64_t longest_sequence() const override { return longest_; }
  bool classification() const override { return true; }
  std::string data_notice() const override { return notice_; }
  nlohmann::json data_state() const override {
    return {{"vocab", vocabulary_to_json(data_.vocab)}, {"labels", byte_strings_to_json(data_.labels)}};
  }
  const TextClsData& data() const { return data_; }

 private:
  Device device_;
  TextClsData data_;
  std::shared_ptr<nn::TextClassifier> model_;
  int64_t mean_tokens_ = 1;
  int64_t longest_ = 1;  // tokens of the longest text
  std::string notice_;    // --truncate's count of the lines cut
};

}  // namespace

TimeSeriesSpec timeseries_spec(const TrainConfig& config, double val_frac) {
  TimeSeriesSpec spec;
  spec.window = config.window;
  spec.horizon = config.horizon;
  spec.target = config.target;
  spec.inputs = config.inputs;
  spec.zscore = config.normalize == "zscore";
  spec.val_frac = val_frac;
  return spec;
}

namespace {

class TimeSeriesTask : public Task {
 public:
  TimeSeriesTask(const TrainConfig& config, const std::string& path, const nlohmann::json* state,
                 bool whole_file) : device_(config.compute_device()) {
    TimeSeriesSpec spec = timeseries_spec(config, whole_file ? 0.0 : config.val_frac);
    if (state) {
      const DataState stored = data_state_from_json(config, *state);
      data_ = load_timeseries(path, spec, &stored.norm);
      // The model reads columns by position: the file must have the trained-on columns, in order.
      TG_CHECK(data_.columns == stored.columns, "load_timeseries: '", path, "' has the columns ",
               byte_strings_to_json(data_.columns).dump(), " but the model was trained on ",
               byte_strings_to_json(stored.columns).dump());
    } else {
      data_ = load_timeseries(path, spec);
    }
    model_ = std::make_shared<nn::TimeSeriesModel>(static_cast<int64_t>(data_.input_columns.size()),
                                                   config.horizon, config.model_config());
    model_->checkpoint_layers = config.checkpoint_activations;
    model_->to(device_);
    for (Tensor* split : {&data_.train_x, &data_.train_y, &data_.val_x, &data_.val_y}) {
      if (split->defined()) *split = split->to(device_);  // the windows live on the device
    }
    window_ = config.window;
  }
  nn::Module& model() override { return *model_; }
  int64_t examples(bool train) const override {
    const Tensor& x = train ? data_.train_x : data_.val_x;
    return x.defined() ? x.size(0) : 0;
  }
  Tensor loss(const std::vector<int64_t>& ids, bool train, int64_t*) override {
    const Tensor& x = train ? data_.train_x : data_.val_x;
    const Tensor& y = train ? data_.train_y : data_.val_y;
    const Tensor index = from_indices(ids, {static_cast<int64_t>(ids.size())}, device_);
    // Rows ids of x [N, T, D] and y [N, P], gathered as embedding rows.
    const Tensor batch_x = embedding(index, x.view({x.size(0), -1})).view({-1, x.size(1), x.size(2)});
    const Tensor batch_y = embedding(index, y);
    return mse_loss(model_->forward(batch_x), batch_y);
  }
  int64_t tokens_per_example() const override { return window_; }
  nlohmann::json data_state() const override {
    return {{"columns", byte_strings_to_json(data_.columns)}, {"target_column", data_.target_column},
            {"mean", data_.norm.mean}, {"stddev", data_.norm.stddev}};
  }

 private:
  Device device_;
  TimeSeriesData data_;
  std::shared_ptr<nn::TimeSeriesModel> model_;
  int64_t window_ = 1;
};

class CharLMTask : public Task {
 public:
  CharLMTask(const TrainConfig& config, const std::string& path, const nlohmann::json* state,
             bool whole_file) : device_(config.compute_device()), context_(config.context) {
    const double val_frac = whole_file ? 0.0 : config.val_frac;
    if (state) {
      const DataState stored = data_state_from_json(config, *state);
      data_ = load_charlm(path, val_frac, &stored.vocab);
    } else {
      data_ = load_charlm(path, val_frac);
    }
    TG_CHECK(charlm_examples(data_.train, context_) > 0, "charlm: ", path, " has ",
             data_.train.size(), " training characters, fewer than --context + 1 = ", context_ + 1);
    model_ = std::make_shared<nn::CharLM>(data_.vocab.size(), config.model_config());
    model_->checkpoint_layers = config.checkpoint_activations;
    model_->to(device_);
  }
  nn::Module& model() override { return *model_; }
  int64_t examples(bool train) const override {
    return charlm_examples(train ? data_.train : data_.val, context_);
  }
  Tensor loss(const std::vector<int64_t>& ids, bool train, int64_t*) override {
    const auto [inputs, targets] = make_charlm_batch(train ? data_.train : data_.val, context_, ids);
    return cross_entropy(model_->forward(inputs.to(device_)), targets.to(device_));
  }
  int64_t tokens_per_example() const override { return context_; }
  nlohmann::json data_state() const override { return {{"vocab", vocabulary_to_json(data_.vocab)}}; }

 private:
  Device device_;
  CharLMData data_;
  std::shared_ptr<nn::CharLM> model_;
  int64_t context_;
};

}  // namespace

nlohmann::json vocabulary_to_json(const Vocabulary& vocab) { return byte_strings_to_json(vocab.tokens); }

Vocabulary vocabulary_from_json(const nlohmann::json& tokens) {
  const std::vector<std::string> strings = byte_strings_from_json(tokens, "vocab");
  TG_CHECK(strings.size() >= 2 && strings[0] == "<pad>" && strings[1] == "<unk>", kStateError,
           "'vocab' must start with \"<pad>\", \"<unk>\" (ids 0 and 1)");
  check_distinct(strings, "vocab");
  Vocabulary vocab;
  vocab.tokens.clear();
  vocab.index.clear();
  for (const std::string& token : strings) vocab.add(token);
  return vocab;
}

std::vector<std::string> labels_from_json(const nlohmann::json& labels) {
  std::vector<std::string> strings = byte_strings_from_json(labels, "labels");
  TG_CHECK(!strings.empty(), kStateError, "'labels' is empty");
  check_distinct(strings, "labels");
  return strings;
}

DataState data_state_from_json(const TrainConfig& config, const nlohmann::json& state) {
  DataState out;
  if (config.task == "textcls" || config.task == "charlm") {
    out.vocab = vocabulary_from_json(state_field(state, "vocab"));
  }
  if (config.task == "textcls") out.labels = labels_from_json(state_field(state, "labels"));
  if (config.task == "timeseries") timeseries_state_from_json(config, state, out);
  check_data_hash(state);
  return out;
}

nn::ModelStateShapes model_state_shapes(const TrainConfig& config, const DataState& state) {
  const nn::ModelConfig model = config.model_config();
  const auto count = [](const auto& items) { return static_cast<int64_t>(items.size()); };
  if (config.task == "textcls") {
    return nn::TextClassifier::state_shapes(state.vocab.size(), count(state.labels), model);
  }
  if (config.task == "timeseries") {
    const int64_t inputs = config.inputs.empty() ? count(state.columns) : count(config.inputs);
    return nn::TimeSeriesModel::state_shapes(inputs, config.horizon, model);
  }
  if (config.task == "charlm") return nn::CharLM::state_shapes(state.vocab.size(), model);
  fail("unknown task '", config.task, "' (textcls, timeseries, charlm)");
}

std::unique_ptr<nn::Module> make_model(const TrainConfig& config, const DataState& state) {
  const nn::ModelConfig model = config.model_config();
  const auto count = [](const auto& items) { return static_cast<int64_t>(items.size()); };
  if (config.task == "textcls") {
    return std::make_unique<nn::TextClassifier>(state.vocab.size(), count(state.labels), model);
  }
  if (config.task == "timeseries") {
    const int64_t inputs = config.inputs.empty() ? count(state.columns) : count(config.inputs);
    return std::make_unique<nn::TimeSeriesModel>(inputs, config.horizon, model);
  }
  if (config.task == "charlm") return std::make_unique<nn::CharLM>(state.vocab.size(), model);
  fail("unknown task '", config.task, "' (textcls, timeseries, charlm)");
}

Tensor Task::shard_loss(const std::vector<int64_t>& batch, int64_t first, int64_t count) {
  return loss(std::vector<int64_t>(batch.begin() + first, batch.begin() + first + count), true);
}

Metrics Task::evaluate(bool train_split, int64_t batch) {
  Metrics metrics;
  const int64_t count = examples(train_split);
  if (count == 0) return metrics;
  NoGrad no_grad;
  const bool was_training = model().is_training();
  model().eval();
  double total_loss = 0;
  int64_t correct = 0;
  for (int64_t start = 0; start < count; start += batch) {
    std::vector<int64_t> ids;
    for (int64_t i = start; i < std::min(count, start + batch); ++i) ids.push_back(i);
    total_loss += loss(ids, train_split, &correct).item() * static_cast<double>(ids.size());
  }
  model().train(was_training);
  metrics.examples = count;
  metrics.loss = total_loss / static_cast<double>(count);
  if (classification()) metrics.accuracy = static_cast<double>(correct) / static_cast<double>(count);
  return metrics;
}

std::unique_ptr<Task> make_task(const TrainConfig& config, const std::string& data_path,
                                const nlohmann::json* data_state, bool whole_file) {
  if (config.task == "textcls") return std::make_unique<TextClsTask>(config, data_path, data_state, whole_file);
  if (config.task == "timeseries") return std::make_unique<TimeSeriesTask>(config, data_path, data_state, whole_file);
  if (config.task == "charlm") return std::make_unique<CharLMTask>(config, data_path, data_state, whole_file);
  fail("unknown task '", config.task, "' (textcls, timeseries, charlm)");
}

}  // namespace tg::train
