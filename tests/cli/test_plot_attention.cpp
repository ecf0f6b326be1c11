// `tapegrad plot attention` on every task and every kind of attention: --html writes one page of
// every layer and head (its data block read back here: labels, shapes, rows that are
// distributions), --out draws the timeseries model and the attentions that never form weights
// (Performer, Linformer, Reformer: their implied weights, and the page says so), and the flags
// that do not fit the checkpoint are one line and exit code 2.
#include <filesystem>

#include "tests/cli/cli_support.h"

using namespace tg::testing;

namespace {

const std::string kPlotTiny = " --dim 8 --heads 2 --batch 4 --threads 1 --dropout 0 --seed 3";

// Trains a tiny model with `arguments` into dir/name and returns its path.
std::string trained_model(const TempDir& dir, const std::string& arguments,
                          const std::string& name) {
  const std::string path = dir.file(name);
  const CliResult result =
      run_cli("train " + arguments + " --steps 3 --save " + path + kPlotTiny, dir);
  INFO(result.err);
  REQUIRE(result.exit_code == 0);
  return path;
}

// The data block of the page at `path`, parsed.
nlohmann::json page_data(const std::string& path) {
  const std::string html = read_bytes(path);
  const std::string open = "<script type=\"application/json\" id=\"tg-data\">";
  const size_t start = html.find(open);
  REQUIRE(start != std::string::npos);
  const size_t end = html.find("</script>", start);
  return nlohmann::json::parse(html.substr(start + open.size(), end - start - open.size()));
}

// Runs `arguments`, which must succeed, and returns the page it wrote to `html`.
nlohmann::json plotted_page(const std::string& arguments, const std::string& html,
                            const TempDir& dir) {
  const CliResult result = run_cli("plot attention " + arguments + " --html " + html, dir);
  INFO(result.err);
  REQUIRE(result.exit_code == 0);
  REQUIRE_THAT(result.out, Catch::Contains("wrote " + html));
  return page_data(html);
}

// Every row of every head a distribution (to the page's 4 digits); above the diagonal 0 when
// causal.
void require_rows_are_distributions(const nlohmann::json& data, bool causal) {
  for (const auto& layer : data.at("weights")) {
    for (const auto& head : layer) {
      for (size_t q = 0; q < head.size(); ++q) {
        double total = 0;
        for (size_t k = 0; k < head[q].size(); ++k) {
          const double w = head[q][k];
          REQUIRE(w >= 0);
          if (causal && k > q) REQUIRE(w == 0);
          total += w;
        }
        REQUIRE(total == Approx(1).margin(1e-3));
      }
    }
  }
}

}  // namespace

TEST_CASE("plot attention --html: textcls, charlm and timeseries pages of every layer and head",
          "[cli][plot-attention]") {
  TempDir dir;
  write_bytes(dir.file("text.txt"), small_text());
  write_bytes(dir.file("series.csv"), small_csv());
  std::string tsv;
  for (int i = 0; i < 20; ++i) tsv += std::string(i % 2 ? "pets" : "wild") + "\tthe cat sat\n";
  write_bytes(dir.file("texts.tsv"), tsv);
  const std::string lm = trained_model(
      dir, "--task charlm --context 8 --layers 2 --data " + dir.file("text.txt"), "lm.st");
  // (--max-len: the texts plotted are longer than the 3 words of the training lines.)
  const std::string cls = trained_model(
      dir, "--task textcls --tokenizer word --layers 3 --max-len 16 --data " + dir.file("texts.tsv"),
      "cls.st");
  const std::string ts = trained_model(
      dir, "--task timeseries --window 6 --layers 1 --data " + dir.file("series.csv"), "ts.st");

  const nlohmann::json chars =
      plotted_page("--load " + lm + " --text 'ab c' --layer 1", dir.file("lm.html"), dir);
  CHECK(chars.at("layers") == 2);
  CHECK(chars.at("heads") == 2);
  CHECK(chars.at("firstLayer") == 1);
  CHECK(chars.at("queries") == std::vector<std::string>{"a", "b", "\u2423", "c"});
  CHECK(chars.at("keys") == chars.at("queries"));
  require_rows_are_distributions(chars, true);

  const nlohmann::json words =
      plotted_page("--load " + cls + " --text 'The cat, sat'", dir.file("cls.html"), dir);
  CHECK(words.at("layers") == 3);
  CHECK(words.at("queries") == std::vector<std::string>{"the", "cat", ",", "sat"});
  require_rows_are_distributions(words, false);

  // The tutorial's timeseries model (one attention) on the last window, and on window 0.
  const nlohmann::json series =
      plotted_page("--load " + ts + " --data " + dir.file("series.csv"), dir.file("ts.html"), dir);
  CHECK(series.at("layers") == 1);
  CHECK(series.at("queries") ==
        std::vector<std::string>{"t-5", "t-4", "t-3", "t-2", "t-1", "t-0"});
  require_rows_are_distributions(series, false);
  CHECK_THAT(read_bytes(dir.file("ts.html")), Catch::Contains("Window 33 of"));  // 40 - 6 - 1
  const std::string csv = " --data " + dir.file("series.csv");
  const nlohmann::json first =
      plotted_page("--load " + ts + csv + " --index 0", dir.file("t0.html"), dir);
  CHECK(first.at("weights") != series.at("weights"));
  // --out and --html at once: both files.
  const CliResult both = run_cli("plot attention --load " + ts + csv + " --out " +
                                     dir.file("ts.png") + " --html " + dir.file("b.html"), dir);
  INFO(both.err);
  REQUIRE(both.exit_code == 0);
  CHECK(std::filesystem::exists(dir.file("ts.png")));
  CHECK(page_data(dir.file("b.html")) == series);
}

