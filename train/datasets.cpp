// The toy tasks' data: CSV time series, TSV text classification and plain text for a character
// language model. Every malformed input throws one tg::Error naming the file and the line.
//
// Choices worth knowing:
// - A UTF-8 byte-order mark at the start of a file is skipped; "\r\n" line ends are accepted.
// - Blank lines (only whitespace) are skipped in CSV and TSV files; line numbers in messages are
//   the physical (1-based) line numbers of the file.
// - CSV cells are numbers by io/strict_numbers.h: decimal only (no hex, inf, nan or leading '+'),
//   subnormals accepted. A header naming a column twice is an error. Text from the file is quoted
//   in messages with io/quoted_text.h (a NUL or newline is spelled out, never printed raw).
// - Invalid UTF-8: each byte that does not start a well-formed sequence becomes its own one-byte
//   token and decoding resumes at the next byte (no error: any file can be read, and the same
//   bytes always give the same tokens).
// - A text-classification line whose text has no token (empty, or only whitespace with the word
//   and whitespace tokenizers) is an error naming the line: an example the model cannot see is a
//   data bug.
// - A text-classification line of more than max_len tokens is an error unless truncation is asked
//   for (LongLines::truncate, --truncate): then it keeps its first max_len tokens, as Hugging Face
//   tokenizers do by default, and the vocabulary is built from the tokens kept.
// - zscore uses the population standard deviation (divide by n) of the rows the training windows
//   cover; a constant column gets stddev 1. The target is normalised with its column's statistics.
// - The validation part is the last floor(n * val_frac) items (windows, lines or characters).
// - Shuffling is a Fisher-Yates loop driven by Philox 4x32-10 keyed by the seed, with the epoch in
//   the counter, and exact (rejection-sampled) uniform indices: the same order on every platform.
#include "tapegrad/train/datasets.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/io/file_io.h"
#include "tapegrad/io/quoted_text.h"
#include "tapegrad/io/strict_numbers.h"

namespace tg::train {

namespace {

// ---- files and lines ----------------------------------------------------------------------------

// The whole file (io/file_io.h: only a regular file, never blocking on a FIFO), without a UTF-8
// byte-order mark.
std::string read_file(const std::string& path, const char* what) {
  std::string text = read_regular_file(path, what);
  if (text.rfind("\xEF\xBB\xBF", 0) == 0) text.erase(0, 3);  // UTF-8 byte-order mark
  return text;
}

struct Line {
  int64_t number;  // 1-based
  std::string text;
};

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

std::string trim(const std::string& s) {
  size_t begin = 0, end = s.size();
  while (begin < end && is_space(s[begin])) ++begin;
  while (end > begin && is_space(s[end - 1])) --end;
  return s.substr(begin, end - begin);
}

// The non-blank lines of a file, "\r" stripped from their ends.
std::vector<Line> nonblank_lines(const std::string& text) {
  std::vector<Line> lines;
  int64_t number = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    ++number;
    std::string line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!trim(line).empty()) lines.push_back({number, std::move(line)});
    start = end + 1;
  }
  return lines;
}

void check_val_frac(double val_frac, const char* what) {
  TG_CHECK(val_frac >= 0.0 && val_frac < 1.0, what, ": val_frac ", val_frac,
           " is outside [0, 1)");
}

// How many of n items go to validation: floor(n * val_frac), with a little slack so that
// 0.29 * 100 counts as 29.
int64_t validation_count(int64_t n, double val_frac) {
  return static_cast<int64_t>(std::floor(static_cast<double>(n) * val_frac + 1e-9));
}

