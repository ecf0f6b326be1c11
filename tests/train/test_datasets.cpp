// Datasets: windows and normalisation checked by hand on tiny files, every malformed input, the
// tokenizers, batches and batch order, and the real files under data/.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include "tapegrad/autograd/error.h"
#include "tapegrad/train/datasets.h"

using namespace tg;
using namespace tg::train;
using Catch::Matchers::Contains;

namespace {

// A fresh directory for the files of one test, removed afterwards.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           ("tapegrad_datasets_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string write(const std::string& name, const std::string& contents) const {
    const auto file = path / name;
    std::ofstream(file, std::ios::binary) << contents;
    return file.string();
  }
};

// 10 rows: a = 1..10, b = 10 * a (the target when no target is named).
std::string ten_rows() {
  std::string csv = "a,b\n";
  for (int i = 1; i <= 10; ++i) csv += std::to_string(i) + "," + std::to_string(10 * i) + "\n";
  return csv;
}

TimeSeriesSpec spec(int64_t window, int64_t horizon, double val_frac, bool zscore = false,
                    const std::string& target = "") {
  TimeSeriesSpec s;
  s.window = window;
  s.horizon = horizon;
  s.val_frac = val_frac;
  s.zscore = zscore;
  s.target = target;
  return s;
}

std::string data_file(const std::string& name) { return std::string(TAPEGRAD_SOURCE_DIR) + "/data/" + name; }

}  // namespace

// ---- time series -------------------------------------------------------------------------------

TEST_CASE("datasets: time-series windows by hand", "[datasets]") {
  TempDir dir;
  const std::string path = dir.write("ten.csv", ten_rows());
  // 10 rows, T = 3, P = 2: windows i = 0 ... 10 - 3 - 2 = 5, six of them; no validation.
  const TimeSeriesData data = load_timeseries(path, spec(3, 2, 0.0));
  REQUIRE(data.columns == std::vector<std::string>{"a", "b"});
  REQUIRE(data.target_column == 1);
  REQUIRE(data.train_x.shape() == Shape{6, 3, 2});
  REQUIRE(data.train_y.shape() == Shape{6, 2});
  REQUIRE(data.train_x.dtype() == DType::f32);
  REQUIRE(data.val_x.shape() == Shape{0, 3, 2});
  REQUIRE(data.val_y.shape() == Shape{0, 2});
  const auto x = data.train_x.to_host_f64();
  const auto y = data.train_y.to_host_f64();
  // First window: rows 1..3 as input, b of rows 4..5 as target.
  REQUIRE(std::vector<double>(x.begin(), x.begin() + 6) == std::vector<double>{1, 10, 2, 20, 3, 30});
  REQUIRE(std::vector<double>(y.begin(), y.begin() + 2) == std::vector<double>{40, 50});
  // Last window (i = 5): rows 6..8, target b of rows 9..10.
  REQUIRE(std::vector<double>(x.end() - 6, x.end()) == std::vector<double>{6, 60, 7, 70, 8, 80});
  REQUIRE(std::vector<double>(y.end() - 2, y.end()) == std::vector<double>{90, 100});
  REQUIRE(data.norm.mean == std::vector<double>{0, 0});
  REQUIRE(data.norm.stddev == std::vector<double>{1, 1});

  SECTION("a named target column and a validation tail") {
    // 6 windows, val_frac 0.5: windows 0-2 train, 3-5 validate.
    const TimeSeriesData split = load_timeseries(path, spec(3, 2, 0.5, false, "a"));
    REQUIRE(split.target_column == 0);
    REQUIRE(split.train_x.shape() == Shape{3, 3, 2});
    REQUIRE(split.val_x.shape() == Shape{3, 3, 2});
    REQUIRE(split.train_y.to_host_f64() == std::vector<double>{4, 5, 5, 6, 6, 7});
    REQUIRE(split.val_y.to_host_f64() == std::vector<double>{7, 8, 8, 9, 9, 10});
    const auto vx = split.val_x.to_host_f64();
    REQUIRE(std::vector<double>(vx.begin(), vx.begin() + 6) == std::vector<double>{4, 40, 5, 50, 6, 60});
  }
}

