// --attention and --position: strict parsing, one canonical spelling, the combinations refused,
// and their place in the stored config (older checkpoints without them still load).
#include <catch2/catch.hpp>

#include "tapegrad/autograd/error.h"
#include "tapegrad/train/attention_flags.h"
#include "tapegrad/train/config.h"

using namespace tg;
using namespace tg::train;

TEST_CASE("parse_attention reads every kind and format_attention writes it back", "[config][attention]") {
  const nn::AttentionSpec local = parse_attention("local:16");
  REQUIRE(local.kind == nn::AttentionKind::local);
  REQUIRE(local.window == 16);
  const nn::AttentionSpec band = parse_attention("band:8,3");
  REQUIRE(band.kind == nn::AttentionKind::band);
  REQUIRE(band.window == 8);
  REQUIRE(band.dilation == 3);
  REQUIRE(parse_attention("band:8").dilation == 1);
  const nn::AttentionSpec bigbird = parse_attention("bigbird:4,2,1");
  REQUIRE(bigbird.kind == nn::AttentionKind::bigbird);
  REQUIRE((bigbird.window == 4 && bigbird.random_blocks == 2 && bigbird.global_tokens == 1));
  REQUIRE(parse_attention("bigbird:4,0,0").random_blocks == 0);  // local, in bigbird's clothes
  REQUIRE(parse_attention("linformer:32").rank == 32);
  REQUIRE(parse_attention("performer:64").features == 64);
  REQUIRE(parse_attention("full").kind == nn::AttentionKind::full);
  // the layout the fused kernel gets
  REQUIRE(parse_attention("band:8,3").sparsity().kind == SparsityKind::band);
  REQUIRE(parse_attention("linformer:32").sparsity().kind == SparsityKind::full);

  for (const char* text : {"full", "local:16", "band:8,3", "band:8", "bigbird:4,2,1", "linformer:32",
                           "performer:64", "local:1048576"}) {
    INFO(text);
    REQUIRE(format_attention(parse_attention(text)) == text);
  }
  REQUIRE(format_attention(parse_attention("band:8,1")) == "band:8");  // the canonical spelling

  for (const char* text : {"sinusoidal", "rope", "alibi", "none"}) {
    INFO(text);
    REQUIRE(format_position(parse_position(text)) == text);
  }
}

TEST_CASE("parse_attention refuses every malformed text with one error naming the flag", "[config][attention]") {
  const auto refused = [](const std::string& text, const std::string& expected) {
    INFO("--attention " << text);
    REQUIRE_THROWS_WITH(parse_attention(text), Catch::Contains("--attention") && Catch::Contains(expected));
  };
  refused("", "must be full, local:W");
  refused("sparse", "must be full, local:W");
  refused("Local:4", "must be full");
  refused("local", "needs its numbers");
  refused("local:", "is not an integer");
  refused("local:3x", "'3x' is not an integer");
  refused("local: 3", "is not an integer");
  refused("local:+3", "is not an integer");
  refused("local:0", "the window W must be in [1, 1048576], got 0");
  refused("local:-4", "the window W must be in [1");
  refused("local:1048577", "got 1048577");
  refused("local:99999999999999999999", "out of range");
  refused("local:4,2", "expected 1 comma-separated number after the colon, got 2");
  refused("local:4,", "expected 1");
  refused("band:4,0", "the dilation D must be in [1");
  refused("band:4,2,1", "expected 1 to 2 comma-separated numbers");
  refused("band:1048576,2", "W x D must be at most");
  refused("bigbird:4,2", "expected 3 comma-separated numbers");
  refused("bigbird:4,-1,0", "the random blocks R must be in [0");
  refused("bigbird:0,1,1", "the window W");
  refused("linformer:0", "the rank K must be in [1");
  refused("performer:0", "the features M must be in [1");
  refused("performer:1.5", "is not an integer");
  refused("full:3", "full takes no numbers");
  refused("full:", "full takes no numbers");
  REQUIRE_THROWS_WITH(parse_position("Rope"), Catch::Contains("--position must be sinusoidal, rope, alibi or none, got 'Rope'"));
  REQUIRE_THROWS_WITH(parse_position(""), Catch::Contains("--position"));
}