TEST_CASE("plot attention draws Performer, Linformer and Reformer: their implied weights",
          "[cli][plot-attention]") {
  TempDir dir;
  write_bytes(dir.file("text.txt"), small_text());
  write_bytes(dir.file("series.csv"), small_csv());
  const std::string text = " --data " + dir.file("text.txt");
  const std::string performer =
      trained_model(dir, "--task charlm --context 8 --attention performer:8" + text, "p.st");
  const std::string reformer =
      trained_model(dir, "--task charlm --context 8 --attention reformer:2,2" + text, "r.st");
  const std::string linformer = trained_model(
      dir, "--task timeseries --window 6 --max-len 8 --attention linformer:4 --data " +
               dir.file("series.csv"), "l.st");
  for (const auto& [load, note] : {std::pair{performer, "Performer never forms these weights"},
                                   std::pair{reformer, "Reformer never forms these weights"}}) {
    const std::string input = "--load " + load + " --text 'the qu'";
    const nlohmann::json data = plotted_page(input, dir.file("page.html"), dir);
    CHECK(data.at("signed") == false);
    CHECK_THAT(data.at("title").get<std::string>(), Catch::Contains("implied weights"));
    CHECK_THAT(read_bytes(dir.file("page.html")), Catch::Contains(note));
    require_rows_are_distributions(data, true);
    const CliResult png = run_cli("plot attention " + input + " --out " + dir.file("p.png"), dir);
    INFO(png.err);
    REQUIRE(png.exit_code == 0);
    std::filesystem::remove(dir.file("p.png"));
  }
  const std::string series = "--load " + linformer + " --data " + dir.file("series.csv");
  const nlohmann::json data = plotted_page(series, dir.file("l.html"), dir);
  CHECK(data.at("signed") == true);
  CHECK_THAT(read_bytes(dir.file("l.html")),
             Catch::Contains("Linformer never forms these weights: its softmax runs over 4"));
  REQUIRE(run_cli("plot attention " + series + " --out " + dir.file("l.png"), dir).exit_code == 0);
}

TEST_CASE("plot attention: flags that do not fit the checkpoint, and the files, are one line",
          "[cli][plot-attention]") {
  TempDir dir;
  write_bytes(dir.file("text.txt"), small_text());
  write_bytes(dir.file("series.csv"), small_csv());
  const std::string lm =
      trained_model(dir, "--task charlm --context 8 --data " + dir.file("text.txt"), "lm.st");
  const std::string ts =
      trained_model(dir, "--task timeseries --window 6 --data " + dir.file("series.csv"), "ts.st");
  const std::string html = " --html " + dir.file("a.html");
  const std::string csv = " --data " + dir.file("series.csv");
  require_one_line_error(run_cli("plot attention --summary --load " + lm + " --data " +
                                     dir.file("text.txt") + html, dir),
                         "--html does not apply to --summary");
  require_one_line_error(run_cli("plot attention --load " + ts + " --text abc" + html, dir),
                         "--text does not apply to a timeseries checkpoint");
  require_one_line_error(run_cli("plot attention --load " + ts + html, dir),
                         "a timeseries checkpoint needs --data");
  require_one_line_error(run_cli("plot attention --load " + ts + csv + " --index 34" + html, dir),
                         "--index 34 is past the 34 windows of");
  const std::string text = "plot attention --load " + lm + " --text ab";
  require_one_line_error(run_cli(text + " --index 1" + html, dir),
                         "--index does not apply to a plot of one --text");
  require_one_line_error(run_cli("plot attention --load " + lm + " --text ab", dir),
                         "--out or --html");
  require_one_line_error(run_cli(text + " --layer 1" + html, dir),
                         "--layer 1 is outside the model's 1 attention layer");
  require_one_line_error(run_cli("plot attention --load " + lm + " --text ab --html " + lm, dir),
                         "--html");
  require_one_line_error(run_cli("plot attention --load " + lm + " --text ab --out " +
                                     dir.file("a.x") + " --html " + dir.file("a.x"), dir),
                         "--html");
  REQUIRE_FALSE(std::filesystem::exists(dir.file("a.html")));
  REQUIRE_FALSE(std::filesystem::exists(dir.file("a.x")));
}