TEST_CASE("datasets: zscore statistics come from the training windows only", "[datasets]") {
  TempDir dir;
  // Column c is constant (stddev 0 -> 1).
  std::string csv = "a,c,b\n";
  for (int i = 1; i <= 10; ++i) csv += std::to_string(i) + ",7," + std::to_string(10 * i) + "\n";
  const std::string path = dir.write("z.csv", csv);
  // T = 3, P = 2: 6 windows; val_frac 0.5 -> 3 training windows covering rows [0, 2 + 3 + 2) = 1..7.
  const TimeSeriesData data = load_timeseries(path, spec(3, 2, 0.5, true, "b"));
  // a over 1..7: mean 4, population variance (9+4+1+0+1+4+9)/7 = 4, stddev 2.
  REQUIRE(data.norm.mean[0] == Approx(4.0));
  REQUIRE(data.norm.stddev[0] == Approx(2.0));
  REQUIRE(data.norm.mean[1] == Approx(7.0));
  REQUIRE(data.norm.stddev[1] == 1.0);
  REQUIRE(data.norm.mean[2] == Approx(40.0));
  REQUIRE(data.norm.stddev[2] == Approx(20.0));
  // First training window, first row: (1 - 4) / 2, (7 - 7) / 1, (10 - 40) / 20.
  const auto x = data.train_x.to_host_f64();
  REQUIRE(x[0] == Approx(-1.5));
  REQUIRE(x[1] == Approx(0.0));
  REQUIRE(x[2] == Approx(-1.5));
  // Targets normalised with the target column's statistics: b of rows 4, 5 -> 0, 0.5.
  const auto y = data.train_y.to_host_f64();
  REQUIRE(y[0] == Approx(0.0));
  REQUIRE(y[1] == Approx(0.5));
  // The last validation target, b = 100, is outside the statistics: (100 - 40) / 20 = 3.
  REQUIRE(data.val_y.to_host_f64().back() == Approx(3.0));

  SECTION("a given normalization is used as is") {
    Normalization norm{{0, 0, 0}, {1, 1, 10}};
    const TimeSeriesData given = load_timeseries(path, spec(3, 2, 0.5, true, "b"), &norm);
    REQUIRE(given.norm.stddev == std::vector<double>{1, 1, 10});
    REQUIRE(given.train_y.to_host_f64()[0] == Approx(4.0));
    Normalization wrong{{0}, {1}};
    REQUIRE_THROWS_WITH(load_timeseries(path, spec(3, 2, 0.5), &wrong), Contains("normalization"));
  }
}

TEST_CASE("datasets: CSV numbers are finite decimals; subnormals are, hex and inf are not",
          "[datasets]") {
  TempDir dir;
  auto load = [&](const std::string& contents) {
    return load_timeseries(dir.write("numbers.csv", contents), spec(1, 1, 0.0));
  };
  // 1e-320 is a finite (subnormal) double; as f32 it is 0. 1e-400 rounds to 0 as strtod reads it.
  const TimeSeriesData tiny = load("a,b\n1e-320,2\n-1e-400,4.5e-310\n3,1E2\n");
  REQUIRE(tiny.train_x.to_host_f64() == std::vector<double>{0, 2, 0, 0});
  REQUIRE(tiny.train_y.to_host_f64() == std::vector<double>{0, 100});
  // strtod reads each of these (0x10 as 16); a CSV of decimal numbers holds none of them.
  for (const char* cell : {"0x10", "0x1p4", "inf", "-infinity", "NaN", "+1", "1e5x", "1,5"}) {
    INFO(cell);
    const std::string csv = std::string("a,b\n1,2\n3,") + cell + "\n";
    if (std::string(cell) == "1,5") {
      REQUIRE_THROWS_WITH(load(csv), Contains("ragged"));
      continue;
    }
    REQUIRE_THROWS_WITH(load(csv), Contains("line 3, column 2 ('b'): '" + std::string(cell) +
                                            "' is not a decimal number"));
  }
  REQUIRE_THROWS_WITH(load("a,b\n1,2\n3,1e309\n"),
                      Contains("'1e309' is out of range for a double"));
}

TEST_CASE("datasets: a NUL or control byte in a bad CSV cell is spelled out in the message",
          "[datasets]") {
  TempDir dir;
  const std::string csv = std::string("a,b\n1,2\n3,4\0" "5\x1b[2Jx\n", 19);
  const std::string path = dir.write("nul.csv", csv);
  // Before: the message stopped at the NUL ("... column 2 ('b'): '4").
  REQUIRE_THROWS_WITH(load_timeseries(path, spec(1, 1, 0.0)),
                      Contains("line 3, column 2 ('b'): '4\\x005\\x1b[2Jx' is not a decimal number"));
  const std::string header = std::string("a,b\x07\n1,2\n3,y\n");
  REQUIRE_THROWS_WITH(load_timeseries(dir.write("bel.csv", header), spec(1, 1, 0.0)),
                      Contains("column 2 ('b\\x07'): 'y'"));
}

TEST_CASE("datasets: a CSV header naming a column twice is refused, naming it", "[datasets]") {
  TempDir dir;
  const std::string path = dir.write("twice.csv", "a,b,a\n1,2,3\n4,5,6\n7,8,9\n");
  REQUIRE_THROWS_WITH(load_timeseries(path, spec(1, 1, 0.0)),
                      Contains("twice.csv' line 1: columns 1 and 3 are both named 'a'"));
  // Quotes and spaces around a name do not make it another name.
  const std::string quoted = dir.write("quoted.csv", "x, \"x\"\n1,2\n3,4\n");
  REQUIRE_THROWS_WITH(load_timeseries(quoted, spec(1, 1, 0.0)),
                      Contains("columns 1 and 2 are both named 'x'"));
  REQUIRE_NOTHROW(load_timeseries(dir.write("distinct.csv", "a,A\n1,2\n3,4\n"), spec(1, 1, 0.0)));
}

