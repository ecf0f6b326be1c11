#pragma once
// Everything `tapegrad train` is told, kept in the checkpoint (as JSON) so that eval, sample,
// plot and --resume rebuild exactly the same model and data pipeline.
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tapegrad/nn/models.h"
#include "tapegrad/train/flag_scope.h"

namespace tg::train {

// The largest sizes a run may ask for. They keep every product of sizes far from int64's limit
// and turn a typo (or a hostile checkpoint) into an error instead of a huge allocation.
struct Limits {
  static constexpr int64_t dim = 1 << 16;          // --dim (and so --heads)
  static constexpr int64_t layers = 1024;          // --layers
  static constexpr int64_t sequence = 1 << 20;     // --max-len, --window, --horizon, --context
  static constexpr int64_t positions = 1 << 26;    // --max-len x --dim: the positional table
  static constexpr int64_t batch = 1 << 20;        // --batch
  static constexpr int64_t steps = int64_t{1} << 40;  // --steps, --epochs, --warmup, total steps
};

// The checkpoint's "tokenizer_version": 2 since "word" lowercases and splits punctuation; a
// checkpoint without the field (version 1) says "word" for today's "whitespace".
inline constexpr int64_t kTokenizerVersion = 2;

struct TrainConfig {
  std::string task;  // textcls | timeseries | charlm
  std::string data;
  // model
  int64_t dim = 64, heads = 4, layers = 1, max_len = 256;
  double dropout = 0.1;
  // --attention and --position in their canonical spelling (train/attention_flags.h)
  std::string attention = "full", position = "sinusoidal";
  // training
  int64_t batch = 32, epochs = 0, steps = 0;  // steps wins over epochs; neither: 1 epoch
  double lr = 1e-3, weight_decay = 0.01, clip = 1.0, val_frac = 0.1;
  std::string optimizer = "adamw";  // sgd | adam | adamw
  int64_t warmup = 0;
  std::string schedule = "cosine";  // cosine (warm-up, then cosine decay) | constant (warm-up, then lr)
  uint64_t seed = 0;
  int threads = 0;
  std::string device = "cpu";  // cpu | cuda | cuda:N (a setting of the run, not of the model)
  bool checkpoint_activations = false;
  bool shuffle = true;
  int64_t eval_every = 0;  // steps between validations; 0: at the end of each epoch
  std::string amp = "none";  // none | fp16 | bf16: mixed precision (autocast, f32 master weights)
  // none | dynamic | static: how the model's Linears compute (nn/quantization.h). Only `tapegrad
  // quantize` writes anything but none; loading rebuilds the model with the same int8 Linears.
  std::string quantization = "none";
  // timeseries
  int64_t window = 32, horizon = 1;
  std::string target, normalize = "zscore";
  std::vector<std::string> inputs;  // the columns the model reads, in order; empty: every column
  // textcls: char | word (lowercased, punctuation apart) | whitespace (split on whitespace only)
  std::string tokenizer = "char";
  // textcls: a line of more than max_len tokens keeps its first max_len (--truncate), or is an
  // error. Stored, so that eval, sample, analyze and plot read new text the same way.
  bool truncate = false;
  // charlm
  int64_t context = 64;

  // The model's config; its attention spec is --attention and --position, with max_len and the
  // run's seed (bigbird's random blocks and Performer's features are drawn from it).
  nn::ModelConfig model_config() const;
  // The autocast dtype of --amp: f16, bf16, or f32 for none (Autocast(f32) is autocast off).
  DType amp_dtype() const;
  Device compute_device() const;  // --device, parsed
  // Throws tg::Error for impossible settings: heads not dividing dim, sizes <= 0 or past Limits,
  // NaN or infinite rates, ...
  void validate() const;
};

nlohmann::json to_json(const TrainConfig& config);
// Strict: every field must be there with its JSON type (an integer for sizes, no 3.5 or -1 for a
// seed), then validate() runs. tg::Error names the field. Fields added after the first release
// may be missing (amp: "none", quantization: "none", attention: "full", position: "sinusoidal",
// schedule: "cosine", inputs: every column, tokenizer_version: 1, whose "word" loads as
// "whitespace", truncate: false), never malformed.
TrainConfig config_from_json(const nlohmann::json& json);

// Which of `tapegrad train`'s flags apply to this config (train/flag_scope.h): each task's data
// flags to that task only, the attention flags to a model with attention, --tf32 to CUDA,
// --eval-every, --save-best and --patience to a run with a validation split.
std::vector<FlagScope> train_flag_scopes(const TrainConfig& config);

// --inputs "A,B,C" -> {"A", "B", "C"}; an empty name (",," or a trailing comma) is a tg::Error.
std::vector<std::string> parse_inputs(const std::string& text);

// A character LM's defaults where they differ from TrainConfig's (which suit textcls and
// timeseries): tuned on data/corpus.txt so that docs/cli.md's recipe (--context 64 --layers 2
// --steps 2000) beats a trigram count model (bench/ngram_charlm.py) clearly: validation 1.89
// nats/char against 2.13 (1e-3 and dropout 0.1 gave 2.127). The model is small and sees each
// character about ten times in 2000 steps: it underfits, so a high rate and no dropout. (2e-2
// does a little better, 1.86, but only with a warm-up, and a default warm-up would be longer
// than short runs.)
struct CharLMDefaults {
  static constexpr double lr = 1e-2;
  static constexpr double dropout = 0.0;
};

// --max-len's default for textcls: what the data needs, the token count of its longest line,
// capped at max_len_cap (and at what --dim leaves of Limits::positions). 4096 keeps a default
// model ordinary: its positional table is 4096 x --dim floats (1 MiB at --dim 64), and full
// attention over 4096 positions is already 16.7 million scores a head, so one runaway line in a
// file does not silently make a model that long. Data with longer lines trains with --truncate
// (cut to the cap) or with a --max-len typed (up to Limits::sequence). timeseries and charlm keep
// TrainConfig's 256.
struct TextClsDefaults {
  static constexpr int64_t max_len_cap = 4096;
};

// For --task textcls without "max-len" in `given`: reads config.data (with config.tokenizer) and
// sets max_len to its longest line's token count, capped; then validate() runs. Returns the line
// that says so ("max_len 300 (the longest line of data/fortunes.tsv, char tokens)"), naming the
// data as `shown_path`; "" when the flag was given or the task is another. A longest line past
// the cap is a tg::Error naming --truncate and --max-len, unless config.truncate.
std::string derive_textcls_max_len(TrainConfig& config, const std::set<std::string>& given,
                                   const std::string& shown_path);

// `tapegrad train`'s defaults that depend on the task (charlm: CharLMDefaults), set for --lr
// and --dropout when they are not in `given` (the flags typed). Other tasks: unchanged.
void apply_task_defaults(TrainConfig& config, const std::set<std::string>& given);

}  // namespace tg::train