// ---- CSV ----------------------------------------------------------------------------------------

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> cells;
  size_t start = 0;
  while (true) {
    const size_t comma = line.find(',', start);
    std::string cell = trim(line.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (cell.size() >= 2 && cell.front() == '"' && cell.back() == '"') cell = cell.substr(1, cell.size() - 2);
    cells.push_back(cell);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return cells;
}

struct Table {
  std::vector<std::string> columns;
  std::vector<std::vector<double>> rows;
};

// The header's names, each at most once: a second column of the same name could never be picked
// by --target or --inputs, and a checkpoint's columns would not say which one it read.
void check_distinct_columns(const std::vector<std::string>& columns, const std::string& path) {
  std::unordered_map<std::string, size_t> first_column;  // name -> its first column, 0-based
  for (size_t c = 0; c < columns.size(); ++c) {
    const auto [first, added] = first_column.emplace(columns[c], c);
    TG_CHECK(added, "load_timeseries: '", path, "' line 1: columns ", first->second + 1, " and ",
             c + 1, " are both named ", quoted_text(columns[c]));
  }
}

// One cell as a number (io/strict_numbers.h: decimal only, finite), or a tg::Error naming it.
double csv_number(const Table& table, const std::string& path, const Line& line, size_t c,
                  const std::string& cell) {
  std::string why;
  const std::optional<double> value = read_finite_double(cell, &why);
  if (!value) {
    fail("load_timeseries: '", path, "' line ", line.number, ", column ", c + 1, " (",
         quoted_text(table.columns[c]), "): ", quoted_text(cell), " ", why);
  }
  return *value;
}

Table read_csv(const std::string& path) {
  const char* what = "load_timeseries";
  const std::vector<Line> lines = nonblank_lines(read_file(path, what));
  TG_CHECK(!lines.empty(), what, ": '", path, "' is empty (expected a header row and numeric rows)");
  Table table;
  table.columns = split_csv(lines[0].text);
  check_distinct_columns(table.columns, path);
  TG_CHECK(lines.size() > 1, what, ": '", path, "' has a header row but no data rows");
  const size_t width = table.columns.size();
  for (size_t l = 1; l < lines.size(); ++l) {
    const std::vector<std::string> cells = split_csv(lines[l].text);
    TG_CHECK(cells.size() == width, what, ": '", path, "' line ", lines[l].number, ": ragged row with ",
             cells.size(), " cells, the header has ", width);
    std::vector<double> row(width);
    for (size_t c = 0; c < width; ++c) row[c] = csv_number(table, path, lines[l], c, cells[c]);
    table.rows.push_back(std::move(row));
  }
  return table;
}

// Windows [first, first + count) as x [count, T, D] (the D input columns) and y [count, P], normalised.
std::pair<Tensor, Tensor> make_windows(const Table& table, int64_t first, int64_t count, int64_t window,
                                       int64_t horizon, const std::vector<int64_t>& inputs, int64_t target,
                                       const Normalization& norm) {
  const int64_t width = static_cast<int64_t>(inputs.size());
  Tensor x = empty({count, window, width}, DType::f32, kCPU);  // filled here on the host
  Tensor y = empty({count, horizon}, DType::f32, kCPU);
  float* xs = x.data_as<float>();
  float* ys = y.data_as<float>();
  auto normalised = [&](int64_t row, int64_t column) {
    const float value = static_cast<float>((table.rows[row][column] - norm.mean[column]) / norm.stddev[column]);
    // A value past f32's range (about 3.4e38) would train on infinities: normalise it or scale it.
    TG_CHECK(std::isfinite(value), "load_timeseries: data row ", row + 1, ", column ",
             quoted_text(table.columns[column]), ": ", table.rows[row][column],
             " is too large for f32 after normalisation");
    return value;
  };
  for (int64_t n = 0; n < count; ++n) {
    const int64_t start = first + n;
    for (int64_t t = 0; t < window; ++t)
      for (int64_t d = 0; d < width; ++d) xs[(n * window + t) * width + d] = normalised(start + t, inputs[d]);
    for (int64_t p = 0; p < horizon; ++p) ys[n * horizon + p] = normalised(start + window + p, target);
  }
  return {x, y};
}

// The index of column `name`, or a tg::Error listing the columns.
int64_t column_index(const Table& table, const std::string& name, const std::string& path, const char* role) {
  const auto found = std::find(table.columns.begin(), table.columns.end(), name);
  if (found == table.columns.end()) {
    std::string names;
    for (const auto& column : table.columns) {
      names += (names.empty() ? "" : ", ") + quoted_text(column);
    }
    fail("load_timeseries: '", path, "': ", role, " column ", quoted_text(name),
         " not found (columns: ", names, ")");
  }
  return found - table.columns.begin();
}

// ---- UTF-8 --------------------------------------------------------------------------------------

std::vector<std::string> utf8_chars(const std::string& text) {
  std::vector<std::string> chars;
  for (size_t i = 0; i < text.size();) {
    const size_t length = std::max<size_t>(utf8_sequence_length(text, i), 1);  // a bad byte alone
    chars.push_back(text.substr(i, length));
    i += length;
  }
  return chars;
}

std::vector<std::string> whitespace_words(const std::string& text) {
  std::vector<std::string> words;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && is_space(text[i])) ++i;
    const size_t start = i;
    while (i < text.size() && !is_space(text[i])) ++i;
    if (i > start) words.push_back(text.substr(start, i - start));
  }
  return words;
}