TEST_CASE("datasets: malformed CSV files throw tg::Error naming the problem", "[datasets]") {
  TempDir dir;
  const std::string good = dir.write("good.csv", ten_rows());
  auto load = [&](const std::string& contents) {
    return load_timeseries(dir.write("bad.csv", contents), spec(3, 2, 0.0));
  };
  REQUIRE_THROWS_AS(load_timeseries((dir.path / "missing.csv").string(), spec(3, 2, 0.0)), tg::Error);
  REQUIRE_THROWS_WITH(load_timeseries((dir.path / "missing.csv").string(), spec(3, 2, 0.0)),
                      Contains("cannot open") && Contains("missing.csv"));
  REQUIRE_THROWS_WITH(load_timeseries(dir.path.string(), spec(3, 2, 0.0)), Contains("directory"));
  REQUIRE_THROWS_WITH(load(""), Contains("empty") && Contains("bad.csv"));
  REQUIRE_THROWS_WITH(load("\n  \n"), Contains("empty"));
  REQUIRE_THROWS_WITH(load("a,b\n"), Contains("no data rows"));
  REQUIRE_THROWS_WITH(load("a,b\n1,2\n3,x\n"), Contains("line 3") && Contains("column 2") && Contains("'x'"));
  REQUIRE_THROWS_WITH(load("a,b\n1,2\n3,\n"), Contains("line 3") && Contains("column 2") &&
                                                  Contains("not a decimal number"));
  REQUIRE_THROWS_WITH(load("a,b\n1,2\n3,nan\n"), Contains("not a decimal number"));
  REQUIRE_THROWS_WITH(load("a,b\n1,2\n3,4,5\n"), Contains("line 3") && Contains("ragged"));
  REQUIRE_THROWS_WITH(load("a,b\n1,2\n\n3\n"), Contains("line 4") && Contains("ragged"));
  REQUIRE_THROWS_WITH(load_timeseries(good, spec(3, 2, 0.0, false, "c")),
                      Contains("target column 'c' not found") && Contains("'a', 'b'"));
  REQUIRE_THROWS_WITH(load_timeseries(good, spec(8, 3, 0.0)), Contains("no window fits"));
  REQUIRE_NOTHROW(load_timeseries(good, spec(8, 2, 0.0)));  // exactly one window
  REQUIRE_THROWS_WITH(load_timeseries(good, spec(3, 2, 1.0)), Contains("val_frac"));
  REQUIRE_THROWS_WITH(load_timeseries(good, spec(3, 2, -0.1)), Contains("val_frac"));
  REQUIRE_THROWS_WITH(load_timeseries(good, spec(0, 2, 0.0)), Contains("window"));
  REQUIRE_THROWS_WITH(load_timeseries(good, spec(3, 0, 0.0)), Contains("horizon"));
  // Accepted: Windows line ends, a byte-order mark, quoted header names, blank lines.
  const TimeSeriesData crlf =
      load_timeseries(dir.write("crlf.csv", "\xEF\xBB\xBF\"a\", \"b\"\r\n1,2\r\n\r\n3,4\r\n5,6\r\n"), spec(1, 1, 0.0));
  REQUIRE(crlf.columns == std::vector<std::string>{"a", "b"});
  REQUIRE(crlf.train_x.to_host_f64() == std::vector<double>{1, 2, 3, 4});
  REQUIRE(crlf.train_y.to_host_f64() == std::vector<double>{4, 6});
}

// ---- tokens and vocabularies --------------------------------------------------------------------

TEST_CASE("datasets: tokenizers split UTF-8 code points and whitespace words", "[datasets]") {
  const std::string text = "h\xC3\xA9llo w\xC3\xB6rld";  // "héllo wörld"
  REQUIRE(tokenize(text, Tokenizer::chars) ==
          std::vector<std::string>{"h", "\xC3\xA9", "l", "l", "o", " ", "w", "\xC3\xB6", "r", "l", "d"});
  REQUIRE(tokenize(text, Tokenizer::words) == std::vector<std::string>{"h\xC3\xA9llo", "w\xC3\xB6rld"});
  REQUIRE(tokenize("  a\tbb\n\nccc  ", Tokenizer::words) == std::vector<std::string>{"a", "bb", "ccc"});
  REQUIRE(tokenize("", Tokenizer::chars).empty());
  // Three- and four-byte code points: "€" U+20AC, "𝄞" U+1D11E.
  REQUIRE(tokenize("\xE2\x82\xAC\xF0\x9D\x84\x9E!", Tokenizer::chars) ==
          std::vector<std::string>{"\xE2\x82\xAC", "\xF0\x9D\x84\x9E", "!"});
  // Invalid UTF-8: each bad byte is its own token (a stray continuation byte, a truncated
  // sequence, an overlong encoding, a surrogate).
  REQUIRE(tokenize("a\x80" "b", Tokenizer::chars) == std::vector<std::string>{"a", "\x80", "b"});
  REQUIRE(tokenize("\xC3", Tokenizer::chars) == std::vector<std::string>{"\xC3"});
  REQUIRE(tokenize("\xC0\xAF", Tokenizer::chars) == std::vector<std::string>{"\xC0", "\xAF"});
  REQUIRE(tokenize("\xED\xA0\x80", Tokenizer::chars) == std::vector<std::string>{"\xED", "\xA0", "\x80"});
  REQUIRE(parse_tokenizer("char") == Tokenizer::chars);
  REQUIRE(parse_tokenizer("word") == Tokenizer::words);
  REQUIRE(tokenizer_name(Tokenizer::words) == "word");
  REQUIRE_THROWS_WITH(parse_tokenizer("bpe"), Contains("bpe") && Contains("char, word"));
}

