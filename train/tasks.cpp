#include "train/tasks.h"

#include <algorithm>

#include "autograd/error.h"
#include "autograd/tape.h"
#include "ops/ops.h"

namespace tg::train {
namespace {

// How many of the predictions (argmax of logits [B, C]) equal the labels.
int64_t count_correct(const Tensor& logits, const Tensor& labels) {
  const auto predicted = max(logits.detach(), -1).indices.indices();
  const auto truth = labels.indices();
  int64_t correct = 0;
  for (size_t i = 0; i < truth.size(); ++i) correct += predicted[i] == truth[i] ? 1 : 0;
  return correct;
}

nlohmann::json vocab_json(const Vocabulary& vocab) { return vocab.tokens; }

class TextClsTask : public Task {
 public:
  TextClsTask(const TrainConfig& config, const std::string& path, const nlohmann::json* state,
              bool whole_file) : device_(config.compute_device()) {
    const double val_frac = whole_file ? 0.0 : config.val_frac;
    const Tokenizer tokenizer = parse_tokenizer(config.tokenizer);
    if (state) {
      const Vocabulary vocab = vocabulary_from_json(state->at("vocab"));
      const auto labels = state->at("labels").get<std::vector<std::string>>();
      data_ = load_textcls(path, tokenizer, config.max_len, val_frac, &vocab, &labels);
    } else {
      data_ = load_textcls(path, tokenizer, config.max_len, val_frac);
    }
    model_ = std::make_shared<nn::TextClassifier>(data_.vocab.size(),
                                                  static_cast<int64_t>(data_.labels.size()),
                                                  config.model_config());
    model_->checkpoint_layers = config.checkpoint_activations;
    model_->to(device_);
    int64_t tokens = 0;
    for (const auto& example : data_.train) tokens += static_cast<int64_t>(example.tokens.size());
    mean_tokens_ = std::max<int64_t>(1, tokens / std::max<int64_t>(1, data_.train.size()));
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
  int64_t tokens_per_example() const override { return mean_tokens_; }
  bool classification() const override { return true; }
  nlohmann::json data_state() const override {
    return {{"vocab", vocab_json(data_.vocab)}, {"labels", data_.labels}};
  }
  const TextClsData& data() const { return data_; }

 private:
  Device device_;
  TextClsData data_;
  std::shared_ptr<nn::TextClassifier> model_;
  int64_t mean_tokens_ = 1;
};

class TimeSeriesTask : public Task {
 public:
  TimeSeriesTask(const TrainConfig& config, const std::string& path, const nlohmann::json* state,
                 bool whole_file) : device_(config.compute_device()) {
    TimeSeriesSpec spec;
    spec.window = config.window;
    spec.horizon = config.horizon;
    spec.target = config.target;
    spec.zscore = config.normalize == "zscore";
    spec.val_frac = whole_file ? 0.0 : config.val_frac;
    if (state) {
      Normalization norm;
      norm.mean = state->at("mean").get<std::vector<double>>();
      norm.stddev = state->at("stddev").get<std::vector<double>>();
      data_ = load_timeseries(path, spec, &norm);
    } else {
      data_ = load_timeseries(path, spec);
    }
    model_ = std::make_shared<nn::TimeSeriesModel>(static_cast<int64_t>(data_.columns.size()),
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
    return {{"columns", data_.columns}, {"target_column", data_.target_column},
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
      const Vocabulary vocab = vocabulary_from_json(state->at("vocab"));
      data_ = load_charlm(path, val_frac, &vocab);
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
  nlohmann::json data_state() const override { return {{"vocab", vocab_json(data_.vocab)}}; }

 private:
  Device device_;
  CharLMData data_;
  std::shared_ptr<nn::CharLM> model_;
  int64_t context_;
};

}  // namespace

Vocabulary vocabulary_from_json(const nlohmann::json& tokens) {
  Vocabulary vocab;
  vocab.tokens.clear();
  vocab.index.clear();
  for (const auto& token : tokens) vocab.add(token.get<std::string>());
  return vocab;
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
