// `tapegrad analyze heads` and `tapegrad plot attention --summary` end to end: a charlm and a
// textcls checkpoint, one row a head, metrics in their ranges, and bad input in one line.
#include <cmath>

#include "tests/cli/cli_support.h"

using namespace tg::testing;

namespace {

const std::string kTiny = " --dim 8 --heads 2 --batch 4 --threads 1 --dropout 0 --seed 5";

std::string small_tsv() {
  std::string tsv;
  const char* texts[] = {"the cat sat", "a dog ran far", "cats and dogs", "the bird flew", "fish swim deep"};
  for (int i = 0; i < 20; ++i) tsv += std::string(i % 2 ? "pets" : "wild") + "\t" + texts[i % 5] + "\n";
  return tsv;
}

// Every head's metrics lie where they must: entropy in [0, uniform's], fractions in [0, 1].
void require_sane(const nlohmann::json& analysis, size_t layers, size_t heads) {
  REQUIRE(analysis["layers"].size() == layers);
  for (const auto& layer : analysis["layers"]) {
    REQUIRE(layer["heads"].size() == heads);
    for (const auto& head : layer["heads"]) {
      CHECK(head["entropy"].get<double>() >= 0);
      CHECK(head["entropy"].get<double>() <= head["uniform_entropy"].get<double>() + 1e-6);
      CHECK(head["distance"].get<double>() >= 0);
      for (const char* fraction : {"previous", "same", "first"}) {
        CHECK(head[fraction].get<double>() >= 0);
        CHECK(head[fraction].get<double>() <= 1 + 1e-6);
      }
    }
  }
}

}  // namespace

TEST_CASE("analyze heads measures every head of a charlm and a textcls checkpoint", "[cli][analyze]") {
  TempDir dir;
  write_bytes(dir.file("text.txt"), small_text());
  write_bytes(dir.file("texts.tsv"), small_tsv());
  REQUIRE(run_cli("train --task charlm --context 8 --layers 2 --steps 3 --data " + dir.file("text.txt") +
                  " --save " + dir.file("lm.st") + kTiny, dir).exit_code == 0);
  REQUIRE(run_cli("train --task textcls --tokenizer word --layers 0 --steps 3 --data " + dir.file("texts.tsv") +
                  " --save " + dir.file("cls.st") + kTiny, dir).exit_code == 0);

  const CliResult lm = run_cli("analyze heads --json --samples 5 --load " + dir.file("lm.st") + " --data " + dir.file("text.txt"), dir);
  INFO(lm.err);
  REQUIRE(lm.exit_code == 0);
  const auto lm_json = nlohmann::json::parse(lm.out);
  REQUIRE(lm_json["sequences"] == 5);
  REQUIRE(lm_json["queries"] == 5 * 8);
  REQUIRE(lm_json["causal"] == true);
  require_sane(lm_json, 2, 2);
  // causal: query 0 sees only itself, so its first-token weight is 1 and the mean is above 1/8
  CHECK(lm_json["layers"][0]["heads"][0]["first"].get<double>() > 1.0 / 8);

  const CliResult one = run_cli("analyze heads --json --samples 5 --layer 1 --load " + dir.file("lm.st") + " --data " + dir.file("text.txt"), dir);
  REQUIRE(one.exit_code == 0);
  const auto one_json = nlohmann::json::parse(one.out);
  REQUIRE(one_json["layers"].size() == 1);
  REQUIRE(one_json["layers"][0]["layer"] == 1);
  REQUIRE(one_json["layers"][0] == lm_json["layers"][1]);

  const CliResult cls = run_cli("analyze heads --json --load " + dir.file("cls.st") + " --data " + dir.file("texts.tsv"), dir);
  INFO(cls.err);
  REQUIRE(cls.exit_code == 0);
  const auto cls_json = nlohmann::json::parse(cls.out);
  REQUIRE(cls_json["sequences"] == 20);  // --samples 64 of 20 examples: all of them
  // only real tokens are queries: 4 x "the cat sat" (3) + "a dog ran far" (4) + 3 + 3 + 3
  REQUIRE(cls_json["queries"] == 4 * (3 + 4 + 3 + 3 + 3));
  require_sane(cls_json, 1, 2);

  // The table: a header and one row a head.
  const CliResult table = run_cli("analyze heads --samples 3 --load " + dir.file("lm.st") + " --data " + dir.file("text.txt"), dir);
  REQUIRE(table.exit_code == 0);
  REQUIRE(lines_of(table.out).size() == 2 + 2 * 2);
  REQUIRE_THAT(table.out, Catch::Contains("entropy") && Catch::Contains("previous"));

  const CliResult plotted = run_cli("plot attention --summary --samples 4 --load " + dir.file("lm.st") + " --data " +
                                    dir.file("text.txt") + " --out " + dir.file("heads.png"), dir);
  INFO(plotted.err);
  REQUIRE(plotted.exit_code == 0);
  REQUIRE(read_bytes(dir.file("heads.png")).substr(1, 3) == "PNG");

  require_one_line_error(run_cli("analyze heads --layer 2 --load " + dir.file("lm.st") + " --data " + dir.file("text.txt"), dir),
                         "--layer 2");
  require_one_line_error(run_cli("analyze heads --load " + dir.file("lm.st"), dir), "--load and --data are required");
  require_one_line_error(run_cli("analyze tails", dir), "unknown analysis 'tails'");
  require_one_line_error(run_cli("plot attention --summary --load " + dir.file("lm.st") + " --out " + dir.file("x.png"), dir),
                         "--summary needs --load, --data and --out");
}

TEST_CASE("analyze heads refuses a timeseries checkpoint in one line", "[cli][analyze]") {
  TempDir dir;
  write_bytes(dir.file("series.csv"), small_csv());
  REQUIRE(run_cli("train --task timeseries --window 4 --steps 2 --data " + dir.file("series.csv") +
                  " --save " + dir.file("ts.st") + kTiny, dir).exit_code == 0);
  require_one_line_error(run_cli("analyze heads --load " + dir.file("ts.st") + " --data " + dir.file("series.csv"), dir),
                         "textcls or charlm");
}

TEST_CASE("the top-level help lists every command and plot attention; --version prints the version", "[cli][analyze]") {
  TempDir dir;
  const CliResult help = run_cli("--help", dir);
  REQUIRE(help.exit_code == 0);
  for (const char* name : {"train", "eval", "sample", "plot", "analyze", "bench", "gradcheck", "info", "attention"}) {
    CHECK_THAT(help.out, Catch::Contains(name));
  }
  const CliResult version = run_cli("--version", dir);
  REQUIRE(version.exit_code == 0);
  REQUIRE(version.out.rfind("tapegrad ", 0) == 0);
  REQUIRE(lines_of(version.out).size() == 1);
}