TEST_CASE("datasets: the word tokenizer lowercases words and splits punctuation off",
          "[datasets]") {
  using Tokens = std::vector<std::string>;
  const std::string text = "Don't PANIC -- it's 3.14, 'rock'n'roll' (ok?)";
  REQUIRE(tokenize(text, Tokenizer::words) == Tokens{"don't", "panic", "-", "-", "it's", "3", ".",
                                                     "14", ",", "'", "rock'n'roll", "'", "(", "ok",
                                                     "?", ")"});
  // whitespace: the rule "word" had before, case and punctuation kept.
  REQUIRE(tokenize(text, Tokenizer::whitespace) ==
          Tokens{"Don't", "PANIC", "--", "it's", "3.14,", "'rock'n'roll'", "(ok?)"});
  // An apostrophe stays in a word only between two word characters.
  REQUIRE(tokenize("''a'' b' 'c a''b", Tokenizer::words) ==
          Tokens{"'", "'", "a", "'", "'", "b", "'", "'", "c", "a", "'", "'", "b"});
  REQUIRE(tokenize(" \t\n\r ", Tokenizer::words).empty());
  REQUIRE(tokenize("a_b@c", Tokenizer::words) == Tokens{"a", "_", "b", "@", "c"});
  // Non-ASCII letters are word characters, kept as they are (only A-Z is lowercased): "Café
  // naïve ÉTÉ".
  REQUIRE(tokenize("Caf\xC3\xA9 na\xC3\xAFve \xC3\x89T\xC3\x89", Tokenizer::words) ==
          Tokens{"caf\xC3\xA9", "na\xC3\xAFve", "\xC3\x89t\xC3\x89"});
  // U+2019 inside a word is an apostrophe, stored as '; alone, or as a closing quote, a symbol.
  // "don’t “quoted” dogs’": curly quotes U+201C and U+201D are symbols.
  const std::string quotes = "don\xE2\x80\x99t \xE2\x80\x9Cquoted\xE2\x80\x9D dogs\xE2\x80\x99";
  REQUIRE(tokenize(quotes, Tokenizer::words) ==
          Tokens{"don't", "\xE2\x80\x9C", "quoted", "\xE2\x80\x9D", "dogs", "\xE2\x80\x99"});
  // Latin-1 and General Punctuation symbols split, whole: "¿Qué? 2×3 a—b".
  REQUIRE(tokenize("\xC2\xBFQu\xC3\xA9? 2\xC3\x97" "3 a\xE2\x80\x94" "b", Tokenizer::words) ==
          Tokens{"\xC2\xBF", "qu\xC3\xA9", "?", "2", "\xC3\x97", "3", "a", "\xE2\x80\x94", "b"});
  // Unicode white space separates: a no-break space U+00A0, an ideographic space U+3000.
  REQUIRE(tokenize("a\xC2\xA0" "b\xE3\x80\x80" "c", Tokenizer::words) == Tokens{"a", "b", "c"});
  // A byte that starts no well-formed UTF-8 sequence is a token of its own, never part of a word.
  REQUIRE(tokenize("ab\x80" "cd\xC3 x\xFFy", Tokenizer::words) ==
          Tokens{"ab", "\x80", "cd", "\xC3", "x", "\xFF", "y"});
  REQUIRE(parse_tokenizer("whitespace") == Tokenizer::whitespace);
  REQUIRE(tokenizer_name(Tokenizer::whitespace) == "whitespace");
  REQUIRE(tokenizer_name(parse_tokenizer("word")) == "word");
  REQUIRE_THROWS_WITH(parse_tokenizer("bpe"), Contains("char, word, whitespace"));
}

TEST_CASE("datasets: vocabulary ids", "[datasets]") {
  Vocabulary vocab;
  REQUIRE(vocab.size() == 2);
  REQUIRE(vocab.id("<pad>") == 0);
  REQUIRE(vocab.id("<unk>") == 1);
  REQUIRE(vocab.add("x") == 2);
  REQUIRE(vocab.add("y") == 3);
  REQUIRE(vocab.add("x") == 2);
  REQUIRE(vocab.size() == 4);
  REQUIRE(vocab.id("y") == 3);
  REQUIRE(vocab.id("never seen") == 1);
  REQUIRE(vocab.tokens == std::vector<std::string>{"<pad>", "<unk>", "x", "y"});
}

// ---- text classification ------------------------------------------------------------------------