// ---- words, lowercased, punctuation apart ------------------------------------------------------

// What a character is to the word tokenizer.
enum class WordCharKind { space, word, apostrophe, symbol };

struct WordChar {
  size_t length;  // its bytes: 1 for ASCII and a bad byte, 2 to 4 for other code points
  WordCharKind kind;
};

// The code point of the well-formed UTF-8 sequence of `length` (2 to 4) bytes at text[i].
uint32_t word_code_point(const std::string& text, size_t i, size_t length) {
  const auto byte = [&](size_t k) {
    return static_cast<uint32_t>(static_cast<unsigned char>(text[i + k]));
  };
  uint32_t point = byte(0) & (0x7F >> length);  // the lead byte's payload bits
  for (size_t k = 1; k < length; ++k) point = (point << 6) | (byte(k) & 0x3F);
  return point;
}

// The kind of a non-ASCII code point: Unicode's White_Space ones are spaces, U+2019 (the
// typeset apostrophe) an apostrophe, Latin-1's punctuation and symbols (U+0080-U+00BF, U+00D7,
// U+00F7), General Punctuation (U+2000-U+206F) and CJK punctuation (U+3000-U+303F) symbols, and
// every other code point (accented and non-Latin letters, but also emoji) a word character.
WordCharKind word_kind_of_code_point(uint32_t point) {
  const bool white_space = point == 0x85 || point == 0xA0 || point == 0x1680 ||
                           (point >= 0x2000 && point <= 0x200A) || point == 0x2028 ||
                           point == 0x2029 || point == 0x202F || point == 0x205F || point == 0x3000;
  if (white_space) return WordCharKind::space;
  if (point == 0x2019) return WordCharKind::apostrophe;
  const bool symbol = point <= 0xBF || point == 0xD7 || point == 0xF7 ||
                      (point >= 0x2000 && point <= 0x206F) || (point >= 0x3000 && point <= 0x303F);
  return symbol ? WordCharKind::symbol : WordCharKind::word;
}

// The character at text[i] and its kind: ASCII letters and digits are word characters, ' an
// apostrophe, other printable ASCII symbols; a byte that starts no well-formed UTF-8 sequence is
// a symbol of one byte.
WordChar word_char_at(const std::string& text, size_t i) {
  const char c = text[i];
  if (is_space(c)) return {1, WordCharKind::space};
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
    return {1, WordCharKind::word};
  }
  if (c == '\'') return {1, WordCharKind::apostrophe};
  if (static_cast<unsigned char>(c) < 0x80) return {1, WordCharKind::symbol};
  const size_t length = utf8_sequence_length(text, i);
  if (length == 0) return {1, WordCharKind::symbol};  // a bad byte: a token of its own
  return {length, word_kind_of_code_point(word_code_point(text, i, length))};
}