namespace {

TrainConfig config_for(const std::string& task, const std::string& attention, const std::string& position) {
  TrainConfig config;
  config.task = task;
  config.data = "data.txt";
  config.attention = attention;
  config.position = position;
  return config;
}

}  // namespace

TEST_CASE("validate refuses the combinations that cannot work", "[config][attention]") {
  const auto refused = [](TrainConfig config, const std::string& expected) {
    INFO(config.task << " --attention " << config.attention << " --position " << config.position);
    REQUIRE_THROWS_WITH(config.validate(), Catch::Contains(expected));
  };
  refused(config_for("charlm", "linformer:8", "sinusoidal"), "cannot train a charlm");
  config_for("textcls", "linformer:8", "sinusoidal").validate();     // a padding mask is fine
  config_for("timeseries", "linformer:8", "sinusoidal").validate();
  refused(config_for("textcls", "linformer:8", "alibi"), "--position alibi needs the fused kernel");
  refused(config_for("charlm", "performer:16", "alibi"), "--position alibi needs the fused kernel");
  for (const char* attention : {"full", "local:4", "band:4,2", "bigbird:4,1,1"}) {
    config_for("charlm", attention, "alibi").validate();
  }
  config_for("charlm", "performer:16", "rope").validate();
  TrainConfig odd = config_for("charlm", "full", "rope");
  odd.dim = 12;
  odd.heads = 4;  // head_dim 3
  refused(odd, "needs an even head dim");
  odd.position = "sinusoidal";
  odd.validate();
  refused(config_for("textcls", "linformer:1048576", "none"), "more than");
  refused(config_for("charlm", "local:0", "none"), "--attention local:0");
  refused(config_for("charlm", "full", "learned"), "--position");
}

TEST_CASE("model_config carries the spec with max_len, the seed and the position", "[config][attention]") {
  TrainConfig config = config_for("charlm", "bigbird:8,2,1", "alibi");
  config.seed = 1234;
  config.max_len = 96;
  const nn::ModelConfig model = config.model_config();
  REQUIRE(model.attention.kind == nn::AttentionKind::bigbird);
  REQUIRE(model.attention.random_blocks == 2);
  REQUIRE(model.attention.seed == 1234);
  REQUIRE(model.attention.max_len == 96);
  REQUIRE(model.attention.position == nn::PositionKind::alibi);
}

TEST_CASE("the stored config keeps attention and position; older checkpoints lack them", "[config][attention]") {
  TrainConfig config = config_for("textcls", "linformer:16", "rope");
  const nlohmann::json json = to_json(config);
  REQUIRE(json.at("attention") == "linformer:16");
  REQUIRE(json.at("position") == "rope");
  const TrainConfig back = config_from_json(json);
  REQUIRE(back.attention == "linformer:16");
  REQUIRE(back.position == "rope");

  nlohmann::json older = to_json(config_for("charlm", "full", "sinusoidal"));
  older.erase("attention");
  older.erase("position");
  const TrainConfig old = config_from_json(older);
  REQUIRE(old.attention == "full");
  REQUIRE(old.position == "sinusoidal");

  const auto refused = [&](const char* key, const nlohmann::json& value, const std::string& expected) {
    nlohmann::json stored = to_json(config_for("charlm", "full", "sinusoidal"));
    stored[key] = value;
    INFO(key << " = " << value.dump());
    REQUIRE_THROWS_WITH(config_from_json(stored), Catch::Contains(expected));
  };
  refused("attention", 3, "'attention' must be a string");
  refused("attention", nullptr, "'attention' must be a string");
  refused("position", false, "'position' must be a string");
  refused("attention", "local:0", "'attention'");
  refused("attention", "local", "'attention'");
  refused("position", "learned", "'position'");
  refused("attention", "linformer:8", "cannot train a charlm");  // stored for a causal task
  // A non-canonical spelling reads back canonical.
  nlohmann::json spelled = to_json(config_for("charlm", "full", "sinusoidal"));
  spelled["attention"] = "band:8,1";
  REQUIRE(config_from_json(spelled).attention == "band:8");
}