TEST_CASE("datasets: text classification from TSV", "[datasets]") {
  TempDir dir;
  const std::string path = dir.write("cls.tsv",
                                     "pos\tab\n"
                                     "\n"
                                     "neg\tbca\r\n"
                                     "pos\ta\n"
                                     "neg\tabcd\n"
                                     "pos\tzz\n");
  // 5 lines, val_frac 0.4: the last 2 lines validate.
  const TextClsData data = load_textcls(path, Tokenizer::chars, 4, 0.4);
  REQUIRE(data.labels == std::vector<std::string>{"pos", "neg"});
  REQUIRE(data.vocab.tokens == std::vector<std::string>{"<pad>", "<unk>", "a", "b", "c"});
  REQUIRE(data.train.size() == 3);
  REQUIRE(data.val.size() == 2);
  REQUIRE(data.train[0].tokens == std::vector<int64_t>{2, 3});
  REQUIRE(data.train[0].label == 0);
  REQUIRE(data.train[1].tokens == std::vector<int64_t>{3, 4, 2});
  REQUIRE(data.train[1].label == 1);
  REQUIRE(data.val[0].tokens == std::vector<int64_t>{2, 3, 4, 1});  // "d" unknown
  REQUIRE(data.val[1].tokens == std::vector<int64_t>{1, 1});
  REQUIRE(data.val[1].label == 0);
  // A line past max_len is an error naming the longest such line and the two ways out, unless
  // truncation is asked for (the next test case).
  const std::string long_lines = dir.write("long.tsv", "a\tabcde\nb\tx\na\tabcdefg\n");
  REQUIRE_THROWS_WITH(load_textcls(long_lines, Tokenizer::chars, 4, 0.0),
                      Contains("line 3 has 7 char tokens, past the model's max_len 4") &&
                          Contains("the longest of 2 lines past it") && Contains("--max-len 7") &&
                          Contains("--truncate to cut such lines to their first 4 tokens"));
  REQUIRE(load_textcls(long_lines, Tokenizer::chars, 7, 0.0).train[2].tokens.size() == 7);
  // A validation label the training split never saw cannot be encoded.
  REQUIRE_THROWS_WITH(load_textcls(dir.write("odd.tsv", "a\tx\n\nodd\ty\n"), Tokenizer::chars, 4, 0.5),
                      Contains("line 3") && Contains("'odd'") && Contains("training split"));

  SECTION("words, and a given vocabulary and labels") {
    const std::string words = dir.write("words.tsv", "b\tthe cat\na\tthe dog  sat\na\ta cat\n");
    const TextClsData w = load_textcls(words, Tokenizer::words, 8, 0.0);
    REQUIRE(w.tokenizer == Tokenizer::words);
    REQUIRE(w.vocab.tokens == std::vector<std::string>{"<pad>", "<unk>", "the", "cat", "dog", "sat", "a"});
    REQUIRE(w.labels == std::vector<std::string>{"b", "a"});
    REQUIRE(w.train[1].tokens == std::vector<int64_t>{2, 4, 5});
    Vocabulary small;
    small.add("cat");
    const std::vector<std::string> labels{"a", "b"};
    const TextClsData g = load_textcls(words, Tokenizer::words, 8, 0.0, &small, &labels);
    REQUIRE(g.vocab.size() == 3);
    REQUIRE(g.train[0].tokens == std::vector<int64_t>{1, 2});
    REQUIRE(g.train[0].label == 1);
    const std::vector<std::string> other{"a"};
    REQUIRE_THROWS_WITH(load_textcls(words, Tokenizer::words, 8, 0.0, nullptr, &other),
                        Contains("line 1") && Contains("given labels"));
  }
}

TEST_CASE("datasets: LongLines::truncate keeps a long line's first max_len tokens", "[datasets]") {
  TempDir dir;
  // Lines of 5, 1, 7, 4 and 2 characters; max_len 4; the last line validates (val_frac 0.2).
  const std::string path = dir.write("long.tsv", "a\tabcdq\nb\tx\na\tgfedcba\nb\twxyz\nb\tez\n");
  const TextClsData data = load_textcls(path, Tokenizer::chars, 4, 0.2, nullptr, nullptr,
                                        LongLines::truncate);
  REQUIRE(data.truncated == 2);
  // The vocabulary holds the tokens kept, in order of first appearance: "q", only ever in a cut
  // tail, is not in it.
  REQUIRE(data.vocab.tokens ==
          std::vector<std::string>{"<pad>", "<unk>", "a", "b", "c", "d", "x", "g", "f", "e", "w", "y", "z"});
  REQUIRE(data.train.size() == 4);
  REQUIRE(data.vocab.id("q") == 1);
  REQUIRE(data.train[0].tokens == std::vector<int64_t>{2, 3, 4, 5});      // abcd (q cut)
  REQUIRE(data.train[1].tokens == std::vector<int64_t>{6});               // x
  REQUIRE(data.train[2].tokens == std::vector<int64_t>{7, 8, 9, 5});      // gfed (cba cut)
  REQUIRE(data.train[3].tokens == std::vector<int64_t>{10, 6, 11, 12});   // wxyz: exactly 4, kept
  REQUIRE(data.val[0].tokens == std::vector<int64_t>{9, 12});             // ez
  REQUIRE(truncation_notice(data, 4) == "truncated 2 of 5 lines to 4 tokens");

  // A given vocabulary (a checkpoint's): the same cut, the same ids.
  const TextClsData again = load_textcls(path, Tokenizer::chars, 4, 0.0, &data.vocab, &data.labels,
                                         LongLines::truncate);
  REQUIRE(again.truncated == 2);
  REQUIRE(again.train[2].tokens == data.train[2].tokens);
  REQUIRE(again.train[4].tokens == data.val[0].tokens);
  // Words are cut as tokens, not characters; nothing to cut is a count of 0.
  const std::string words = dir.write("words.tsv", "a\tThe cat, the hat.\nb\tno\n");
  const TextClsData w = load_textcls(words, Tokenizer::words, 3, 0.0, nullptr, nullptr, LongLines::truncate);
  REQUIRE(w.vocab.tokens == std::vector<std::string>{"<pad>", "<unk>", "the", "cat", ",", "no"});
  REQUIRE(w.train[0].tokens == std::vector<int64_t>{2, 3, 4});
  REQUIRE(load_textcls(words, Tokenizer::words, 6, 0.0, nullptr, nullptr, LongLines::truncate).truncated == 0);
}

