// The command line's PyTorch-interop options end to end: --schedule constant, --inputs,
// --checkpoint-activations on the tutorial-form models, --layers 0 for timeseries, help text
// without float noise, and gradcheck's summary for a single check.
#include "tapegrad/io/safetensors.h"
#include "tests/cli/cli_support.h"

using namespace tg::testing;

namespace {

const std::string kTiny = " --dim 8 --heads 2 --batch 4 --threads 1 --dropout 0 --seed 5";

// Column `column` (0-based) of every row of a CSV log.
std::vector<std::string> log_column(const std::string& path, int column) {
  std::vector<std::string> cells;
  const std::vector<std::string> rows = lines_of(read_bytes(path));
  for (size_t i = 1; i < rows.size(); ++i) {
    std::stringstream row(rows[i]);
    std::string cell;
    for (int c = 0; c <= column; ++c) std::getline(row, cell, ',');
    cells.push_back(cell);
  }
  return cells;
}

}  // namespace

TEST_CASE("train --schedule constant keeps --lr at every step and is stored in the checkpoint", "[cli][interop]") {
  TempDir dir;
  write_bytes(dir.file("series.csv"), small_csv());
  const CliResult trained = run_cli("train --task timeseries --window 4 --steps 6 --lr 0.002 --schedule constant --data " +
                                    dir.file("series.csv") + " --log " + dir.file("log.csv") + " --save " + dir.file("ts.st") + kTiny, dir);
  INFO(trained.err);
  REQUIRE(trained.exit_code == 0);
  for (const std::string& lr : log_column(dir.file("log.csv"), 3)) REQUIRE(lr == "0.002");
  const auto config = nlohmann::json::parse(tg::load_safetensors(dir.file("ts.st")).metadata.at("config"));
  REQUIRE(config["schedule"] == "constant");
  require_one_line_error(run_cli("train --resume " + dir.file("ts.st") + " --steps 8 --schedule cosine", dir),
                         "--schedule \"cosine\" conflicts with the checkpoint's schedule \"constant\"");
  // with --warmup: linear up to --lr, then flat
  const CliResult warm = run_cli("train --task timeseries --window 4 --steps 6 --lr 0.002 --warmup 2 --schedule constant --data " +
                                 dir.file("series.csv") + " --log " + dir.file("warm.csv") + kTiny, dir);
  REQUIRE(warm.exit_code == 0);
  REQUIRE(log_column(dir.file("warm.csv"), 3) == std::vector<std::string>{"0.001", "0.002", "0.002", "0.002", "0.002", "0.002"});
  require_one_line_error(run_cli("train --task timeseries --schedule step --data " + dir.file("series.csv"), dir),
                         "--schedule must be cosine or constant");
}

TEST_CASE("train --inputs picks the columns the model reads, and eval reloads them", "[cli][interop]") {
  TempDir dir;
  write_bytes(dir.file("series.csv"), small_csv());  // columns t,value
  const CliResult trained = run_cli("train --task timeseries --window 4 --steps 4 --inputs value --data " +
                                    dir.file("series.csv") + " --save " + dir.file("ts.st") + kTiny, dir);
  INFO(trained.err);
  REQUIRE(trained.exit_code == 0);
  // input_proj reads one column: weight [dim, 1]
  const tg::SafetensorsFile file = tg::load_safetensors(dir.file("ts.st"));
  REQUIRE(file.tensors[0].first == "input_proj.weight");
  REQUIRE(file.tensors[0].second.shape() == tg::Shape{8, 1});
  REQUIRE(nlohmann::json::parse(file.metadata.at("config"))["inputs"] == nlohmann::json::array({"value"}));
  const CliResult evaluated = run_cli("eval --json --load " + dir.file("ts.st") + " --data " + dir.file("series.csv"), dir);
  INFO(evaluated.err);
  REQUIRE(evaluated.exit_code == 0);
  REQUIRE(nlohmann::json::parse(evaluated.out)["examples"] == 36);
  require_one_line_error(run_cli("train --task timeseries --inputs value,year --data " + dir.file("series.csv") + kTiny, dir),
                         "input column 'year' not found (columns: 't', 'value')");
  require_one_line_error(run_cli("train --task timeseries --inputs value, --data " + dir.file("series.csv") + kTiny, dir),
                         "empty name");
  require_one_line_error(run_cli("train --resume " + dir.file("ts.st") + " --steps 6 --inputs t,value", dir),
                         "conflicts with the checkpoint's inputs");
}

