#pragma once
// A task ties a dataset to its model and loss: textcls (cross-entropy, accuracy), timeseries
// (mean squared error over batch and horizon) and charlm (next-character cross-entropy).
#include <memory>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "nn/models.h"
#include "train/config.h"
#include "train/datasets.h"

namespace tg::train {

struct Metrics {
  double loss = 0;
  std::optional<double> accuracy;  // classification only
  int64_t examples = 0;
};

class Task {
 public:
  virtual ~Task() = default;
  virtual nn::Module& model() = 0;
  virtual int64_t examples(bool train_split) const = 0;
  // The mean loss over examples `ids` of a split; adds the number classified right to *correct.
  virtual Tensor loss(const std::vector<int64_t>& ids, bool train_split, int64_t* correct = nullptr) = 0;
  virtual int64_t tokens_per_example() const = 0;  // time steps or tokens one example feeds in
  virtual bool classification() const { return false; }
  // What the checkpoint must keep to encode new data the same way (vocabulary, labels, statistics).
  virtual nlohmann::json data_state() const = 0;

  // Mean loss (and accuracy) over a whole split, batch by batch, in eval mode without the tape.
  Metrics evaluate(bool train_split, int64_t batch);
};

// The vocabulary stored in a checkpoint's data state (its tokens, in id order).
Vocabulary vocabulary_from_json(const nlohmann::json& tokens);

// Builds the task's data and model. With `data_state` (from a checkpoint) the data is encoded
// with the stored vocabulary/statistics; `whole_file` puts every example in the train split.
std::unique_ptr<Task> make_task(const TrainConfig& config, const std::string& data_path,
                                const nlohmann::json* data_state = nullptr, bool whole_file = false);

}  // namespace tg::train