TEST_CASE("datasets: truncation_notice groups thousands", "[datasets]") {
  TextClsData data;
  data.train.resize(1100);
  data.val.resize(104);
  data.truncated = 12;
  REQUIRE(truncation_notice(data, 256) == "truncated 12 of 1,204 lines to 256 tokens");
  data.truncated = 1000;
  REQUIRE(truncation_notice(data, 4096) == "truncated 1,000 of 1,204 lines to 4,096 tokens");
  data.train.resize(1);
  data.val.clear();
  data.truncated = 0;
  REQUIRE(truncation_notice(data, 16) == "truncated 0 of 1 line to 16 tokens");
}

TEST_CASE("datasets: longest_textcls_text counts tokens as load_textcls reads them", "[datasets]") {
  TempDir dir;
  // Physical line numbers (the blank line 2 counts); the first of two longest lines wins.
  const std::string path = dir.write("texts.tsv", "a\tone two\n\nb\tthree, four five\r\na\tsix seven eight nine\n");
  REQUIRE(longest_textcls_text(path, Tokenizer::words).tokens == 4);  // "three" "," "four" "five"
  REQUIRE(longest_textcls_text(path, Tokenizer::words).line == 3);
  REQUIRE(longest_textcls_text(path, Tokenizer::whitespace).tokens == 4);
  REQUIRE(longest_textcls_text(path, Tokenizer::whitespace).line == 4);
  REQUIRE(longest_textcls_text(path, Tokenizer::chars).tokens == 20);  // "six seven eight nine"
  // "é" is one character of two bytes.
  const std::string accented = dir.write("accented.tsv", "a\t\xC3\xA9t\xC3\xA9\n");
  REQUIRE(longest_textcls_text(accented, Tokenizer::chars).tokens == 3);
  // A malformed file is the error load_textcls gives.
  REQUIRE_THROWS_WITH(longest_textcls_text(dir.write("bad.tsv", "a\tx\nno tab\n"), Tokenizer::chars),
                      Contains("load_textcls") && Contains("line 2") && Contains("no tab"));
  REQUIRE_THROWS_WITH(longest_textcls_text(dir.write("empty.tsv", ""), Tokenizer::chars), Contains("empty"));
}

TEST_CASE("datasets: malformed TSV files throw tg::Error naming the line", "[datasets]") {
  TempDir dir;
  auto load = [&](const std::string& contents) {
    return load_textcls(dir.write("bad.tsv", contents), Tokenizer::words, 16, 0.0);
  };
  REQUIRE_THROWS_WITH(load_textcls((dir.path / "none.tsv").string(), Tokenizer::chars, 16, 0.0),
                      Contains("cannot open") && Contains("none.tsv"));
  REQUIRE_THROWS_WITH(load(""), Contains("empty"));
  REQUIRE_THROWS_WITH(load("\n\n"), Contains("empty"));
  REQUIRE_THROWS_WITH(load("a\tx\nno tab here\n"), Contains("line 2") && Contains("no tab"));
  REQUIRE_THROWS_WITH(load("a\tx\n\tlabel missing\n"), Contains("line 2") && Contains("label missing"));
  REQUIRE_THROWS_WITH(load("a\tx\nb\t   \n"), Contains("line 2") && Contains("no word tokens"));
  REQUIRE_THROWS_WITH(load("a\tx\nb\t\n"), Contains("line 2"));
  REQUIRE_THROWS_WITH(load_textcls(dir.write("ok.tsv", "a\tx\n"), Tokenizer::chars, 16, 1.0),
                      Contains("val_frac"));
  REQUIRE_THROWS_WITH(load_textcls(dir.write("ok.tsv", "a\tx\n"), Tokenizer::chars, 0, 0.5),
                      Contains("max_len"));
  // One line and val_frac 0.5: floor(0.5) = 0 validation lines, the line trains.
  REQUIRE(load_textcls(dir.write("one.tsv", "a\tx\n"), Tokenizer::chars, 16, 0.5).train.size() == 1);
}