TEST_CASE("train --checkpoint-activations on the tutorial-form models: same loss, another peak", "[cli][interop][checkpoint]") {
  TempDir dir;
  write_bytes(dir.file("series.csv"), small_csv());
  write_bytes(dir.file("text.txt"), small_text());
  std::string texts;
  for (int i = 0; i < 24; ++i) texts += std::string(i % 2 ? "a" : "b") + "\tthe quick brown fox jumps over the lazy dog\n";
  write_bytes(dir.file("texts.tsv"), texts);
  const std::string model = " --dim 32 --heads 4 --batch 8 --threads 1 --dropout 0.1 --seed 5 --steps 3 --json";
  const std::pair<std::string, std::string> runs[] = {
      {"timeseries --layers 1 --window 16", "series.csv"},
      {"textcls --layers 0", "texts.tsv"},
  };
  for (const auto& [task, data] : runs) {
    const std::string command = "train --task " + task + " --data " + dir.file(data) + model;
    const CliResult plain = run_cli(command, dir);
    const CliResult checkpointed = run_cli(command + " --checkpoint-activations", dir);
    INFO(task << "\n" << plain.err << checkpointed.err);
    REQUIRE(plain.exit_code == 0);
    REQUIRE(checkpointed.exit_code == 0);
    const auto a = nlohmann::json::parse(lines_of(plain.out).back());
    const auto b = nlohmann::json::parse(lines_of(checkpointed.out).back());
    REQUIRE(b["train_loss"] == a["train_loss"]);
    REQUIRE(b["val_loss"] == a["val_loss"]);
    // The flag now acts on the single attention block (before, it had no layer to act on and the
    // peak was the same); tests/nn/test_models_checkpoint.cpp says by how much, and why.
    REQUIRE(b["peak_bytes"].get<int64_t>() != a["peak_bytes"].get<int64_t>());
  }
}

TEST_CASE("timeseries --layers 0 says what --layers means; --help explains it per task", "[cli][interop]") {
  TempDir dir;
  write_bytes(dir.file("series.csv"), small_csv());
  require_one_line_error(run_cli("train --task timeseries --layers 0 --data " + dir.file("series.csv"), dir),
                         "--layers 0 is not a timeseries model: --layers 1 is the tutorial's");
  const CliResult help = run_cli("train --help", dir);
  REQUIRE(help.exit_code == 0);
  REQUIRE_THAT(help.out, Catch::Contains("timeseries: 1 = the tutorial's model"));
  // Defaults as typed, without binary noise.
  REQUIRE_THAT(help.out, Catch::Contains("(=0.1)") && Catch::Contains("(=0.001)") && Catch::Contains("(=0.01)"));
  REQUIRE(help.out.find("0000000") == std::string::npos);
}

TEST_CASE("gradcheck's summary says '1 check' for one check", "[cli][interop]") {
  TempDir dir;
  const std::vector<std::string> names = lines_of(run_cli("gradcheck --list", dir).out);
  REQUIRE(!names.empty());
  // a name no other name contains, so that --filter selects it alone
  std::string unique;
  for (const std::string& name : names) {
    const auto contains = [&](const std::string& other) { return other != name && other.find(name) != std::string::npos; };
    if (std::none_of(names.begin(), names.end(), contains)) {
      unique = name;
      break;
    }
  }
  REQUIRE(!unique.empty());
  const CliResult one = run_cli("gradcheck --filter '" + unique + "'", dir);
  INFO(one.out);
  REQUIRE(one.exit_code == 0);
  REQUIRE_THAT(one.out, Catch::Contains("\n1 check, 1 passed, 0 failed"));
}