// A-Z as a-z; every other byte (UTF-8's included) as it is, whatever the C locale says.
char ascii_lowercase(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

// The word tokenizer (--tokenizer word). A word is a run of word characters, with ASCII A-Z
// lowercased (other letters are kept as they are); an apostrophe (' or U+2019, stored as ')
// between two word characters stays in the word ("don't", "rock'n'roll"). Every other
// non-space character is a token of its own ("--" is two, "'quoted'" three), a multi-byte one
// whole; whitespace, ASCII or Unicode, separates tokens and is dropped.
std::vector<std::string> lowercase_words(const std::string& text) {
  std::vector<std::string> tokens;
  std::string word;  // the word being read, lowercased
  for (size_t i = 0; i < text.size();) {
    const WordChar current = word_char_at(text, i);
    const size_t start = i;
    i += current.length;
    const bool inside_word = current.kind == WordCharKind::apostrophe && !word.empty() &&
                             i < text.size() && word_char_at(text, i).kind == WordCharKind::word;
    if (current.kind == WordCharKind::word) {
      for (size_t k = start; k < i; ++k) word += ascii_lowercase(text[k]);
      continue;
    }
    if (inside_word) {
      word += '\'';
      continue;
    }
    if (!word.empty()) tokens.push_back(std::move(word));
    word.clear();
    if (current.kind != WordCharKind::space) tokens.push_back(text.substr(start, current.length));
  }
  if (!word.empty()) tokens.push_back(std::move(word));
  return tokens;
}

// ---- shuffling ----------------------------------------------------------------------------------

// Draw k of the stream (seed, epoch): 64 bits from one Philox block.
uint64_t shuffle_bits(uint64_t seed, int64_t epoch, uint64_t k) {
  const uint64_t e = static_cast<uint64_t>(epoch);
  const auto words = philox4x32({static_cast<uint32_t>(k), static_cast<uint32_t>(k >> 32),
                                 static_cast<uint32_t>(e), static_cast<uint32_t>(e >> 32)},
                                {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  return (static_cast<uint64_t>(words[0]) << 32) | words[1];
}

}  // namespace

// ---- time series --------------------------------------------------------------------------------

TimeSeriesData load_timeseries(const std::string& path, const TimeSeriesSpec& spec, const Normalization* norm) {
  const char* what = "load_timeseries";
  TG_CHECK(spec.window >= 1, what, ": window ", spec.window, " must be at least 1");
  TG_CHECK(spec.horizon >= 1, what, ": horizon ", spec.horizon, " must be at least 1");
  check_val_frac(spec.val_frac, what);
  const Table table = read_csv(path);

  TimeSeriesData data;
  data.columns = table.columns;
  const int64_t width = static_cast<int64_t>(table.columns.size());
  data.target_column = spec.target.empty() ? width - 1 : column_index(table, spec.target, path, "target");
  for (const std::string& name : spec.inputs) {
    const int64_t index = column_index(table, name, path, "input");
    TG_CHECK(std::find(data.input_columns.begin(), data.input_columns.end(), index) == data.input_columns.end(),
             what, ": input column ", quoted_text(name), " is named twice");
    data.input_columns.push_back(index);
  }
  if (spec.inputs.empty()) {
    for (int64_t c = 0; c < width; ++c) data.input_columns.push_back(c);
  }

  const int64_t rows = static_cast<int64_t>(table.rows.size());
  const int64_t window_rows = checked_add(spec.window, spec.horizon, "load_timeseries: window + horizon");
  const int64_t windows = rows - window_rows + 1;
  TG_CHECK(windows >= 1, what, ": '", path, "' has ", rows, " data rows: no window fits (window ", spec.window,
           " + horizon ", spec.horizon, " = ", window_rows, " rows)");
  const int64_t val_windows = validation_count(windows, spec.val_frac);
  const int64_t train_windows = windows - val_windows;  // >= 1 since val_frac < 1

  if (norm) {
    TG_CHECK(static_cast<int64_t>(norm->mean.size()) == width && static_cast<int64_t>(norm->stddev.size()) == width,
             what, ": the given normalization has ", norm->mean.size(), " means and ", norm->stddev.size(),
             " stddevs, '", path, "' has ", width, " columns");
    for (int64_t c = 0; c < width; ++c)
      TG_CHECK(std::isfinite(norm->mean[c]) && std::isfinite(norm->stddev[c]) && norm->stddev[c] > 0, what,
               ": the given normalization of column ", quoted_text(table.columns[c]),
               " is invalid (mean ", norm->mean[c],
               ", stddev ", norm->stddev[c], ")");
    data.norm = *norm;
  } else if (!spec.zscore) {
    data.norm.mean.assign(width, 0.0);
    data.norm.stddev.assign(width, 1.0);
  } else {
    // The rows the training windows cover, inputs and targets: [0, train_windows - 1 + T + P).
    const int64_t covered = train_windows - 1 + spec.window + spec.horizon;
    data.norm.mean.assign(width, 0.0);
    data.norm.stddev.assign(width, 0.0);
    for (int64_t c = 0; c < width; ++c) {
      double sum = 0;
      for (int64_t r = 0; r < covered; ++r) sum += table.rows[r][c];
      const double mean = sum / static_cast<double>(covered);
      double squares = 0;
      for (int64_t r = 0; r < covered; ++r) squares += (table.rows[r][c] - mean) * (table.rows[r][c] - mean);
      const double stddev = std::sqrt(squares / static_cast<double>(covered));
      data.norm.mean[c] = mean;
      TG_CHECK(std::isfinite(mean) && std::isfinite(stddev), what, ": '", path, "': column ",
               quoted_text(table.columns[c]), " has values too large to normalise (mean ", mean,
               ", stddev ", stddev, ")");
      data.norm.stddev[c] = stddev > 0 ? stddev : 1.0;
    }
  }

  std::tie(data.train_x, data.train_y) =
      make_windows(table, 0, train_windows, spec.window, spec.horizon, data.input_columns, data.target_column, data.norm);
  std::tie(data.val_x, data.val_y) =
      make_windows(table, train_windows, val_windows, spec.window, spec.horizon, data.input_columns, data.target_column,
                   data.norm);
  return data;
}

// ---- tokens and vocabularies --------------------------------------------------------------------

std::vector<std::string> tokenize(const std::string& text, Tokenizer tokenizer) {
  switch (tokenizer) {
    case Tokenizer::chars: return utf8_chars(text);
    case Tokenizer::words: return lowercase_words(text);
    case Tokenizer::whitespace: return whitespace_words(text);
  }
  fail("tokenize: unknown tokenizer ", static_cast<int>(tokenizer));
}

Tokenizer parse_tokenizer(const std::string& name) {
  if (name == "char") return Tokenizer::chars;
  if (name == "word") return Tokenizer::words;
  if (name == "whitespace") return Tokenizer::whitespace;
  fail("tokenizer '", name, "' is not one of: char, word, whitespace");
}

std::string tokenizer_name(Tokenizer tokenizer) {
  switch (tokenizer) {
    case Tokenizer::chars: return "char";
    case Tokenizer::words: return "word";
    case Tokenizer::whitespace: return "whitespace";
  }
  fail("tokenizer_name: unknown tokenizer ", static_cast<int>(tokenizer));
}

int64_t Vocabulary::add(const std::string& token) {
  const auto found = index.find(token);
  if (found != index.end()) return found->second;
  const int64_t id = size();
  tokens.push_back(token);
  index.emplace(token, id);
  return id;
}

int64_t Vocabulary::id(const std::string& token) const {
  const auto found = index.find(token);
  return found == index.end() ? 1 : found->second;
}

// ---- text classification ------------------------------------------------------------------------

namespace {

// One line of a TSV file: its label and its text's tokens.
struct TextLine {
  int64_t line;
  std::string label;
  std::vector<std::string> tokens;
};

// Every line of the file split and tokenised first, so that a malformed line is reported
// wherever it is.
std::vector<TextLine> read_textcls_lines(const std::string& path, Tokenizer tokenizer) {
  const char* what = "load_textcls";
  const std::vector<Line> lines = nonblank_lines(read_file(path, what));
  TG_CHECK(!lines.empty(), what, ": '", path, "' is empty (expected lines 'label<TAB>text')");
  std::vector<TextLine> texts;
  for (const Line& line : lines) {
    const size_t tab = line.text.find('\t');
    TG_CHECK(tab != std::string::npos, what, ": '", path, "' line ", line.number,
             ": no tab (expected 'label<TAB>text')");
    TextLine text{line.number, trim(line.text.substr(0, tab)),
                  tokenize(line.text.substr(tab + 1), tokenizer)};
    TG_CHECK(!text.label.empty(), what, ": '", path, "' line ", line.number, ": label missing before the tab");
    TG_CHECK(!text.tokens.empty(), what, ": '", path, "' line ", line.number, ": the text has no ",
             tokenizer_name(tokenizer), " tokens");
    texts.push_back(std::move(text));
  }
  return texts;
}

// The lines past max_len: refused (an error naming the longest, how many there are, and the two
// ways out: a longer --max-len or --truncate), or cut to their first max_len tokens. Returns how
// many were cut.
int64_t fit_to_max_len(std::vector<TextLine>& texts, const std::string& path, Tokenizer tokenizer,
                       int64_t max_len, LongLines long_lines) {
  int64_t longer = 0, longest = 0, longest_line = 0;  // lines past max_len, the longest of them
  for (TextLine& text : texts) {
    const int64_t length = static_cast<int64_t>(text.tokens.size());
    if (length <= max_len) continue;
    ++longer;
    if (length > longest) {
      longest = length;
      longest_line = text.line;
    }
    if (long_lines == LongLines::truncate) text.tokens.resize(max_len);  // the first max_len
  }
  // The model's positions end at max_len: a longer sequence is cut only when asked to.
  TG_CHECK(longer == 0 || long_lines == LongLines::truncate, "load_textcls: '", path, "' line ",
           longest_line, " has ", longest, " ", tokenizer_name(tokenizer),
           " tokens, past the model's max_len ", max_len,
           longer == 1 ? " (the only line past it" : " (the longest of " +
           std::to_string(longer) + " lines past it", "; train with --max-len ", longest,
           ", or with --truncate to cut such lines to their first ", max_len, " tokens)");
  return longer;
}

// 1204 as "1,204".
std::string with_thousands(int64_t count) {
  std::string digits = std::to_string(count);
  for (int64_t at = static_cast<int64_t>(digits.size()) - 3; at > 0; at -= 3) digits.insert(at, ",");
  return digits;
}

}  // namespace

TextClsData load_textcls(const std::string& path, Tokenizer tokenizer, int64_t max_len, double val_frac,
                         const Vocabulary* vocab, const std::vector<std::string>* labels,
                         LongLines long_lines) {
  const char* what = "load_textcls";
  TG_CHECK(max_len >= 1, what, ": max_len ", max_len, " must be at least 1");
  check_val_frac(val_frac, what);
  std::vector<TextLine> texts = read_textcls_lines(path, tokenizer);
  TextClsData data;
  data.tokenizer = tokenizer;
  data.truncated = fit_to_max_len(texts, path, tokenizer, max_len, long_lines);
  const int64_t total = static_cast<int64_t>(texts.size());
  const int64_t train_count = total - validation_count(total, val_frac);
  TG_CHECK(train_count >= 1, what, ": '", path, "' leaves no training examples");

  if (vocab) {
    data.vocab = *vocab;
  } else {  // the tokens the model sees: a cut line's dropped tail adds none
    for (int64_t i = 0; i < train_count; ++i)
      for (const auto& token : texts[i].tokens) data.vocab.add(token);
  }
  if (labels) {
    data.labels = *labels;
  } else {
    for (int64_t i = 0; i < train_count; ++i)
      if (std::find(data.labels.begin(), data.labels.end(), texts[i].label) == data.labels.end())
        data.labels.push_back(texts[i].label);
  }

  for (int64_t i = 0; i < total; ++i) {
    const TextLine& text = texts[i];
    const auto found = std::find(data.labels.begin(), data.labels.end(), text.label);
    TG_CHECK(found != data.labels.end(), what, ": '", path, "' line ", text.line, ": label ",
             quoted_text(text.label),
             labels ? " is not one of the given labels" : " does not appear in the training split");
    TextExample example;
    example.label = found - data.labels.begin();
    for (const auto& token : text.tokens) example.tokens.push_back(data.vocab.id(token));
    (i < train_count ? data.train : data.val).push_back(std::move(example));
  }
  return data;
}

std::string truncation_notice(const TextClsData& data, int64_t max_len) {
  const int64_t lines = static_cast<int64_t>(data.train.size() + data.val.size());
  return "truncated " + with_thousands(data.truncated) + " of " + with_thousands(lines) +
         (lines == 1 ? " line" : " lines") + " to " + with_thousands(max_len) + " tokens";
}

LongestText longest_textcls_text(const std::string& path, Tokenizer tokenizer) {
  LongestText longest;
  for (const TextLine& text : read_textcls_lines(path, tokenizer)) {
    if (static_cast<int64_t>(text.tokens.size()) > longest.tokens) {
      longest = {static_cast<int64_t>(text.tokens.size()), text.line};
    }
  }
  return longest;
}

TextBatch make_text_batch(const std::vector<TextExample>& examples, const std::vector<int64_t>& ids,
                          int64_t pad_to) {
  TG_CHECK(!ids.empty(), "make_text_batch: no examples in the batch");
  const int64_t batch = static_cast<int64_t>(ids.size());
  int64_t longest = pad_to;
  for (const int64_t id : ids) {
    TG_CHECK(id >= 0 && id < static_cast<int64_t>(examples.size()), "make_text_batch: example ", id,
             " out of range [0, ", examples.size(), ")");
    longest = std::max<int64_t>(longest, examples[id].tokens.size());
  }
  std::vector<int64_t> tokens(batch * longest, 0);  // 0 = <pad>
  std::vector<int64_t> labels(batch);
  TextBatch result;
  for (int64_t b = 0; b < batch; ++b) {
    const TextExample& example = examples[ids[b]];
    std::copy(example.tokens.begin(), example.tokens.end(), tokens.begin() + b * longest);
    result.lengths.push_back(static_cast<int64_t>(example.tokens.size()));
    labels[b] = example.label;
  }
  result.tokens = from_indices(tokens, {batch, longest});
  result.labels = from_indices(labels, {batch});
  return result;
}

// ---- character language model -------------------------------------------------------------------

namespace {

// How many characters `text` holds: its UTF-8 code points, and each byte of it that does not
// start a well-formed sequence.
int64_t charlm_character_count(const std::string& text) {
  int64_t count = 0;
  for (size_t i = 0; i < text.size(); ++count) {
    i += std::max<size_t>(utf8_sequence_length(text, i), 1);  // a bad byte alone
  }
  return count;
}

// Calls visit(character) on each character of `text` in order (as utf8_chars splits it), with
// no vector of them.
template <typename Visit>
void charlm_for_each_character(const std::string& text, Visit visit) {
  for (size_t i = 0; i < text.size();) {
    const size_t length = std::max<size_t>(utf8_sequence_length(text, i), 1);  // a bad byte alone
    visit(text.substr(i, length));  // at most 4 bytes: in the string itself, no allocation
    i += length;
  }
}

}  // namespace

int64_t CharLMData::corpus_bytes() const {
  return static_cast<int64_t>((train.capacity() + val.capacity()) * sizeof(CharId));
}

// One pass counts the characters, so that train and val are allocated once at their exact size;
// the second gives each its id (the training part adds its characters to the vocabulary, in order
// of first appearance, unless `vocab` is given).
CharLMData load_charlm(const std::string& path, double val_frac, const Vocabulary* vocab) {
  const char* what = "load_charlm";
  check_val_frac(val_frac, what);
  const std::string text = read_file(path, what);
  const int64_t total = charlm_character_count(text);
  TG_CHECK(total > 0, what, ": '", path, "' is empty");
  const int64_t train_count = total - validation_count(total, val_frac);

  CharLMData data;
  if (vocab) {  // one built here always fits (CharId)
    TG_CHECK(vocab->size() <= std::numeric_limits<CharId>::max(), what, ": a vocabulary of ",
             vocab->size(), " characters does not fit a 32-bit id");
    data.vocab = *vocab;
  }
  data.train.reserve(train_count);
  data.val.reserve(total - train_count);
  charlm_for_each_character(text, [&](const std::string& character) {
    const bool training = static_cast<int64_t>(data.train.size()) < train_count;
    const int64_t id = training && !vocab ? data.vocab.add(character) : data.vocab.id(character);
    (training ? data.train : data.val).push_back(static_cast<CharId>(id));
  });
  return data;
}

int64_t charlm_examples(const std::vector<CharId>& ids, int64_t context) {
  TG_CHECK(context >= 1, "charlm_examples: context ", context, " must be at least 1");
  const int64_t n = static_cast<int64_t>(ids.size());
  return n - 1 >= context ? (n - 1) / context : 0;  // (not context + 1, which may overflow)
}

std::pair<Tensor, Tensor> make_charlm_batch(const std::vector<CharId>& tokens, int64_t context,
                                            const std::vector<int64_t>& example_ids) {
  TG_CHECK(!example_ids.empty(), "make_charlm_batch: no examples in the batch");
  const int64_t count = charlm_examples(tokens, context);
  const int64_t batch = static_cast<int64_t>(example_ids.size());
  std::vector<int64_t> inputs(batch * context), targets(batch * context);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t example = example_ids[b];
    TG_CHECK(example >= 0 && example < count, "make_charlm_batch: example ", example, " out of range [0, ", count,
             ") for ", tokens.size(), " tokens and context ", context);
    const auto start = tokens.begin() + example * context;
    std::copy(start, start + context, inputs.begin() + b * context);
    std::copy(start + 1, start + context + 1, targets.begin() + b * context);
  }
  return {from_indices(inputs, {batch, context}), from_indices(targets, {batch, context})};
}

// ---- batch order --------------------------------------------------------------------------------

std::vector<std::vector<int64_t>> epoch_batches(int64_t examples, int64_t batch, bool shuffle, uint64_t seed,
                                                int64_t epoch) {
  TG_CHECK(examples >= 0, "epoch_batches: examples ", examples, " is negative");
  TG_CHECK(batch >= 1, "epoch_batches: batch ", batch, " must be at least 1");
  std::vector<int64_t> order(examples);
  for (int64_t i = 0; i < examples; ++i) order[i] = i;
  if (shuffle) {
    uint64_t draw = 0;
    for (int64_t i = examples - 1; i >= 1; --i) {
      // j uniform in [0, i]: reject the top partial block of 2^64 so that every j is equally likely.
      const uint64_t bound = static_cast<uint64_t>(i) + 1;
      const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
      uint64_t bits;
      do bits = shuffle_bits(seed, epoch, draw++);
      while (bits >= limit);
      std::swap(order[i], order[bits % bound]);
    }
  }
  std::vector<std::vector<int64_t>> batches;
  for (int64_t start = 0; start + batch <= examples; start += batch)
    batches.emplace_back(order.begin() + start, order.begin() + start + batch);
  return batches;
}

}  // namespace tg::train