TEST_CASE("datasets: text batches pad with 0 to the longest", "[datasets]") {
  std::vector<TextExample> examples{{{5, 6}, 1}, {{7}, 0}, {{2, 3, 4}, 2}};
  const TextBatch batch = make_text_batch(examples, {1, 2, 0});
  REQUIRE(batch.tokens.shape() == Shape{3, 3});
  REQUIRE(batch.tokens.dtype() == DType::i64);
  REQUIRE(batch.tokens.to_host_i64() == std::vector<int64_t>{7, 0, 0, 2, 3, 4, 5, 6, 0});
  REQUIRE(batch.lengths == std::vector<int64_t>{1, 3, 2});
  REQUIRE(batch.labels.to_host_i64() == std::vector<int64_t>{0, 2, 1});
  REQUIRE(batch.labels.shape() == Shape{3});
  REQUIRE(make_text_batch(examples, {1}).tokens.shape() == Shape{1, 1});
  REQUIRE_THROWS_WITH(make_text_batch(examples, {3}), Contains("out of range"));
  REQUIRE_THROWS_AS(make_text_batch(examples, {}), tg::Error);
}

// ---- character language model -------------------------------------------------------------------

TEST_CASE("datasets: character LM text, examples and batches", "[datasets]") {
  TempDir dir;
  // 10 code points, "é" is two bytes; val_frac 0.2: the last 2 characters validate.
  const std::string path = dir.write("lm.txt", "abcab\xC3\xA9" "abcz");
  const CharLMData data = load_charlm(path, 0.2);
  REQUIRE(data.vocab.tokens == std::vector<std::string>{"<pad>", "<unk>", "a", "b", "c", "\xC3\xA9"});
  REQUIRE(data.train == std::vector<CharId>{2, 3, 4, 2, 3, 5, 2, 3});
  REQUIRE(data.val == std::vector<CharId>{4, 1});  // "z" is not in the training split
  const CharLMData given = load_charlm(path, 0.0, &data.vocab);
  REQUIRE(given.train.size() == 10);
  REQUIRE(given.train.back() == 1);

  // 8 tokens, context 3: examples [0, 4) and [3, 7); [6, 10) does not fit.
  REQUIRE(charlm_examples(data.train, 3) == 2);
  REQUIRE(charlm_examples(data.train, 7) == 1);
  REQUIRE(charlm_examples(data.train, 8) == 0);
  REQUIRE(charlm_examples({}, 3) == 0);
  const auto [inputs, targets] = make_charlm_batch(data.train, 3, {1, 0});
  REQUIRE(inputs.shape() == Shape{2, 3});
  REQUIRE(inputs.to_host_i64() == std::vector<int64_t>{2, 3, 5, 2, 3, 4});
  REQUIRE(targets.to_host_i64() == std::vector<int64_t>{3, 5, 2, 3, 4, 2});
  REQUIRE_THROWS_WITH(make_charlm_batch(data.train, 3, {2}), Contains("out of range"));
  REQUIRE_THROWS_AS(charlm_examples(data.train, 0), tg::Error);

  REQUIRE_THROWS_WITH(load_charlm((dir.path / "gone.txt").string(), 0.1), Contains("cannot open"));
  REQUIRE_THROWS_WITH(load_charlm(dir.write("empty.txt", ""), 0.1), Contains("empty"));
  REQUIRE_THROWS_WITH(load_charlm(path, 1.5), Contains("val_frac"));
}

TEST_CASE("datasets: a character LM corpus is held once, 4 bytes a character", "[datasets]") {
  // 8 characters in 11 bytes: a, b, c, space, e-acute (2 bytes), the euro sign (3 bytes), a lone
  // invalid byte (its own character) and a newline; 100000 of them.
  std::string text;
  for (int i = 0; i < 100000; ++i) text += "abc \xC3\xA9\xE2\x82\xAC\xFF\n";
  TempDir dir;
  const CharLMData data = load_charlm(dir.write("big.txt", text), 0.1);
  REQUIRE(data.train.size() == 720000);
  REQUIRE(data.val.size() == 80000);
  REQUIRE(data.vocab.size() == 2 + 8);
  // One 4-byte id per character and nothing more: 3.2 MB for the 1.1 MB file (8-byte ids in
  // vectors grown by doubling would hold 6.4 to 12.8 MB).
  REQUIRE(data.corpus_bytes() == 4 * 800000);
  REQUIRE(data.corpus_bytes() <= 4 * static_cast<int64_t>(text.size()));
  // The ids are those of the small file's rule: the first 8 characters are ids 2 .. 9 in order.
  REQUIRE(std::vector<CharId>(data.train.begin(), data.train.begin() + 9) ==
          std::vector<CharId>{2, 3, 4, 5, 6, 7, 8, 9, 2});
}

// ---- batch order --------------------------------------------------------------------------------

