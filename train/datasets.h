#pragma once
// The three toy tasks' data: reading the files (with one clear tg::Error for anything malformed),
// tokenising, vocabularies, windows, normalisation and the batch order.
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "tapegrad/autograd/tensor.h"

namespace tg::train {

// ---- time series: CSV with a header row and numeric columns ------------------------------------

struct TimeSeriesSpec {
  int64_t window = 32;          // T: rows given as input
  int64_t horizon = 1;          // P: rows of the target column to forecast
  std::string target;           // column name; empty = the last column
  std::vector<std::string> inputs;  // the columns the model reads, in this order; empty = every column
  bool zscore = true;           // --normalize zscore|none
  double val_frac = 0.1;        // the last fraction of the windows
};

// Per-column statistics from the training windows only (identity when zscore is off).
struct Normalization {
  std::vector<double> mean, stddev;
};

struct TimeSeriesData {
  std::vector<std::string> columns;   // the whole header
  std::vector<int64_t> input_columns; // indices into columns of the model's inputs (D of them)
  int64_t target_column = 0;
  Normalization norm;
  Tensor train_x, train_y;  // [N, T, D] and [N, P], f32, normalised
  Tensor val_x, val_y;
};

// Window i takes rows [i, i+T) of the input columns as input and rows [i+T, i+T+P) of the target
// as target, i = 0 ... rows-T-P. Statistics are kept for every column. `norm` given: use it (eval of a checkpoint) instead of computing it.
TimeSeriesData load_timeseries(const std::string& path, const TimeSeriesSpec& spec,
                               const Normalization* norm = nullptr);

// ---- tokens and vocabularies --------------------------------------------------------------------

// chars: UTF-8 code points. words: lowercased words, each punctuation mark a token of its own
// (the rule is above lowercase_words in datasets.cpp). whitespace: split on whitespace only, case
// and punctuation kept (what "word" meant before it split punctuation; old checkpoints load as it).
enum class Tokenizer { chars, words, whitespace };
std::vector<std::string> tokenize(const std::string& text, Tokenizer tokenizer);
Tokenizer parse_tokenizer(const std::string& name);  // "char" | "word" | "whitespace"
std::string tokenizer_name(Tokenizer tokenizer);

// Index 0 is padding, 1 is unknown; the rest in order of first appearance in the training split.
struct Vocabulary {
  std::vector<std::string> tokens{"<pad>", "<unk>"};
  std::unordered_map<std::string, int64_t> index{{"<pad>", 0}, {"<unk>", 1}};
  int64_t add(const std::string& token);  // returns its id
  int64_t id(const std::string& token) const;  // 1 (<unk>) when absent
  int64_t size() const { return static_cast<int64_t>(tokens.size()); }
};

// ---- text classification: TSV, one "label<TAB>text" per line -----------------------------------

struct TextExample {
  std::vector<int64_t> tokens;  // 1 to max_len tokens
  int64_t label = 0;
};

// What load_textcls does with a line of more than max_len tokens: refuse it (an error naming the
// longest such line, its length, and the two ways out), or keep its first max_len tokens, as
// Hugging Face tokenizers' truncation=True does (--truncate).
enum class LongLines { error, truncate };

struct TextClsData {
  Tokenizer tokenizer = Tokenizer::chars;
  Vocabulary vocab;                 // from the training split (the tokens kept, when cut)
  std::vector<std::string> labels;  // from the training split, in order of first appearance
  std::vector<TextExample> train, val;  // val = the last val_frac of the lines
  int64_t truncated = 0;            // lines cut to max_len (LongLines::truncate)
};

// `vocab` and `labels` given: encode with them (eval of a checkpoint); validation lines whose
// label is unknown are an error. A line of more than max_len tokens is cut or refused, as
// `long_lines` says.
TextClsData load_textcls(const std::string& path, Tokenizer tokenizer, int64_t max_len,
                         double val_frac, const Vocabulary* vocab = nullptr,
                         const std::vector<std::string>* labels = nullptr,
                         LongLines long_lines = LongLines::error);

// The line --truncate prints: "truncated 12 of 1,204 lines to 256 tokens".
std::string truncation_notice(const TextClsData& data, int64_t max_len);

// The longest text of a TSV file in tokens, and its line: the file read and checked as
// load_textcls reads it (what --max-len defaults to for textcls, train/config.h).
struct LongestText {
  int64_t tokens = 0;
  int64_t line = 0;  // 1-based, the first line of that length
};
LongestText longest_textcls_text(const std::string& path, Tokenizer tokenizer);

// tokens [B, S] (padded with 0 to the longest) and lengths, for examples[ids].
struct TextBatch {
  Tensor tokens;
  std::vector<int64_t> lengths;
  Tensor labels;  // i64 [B]
};
// Padded to the longest example, or to `pad_to` when longer (a data-parallel shard pads to its
// global batch's longest, so that its tensors are rows of the single process's).
TextBatch make_text_batch(const std::vector<TextExample>& examples, const std::vector<int64_t>& ids,
                          int64_t pad_to = 0);

// ---- character language model: plain UTF-8 text -----------------------------------------------

// A character's id in 4 bytes: a vocabulary holds at most the 1,112,064 Unicode scalar values, 256
// lone bytes and the two specials, far below 2^31.
using CharId = int32_t;

// The corpus is held once, as one CharId per character (4 bytes per character, the file's bytes
// are dropped after decoding); an example is a window into it, copied only into its batch.
struct CharLMData {
  Vocabulary vocab;                 // characters of the training split
  std::vector<CharId> train, val;   // token ids; val = the last val_frac of the text
  int64_t corpus_bytes() const;     // heap bytes of train and val (their capacity)
};
CharLMData load_charlm(const std::string& path, double val_frac, const Vocabulary* vocab = nullptr);

// Example i is ids[i*context, i*context + context + 1): inputs are the first context tokens,
// targets the same shifted by one. Returns how many examples fit.
int64_t charlm_examples(const std::vector<CharId>& ids, int64_t context);
// inputs and targets [B, context] for examples[ids].
std::pair<Tensor, Tensor> make_charlm_batch(const std::vector<CharId>& tokens, int64_t context,
                                            const std::vector<int64_t>& example_ids);

// ---- batch order -------------------------------------------------------------------------------

// The batches of one epoch: with shuffle off, batch k holds examples [kB, (k+1)B) in file order;
// with shuffle on, a permutation seeded by (seed, epoch). The last partial batch is dropped.
std::vector<std::vector<int64_t>> epoch_batches(int64_t examples, int64_t batch, bool shuffle,
                                                uint64_t seed, int64_t epoch);

}  // namespace tg::train
