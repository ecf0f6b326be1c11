// A stored training config is read strictly: the right JSON types, values in range.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tapegrad/autograd/error.h"
#include "tapegrad/train/config.h"

using namespace tg::train;

namespace {

nlohmann::json stored_config() {
  TrainConfig config;
  config.task = "charlm";
  config.data = "corpus.txt";
  return to_json(config);
}

}  // namespace

TEST_CASE("config_from_json reads back what to_json wrote", "[config]") {
  TrainConfig config;
  config.task = "timeseries";
  config.data = std::string("dir\xFF/series.csv");  // a path that is not UTF-8
  config.seed = UINT64_MAX;
  config.target = "value";
  config.lr = 3e-3;
  const TrainConfig back = config_from_json(nlohmann::json::parse(to_json(config).dump()));
  REQUIRE(back.data == config.data);
  REQUIRE(back.seed == UINT64_MAX);
  REQUIRE(back.lr == config.lr);
  REQUIRE(to_json(back) == to_json(config));
}

TEST_CASE("config_from_json refuses wrong types and values out of range", "[config]") {
  const auto refused = [](const char* key, const nlohmann::json& value, const std::string& expected) {
    nlohmann::json json = stored_config();
    json[key] = value;
    INFO(key << " = " << value.dump());
    REQUIRE_THROWS_WITH(config_from_json(json), Catch::Contains(expected));
  };
  refused("dim", 3.5, "'dim' must be an integer");
  refused("dim", "64", "'dim' must be an integer");
  refused("dim", 8192ull << 40, "--dim");
  refused("dim", UINT64_MAX, "'dim' must be an integer in int64's range");
  refused("seed", -1, "'seed' must be a non-negative integer");
  refused("max_len", 288230376151711744ll, "--max-len");
  refused("context", INT64_MAX, "--context");
  refused("horizon", INT64_MAX, "--horizon");
  refused("epochs", INT64_MAX, "--epochs");
  refused("threads", 100000, "threads");
  refused("lr", "fast", "'lr' must be a number");
  refused("lr", 1e308 * 10, "--lr");
  refused("shuffle", 1, "'shuffle' must be true or false");
  refused("task", 7, "'task' must be a string");
  refused("data", nlohmann::json::array({300}), "data");
  nlohmann::json missing = stored_config();
  missing.erase("heads");
  REQUIRE_THROWS_WITH(config_from_json(missing), Catch::Contains("'heads' is missing"));
  REQUIRE_THROWS_WITH(config_from_json(nlohmann::json::array()), Catch::Contains("object"));
}

TEST_CASE("config quantization: stored, strict, and none when an older checkpoint lacks it", "[config][quantize]") {
  TrainConfig config;
  config.task = "charlm";
  config.quantization = "static";
  REQUIRE(config_from_json(to_json(config)).quantization == "static");
  nlohmann::json old = stored_config();
  old.erase("quantization");
  REQUIRE(config_from_json(old).quantization == "none");
  nlohmann::json bad = stored_config();
  bad["quantization"] = "int4";
  REQUIRE_THROWS_WITH(config_from_json(bad), Catch::Contains("unknown quantization 'int4' (none, dynamic, static)"));
  bad["quantization"] = 8;
  REQUIRE_THROWS_WITH(config_from_json(bad), Catch::Contains("'quantization' must be a string"));
}

TEST_CASE("config tokenizer: an older checkpoint's word (no tokenizer_version) loads as whitespace",
          "[config]") {
  TrainConfig config;
  config.task = "textcls";
  for (const char* tokenizer : {"char", "word", "whitespace"}) {
    config.tokenizer = tokenizer;
    REQUIRE(to_json(config)["tokenizer_version"] == 2);
    REQUIRE(config_from_json(to_json(config)).tokenizer == tokenizer);
  }
  // Written before "word" split punctuation: the field is absent, and "word" meant whitespace.
  nlohmann::json old = to_json(config);
  old.erase("tokenizer_version");
  old["tokenizer"] = "word";
  REQUIRE(config_from_json(old).tokenizer == "whitespace");
  old["tokenizer"] = "char";
  REQUIRE(config_from_json(old).tokenizer == "char");
  // Re-saved (--resume, quantize), it says what it is.
  old["tokenizer"] = "word";
  const nlohmann::json saved_again = to_json(config_from_json(old));
  REQUIRE(saved_again["tokenizer"] == "whitespace");
  REQUIRE(saved_again["tokenizer_version"] == 2);
  nlohmann::json bad = to_json(config);
  bad["tokenizer_version"] = 3;
  REQUIRE_THROWS_WITH(config_from_json(bad),
                      Catch::Contains("'tokenizer_version' 3 is not one this tapegrad reads (1 or 2)"));
  bad["tokenizer_version"] = "2";
  REQUIRE_THROWS_WITH(config_from_json(bad), Catch::Contains("'tokenizer_version' must be an integer"));
  bad["tokenizer_version"] = 2;
  bad["tokenizer"] = "bpe";
  REQUIRE_THROWS_WITH(config_from_json(bad), Catch::Contains("--tokenizer must be char, word or whitespace"));
}

