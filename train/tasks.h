#pragma once
// A task ties a dataset to its model and loss: textcls (cross-entropy, accuracy), timeseries
// (mean squared error over batch and horizon) and charlm (next-character cross-entropy).
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tapegrad/nn/models.h"
#include "tapegrad/train/config.h"
#include "tapegrad/train/datasets.h"

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
  // Data parallel: the mean training loss over examples [first, first + count) of the global
  // batch `batch`, computed on tensors that are exactly those rows of the single process's
  // (textcls pads to the whole batch's longest text).
  virtual Tensor shard_loss(const std::vector<int64_t>& batch, int64_t first, int64_t count);
  virtual int64_t tokens_per_example() const = 0;  // time steps or tokens one example feeds in
  // The longest sequence the model's attention sees: the context or window, for textcls the
  // longest text of either split.
  virtual int64_t longest_sequence() const { return tokens_per_example(); }
  virtual bool classification() const { return false; }
  // A line to tell the user about how the data was read (textcls with --truncate: how many lines
  // were cut), or "".
  virtual std::string data_notice() const { return ""; }
  // What the checkpoint must keep to encode new data the same way (vocabulary, labels, statistics).
  virtual nlohmann::json data_state() const = 0;

  // Mean loss (and accuracy) over a whole split, batch by batch, in eval mode without the tape.
  Metrics evaluate(bool train_split, int64_t batch);
};

// ---- a checkpoint's data state ------------------------------------------------------------------
// Tokens, labels and column names are byte strings read from users' files; they are stored with
// io/json_bytes.h (a JSON string when valid UTF-8, else an array of byte values), and both forms
// are read back. The readers throw tg::Error naming the field for anything malformed.

// A vocabulary's tokens in id order, and back: "<pad>" and "<unk>" first, no token twice.
nlohmann::json vocabulary_to_json(const Vocabulary& vocab);
Vocabulary vocabulary_from_json(const nlohmann::json& tokens);
// Class labels in id order: at least one (a one-label TSV trains, so its checkpoint must load),
// none twice.
std::vector<std::string> labels_from_json(const nlohmann::json& labels);

// Everything a task keeps to encode new data the same way, decoded.
struct DataState {
  Vocabulary vocab;                  // textcls, charlm
  std::vector<std::string> labels;   // textcls
  std::vector<std::string> columns;  // timeseries: the CSV header, one model input a column
  int64_t target_column = 0;         // timeseries: the forecast column, the config's target
  Normalization norm;                // timeseries: one finite mean and positive stddev a column
};

// The data state of a `config.task` checkpoint, with every field checked and the counts checked
// against one another and against the config (the target column).
DataState data_state_from_json(const TrainConfig& config, const nlohmann::json& state);

// How a timeseries model reads its CSV: the config's window, horizon, target, inputs and
// normalisation, with the last val_frac of the windows held out (0: every window).
TimeSeriesSpec timeseries_spec(const TrainConfig& config, double val_frac);

// The state_dict names and shapes of the model that make_task builds for `config` and a stored
// data state, computed without building it (see nn::CharLM::state_shapes).
nn::ModelStateShapes model_state_shapes(const TrainConfig& config, const DataState& state);

// The model alone (f32, on the CPU, freshly initialised) that make_task would build for `config`
// and a stored data state: what needs no data file (tapegrad quantize --mode dynamic).
std::unique_ptr<nn::Module> make_model(const TrainConfig& config, const DataState& state);

// Builds the task's data and model. With `data_state` (from a checkpoint) the data is encoded
// with the stored vocabulary/statistics; `whole_file` puts every example in the train split.
std::unique_ptr<Task> make_task(const TrainConfig& config, const std::string& data_path,
                                const nlohmann::json* data_state = nullptr, bool whole_file = false);

}  // namespace tg::train