TEST_CASE("datasets: epoch batches", "[datasets]") {
  SECTION("without shuffling: file order, the partial batch dropped") {
    const auto batches = epoch_batches(10, 3, false, 0, 0);
    REQUIRE(batches == std::vector<std::vector<int64_t>>{{0, 1, 2}, {3, 4, 5}, {6, 7, 8}});
    REQUIRE(epoch_batches(2, 3, false, 0, 0).empty());
    REQUIRE(epoch_batches(0, 3, true, 0, 0).empty());
    REQUIRE(epoch_batches(6, 3, false, 0, 0).size() == 2);
  }
  SECTION("with shuffling: a deterministic permutation that changes with the epoch and seed") {
    auto flat = [](const std::vector<std::vector<int64_t>>& batches) {
      std::vector<int64_t> all;
      for (const auto& b : batches) all.insert(all.end(), b.begin(), b.end());
      return all;
    };
    const auto epoch0 = flat(epoch_batches(100, 10, true, 42, 0));
    std::vector<int64_t> sorted = epoch0;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> identity(100);
    for (int64_t i = 0; i < 100; ++i) identity[i] = i;
    REQUIRE(sorted == identity);
    REQUIRE(epoch0 != identity);
    REQUIRE(flat(epoch_batches(100, 10, true, 42, 0)) == epoch0);
    REQUIRE(flat(epoch_batches(100, 10, true, 42, 1)) != epoch0);
    REQUIRE(flat(epoch_batches(100, 10, true, 43, 0)) != epoch0);
    // The dropped tail is random too: 7 batches of 14 leave 2 examples out.
    const auto partial = flat(epoch_batches(100, 14, true, 42, 0));
    REQUIRE(partial.size() == 98);
    REQUIRE(std::set<int64_t>(partial.begin(), partial.end()).size() == 98);
    // Every position takes many values over epochs (no fixed points from a broken loop).
    std::set<int64_t> firsts;
    for (int64_t epoch = 0; epoch < 50; ++epoch) firsts.insert(epoch_batches(100, 10, true, 7, epoch)[0][0]);
    REQUIRE(firsts.size() > 25);
  }
  SECTION("bad arguments") {
    REQUIRE_THROWS_WITH(epoch_batches(10, 0, false, 0, 0), Contains("batch"));
    REQUIRE_THROWS_AS(epoch_batches(-1, 2, false, 0, 0), tg::Error);
  }
}

// ---- the real files under data/ -----------------------------------------------------------------

TEST_CASE("datasets: the files in data/ load", "[datasets]") {
  SECTION("sunspots.csv") {
    const TimeSeriesData data = load_timeseries(data_file("sunspots.csv"), spec(32, 1, 0.1, true, "SUNACTIVITY"));
    REQUIRE(data.columns == std::vector<std::string>{"YEAR", "SUNACTIVITY"});
    REQUIRE(data.target_column == 1);
    // 309 years, T = 32, P = 1: 277 windows, floor(27.7) = 27 validate.
    REQUIRE(data.train_x.shape() == Shape{250, 32, 2});
    REQUIRE(data.val_x.shape() == Shape{27, 32, 2});
    for (const double v : data.train_y.to_host_f64()) REQUIRE(std::isfinite(v));
  }
  SECTION("fortunes.tsv") {
    const TextClsData data = load_textcls(data_file("fortunes.tsv"), Tokenizer::chars, 300, 0.1);
    REQUIRE(data.labels.size() == 4);
    REQUIRE(data.train.size() + data.val.size() == 2528);
    REQUIRE(data.val.size() == 252);
    std::set<int64_t> val_labels;
    for (const auto& example : data.val) val_labels.insert(example.label);
    REQUIRE(val_labels.size() == 4);
    // Vocabularies of the training split with <pad> and <unk>, and the longest line, as a
    // separate Python implementation of each rule counts them: whitespace 10,991 + 2 (line of
    // 58), word 7,543 + 2 (123).
    const TextClsData raw = load_textcls(data_file("fortunes.tsv"), Tokenizer::whitespace, 58, 0.1);
    REQUIRE(raw.vocab.size() == 10993);
    REQUIRE_THROWS_WITH(load_textcls(data_file("fortunes.tsv"), Tokenizer::whitespace, 57, 0.1),
                        Contains("has 58 whitespace tokens"));
    const TextClsData words = load_textcls(data_file("fortunes.tsv"), Tokenizer::words, 123, 0.1);
    REQUIRE(words.vocab.size() == 7545);
    REQUIRE_THROWS_WITH(load_textcls(data_file("fortunes.tsv"), Tokenizer::words, 122, 0.1),
                        Contains("has 123 word tokens"));
    // What --max-len defaults to: the same longest lines (chars: 300, as load_textcls above
    // needed), the first of them.
    REQUIRE(longest_textcls_text(data_file("fortunes.tsv"), Tokenizer::chars).tokens == 300);
    REQUIRE(longest_textcls_text(data_file("fortunes.tsv"), Tokenizer::chars).line == 548);
    REQUIRE(longest_textcls_text(data_file("fortunes.tsv"), Tokenizer::whitespace).tokens == 58);
    REQUIRE(longest_textcls_text(data_file("fortunes.tsv"), Tokenizer::words).tokens == 123);
    REQUIRE_THROWS_WITH(load_textcls(data_file("fortunes.tsv"), Tokenizer::chars, 299, 0.1),
                        Contains("has 300 char tokens"));
  }
  SECTION("corpus.txt") {
    const CharLMData data = load_charlm(data_file("corpus.txt"), 0.1);
    REQUIRE(data.train.size() + data.val.size() > 200000);
    REQUIRE(data.vocab.size() > 60);
    REQUIRE(data.vocab.size() < 200);
    REQUIRE(charlm_examples(data.train, 128) > 1000);
  }
}