TEST_CASE("config truncate: stored, strict, and false when an older checkpoint lacks it", "[config]") {
  nlohmann::json json = stored_config();
  json["task"] = "textcls";
  REQUIRE(json["truncate"] == false);
  json["truncate"] = true;
  REQUIRE(config_from_json(json).truncate);
  REQUIRE(to_json(config_from_json(json))["truncate"] == true);
  json.erase("truncate");
  REQUIRE_FALSE(config_from_json(json).truncate);
  json["truncate"] = "yes";
  REQUIRE_THROWS_WITH(config_from_json(json), Catch::Contains("'truncate' must be true or false"));
}

namespace {

// A TSV file in a fresh temporary directory, removed with it.
struct TsvFile {
  std::filesystem::path dir;
  std::string path;
  explicit TsvFile(const std::string& contents) {
    static int counter = 0;
    dir = std::filesystem::temp_directory_path() /
          ("tapegrad_config_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(dir);
    path = (dir / "texts.tsv").string();
    std::ofstream(path, std::ios::binary) << contents;
  }
  ~TsvFile() {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
};

}  // namespace

TEST_CASE("derive_textcls_max_len: the longest line's tokens unless --max-len is typed, capped",
          "[config]") {
  // The longest line is line 3, "w x y z": 7 characters, 4 words (line 2, "a b!", has 4 and 3).
  const TsvFile tsv("x\tone\ny\ta b!\nx\tw x y z\n");
  TrainConfig config;
  config.task = "textcls";
  config.data = tsv.path;
  SECTION("derived, per tokenizer, with the line that says so") {
    REQUIRE(derive_textcls_max_len(config, {}, "texts.tsv") ==
            "max_len 7 (the longest line of texts.tsv, char tokens)");
    REQUIRE(config.max_len == 7);
    config.tokenizer = "word";
    REQUIRE(derive_textcls_max_len(config, {"steps"}, "texts.tsv") ==
            "max_len 4 (the longest line of texts.tsv, word tokens)");
    REQUIRE(config.max_len == 4);
  }
  SECTION("typed, or another task: left as it is") {
    config.max_len = 3;
    REQUIRE(derive_textcls_max_len(config, {"max-len"}, "texts.tsv").empty());
    REQUIRE(config.max_len == 3);
    config.task = "charlm";
    REQUIRE(derive_textcls_max_len(config, {}, "texts.tsv").empty());
    REQUIRE(config.max_len == 3);
  }
  SECTION("past the cap: an error naming both ways out, or the cap with --truncate") {
    const TsvFile longer("x\t" + std::string(TextClsDefaults::max_len_cap + 1, 'a') + "\ny\tb\n");
    config.data = longer.path;
    REQUIRE_THROWS_WITH(derive_textcls_max_len(config, {}, "long.tsv"),
                        Catch::Contains("'long.tsv' line 1 has 4097 char tokens, more than the 4096") &&
                            Catch::Contains("--truncate") && Catch::Contains("--max-len 4097"));
    config.truncate = true;
    REQUIRE(derive_textcls_max_len(config, {}, "long.tsv") ==
            "max_len 4096 (the default's cap; the longest line of long.tsv has 4097 char tokens)");
    REQUIRE(config.max_len == 4096);
    // A wide model's cap is what its positional table may hold: 2^26 / 32768 = 2048 rows.
    config.dim = 32768;
    config.heads = 1;
    REQUIRE(derive_textcls_max_len(config, {}, "long.tsv").rfind("max_len 2048 ", 0) == 0);
    REQUIRE(config.max_len == 2048);
  }
  SECTION("the data's errors are load_textcls's") {
    const TsvFile bad("x\tone\nno tab\n");
    config.data = bad.path;
    REQUIRE_THROWS_WITH(derive_textcls_max_len(config, {}, "bad.tsv"), Catch::Contains("line 2: no tab"));
  }
}

TEST_CASE("apply_task_defaults: charlm's --lr 1e-2 and --dropout 0 unless typed; other tasks as "
          "they were", "[config]") {
  TrainConfig lm;
  lm.task = "charlm";
  apply_task_defaults(lm, {});
  REQUIRE(lm.lr == 1e-2);
  REQUIRE(lm.dropout == 0.0);
  REQUIRE(lm.warmup == 0);
  TrainConfig typed;
  typed.task = "charlm";
  typed.lr = 3e-4;
  typed.dropout = 0.25;
  apply_task_defaults(typed, {"lr", "dropout"});
  REQUIRE(typed.lr == 3e-4);
  REQUIRE(typed.dropout == 0.25);
  for (const char* task : {"textcls", "timeseries", ""}) {  // "": --resume, the checkpoint's
    TrainConfig other;
    other.task = task;
    apply_task_defaults(other, {});
    REQUIRE(other.lr == 1e-3);
    REQUIRE(other.dropout == 0.1);
  }
}

TEST_CASE("check_flags_apply: a given flag outside its scope is one error naming the setting",
          "[config][flags]") {
  const std::vector<FlagScope> table = {{{"window", "horizon"}, false, "--task charlm"},
                                        {{"tokenizer"}, true, "--task textcls"}};
  REQUIRE_NOTHROW(check_flags_apply({"tokenizer", "steps"}, table));  // in scope, or unlisted
  REQUIRE_THROWS_WITH(check_flags_apply({"steps", "horizon"}, table),
                      "--horizon does not apply to --task charlm");
  REQUIRE_NOTHROW(check_flags_apply({}, table));
}

TEST_CASE("train_flag_scopes: each task's flags, attention, --tf32 and --eval-every",
          "[config][flags]") {
  TrainConfig config;
  config.task = "charlm";
  const auto refused = [&](const std::string& flag, const std::string& expected) {
    INFO(flag);
    REQUIRE_THROWS_WITH(check_flags_apply({flag}, train_flag_scopes(config)),
                        Catch::Contains(expected));
  };
  const auto accepted = [&](const std::string& flag) {
    INFO(flag);
    REQUIRE_NOTHROW(check_flags_apply({flag}, train_flag_scopes(config)));
  };
  for (const char* flag : {"window", "horizon", "target", "inputs", "normalize", "tokenizer"}) {
    refused(flag, std::string("--") + flag + " does not apply to --task charlm");
  }
  for (const char* flag : {"context", "attention", "position", "heads", "eval-every"}) {
    accepted(flag);
  }
  refused("tf32", "--tf32 does not apply to --device cpu");
  config.device = "cuda:1";  // only parsed here: no device is needed
  accepted("tf32");
  config.layers = 0;  // an embedding and a head
  for (const char* flag : {"attention", "heads", "dropout", "checkpoint-activations"}) {
    refused(flag, std::string("--") + flag + " does not apply to a model without attention");
  }
  accepted("position");  // sinusoidal: the table is added to the embedding
  config.position = "rope";
  refused("position", "--position does not apply to a model without attention");
  config.val_frac = 0;
  refused("eval-every", "--eval-every does not apply to --val-frac 0 (no validation split)");
  config = TrainConfig();
  config.task = "textcls";
  config.layers = 0;  // the tutorial's model: one attention
  accepted("tokenizer");
  accepted("attention");
  accepted("checkpoint-activations");
  refused("context", "--context does not apply to --task textcls");
  config.task = "timeseries";
  for (const char* flag : {"window", "horizon", "target", "inputs", "normalize"}) accepted(flag);
  refused("tokenizer", "--tokenizer does not apply to --task timeseries");
  refused("truncate", "--truncate does not apply to --task timeseries");
  config.task = "textcls";
  accepted("truncate");
}
