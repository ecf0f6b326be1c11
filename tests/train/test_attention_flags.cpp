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
  const nn::AttentionSpec reformer = parse_attention("reformer:8,2");
  REQUIRE(reformer.kind == nn::AttentionKind::reformer);
  REQUIRE((reformer.buckets == 8 && reformer.rounds == 2));
  REQUIRE(parse_attention("reformer:8,2").sparsity().kind == SparsityKind::full);
  REQUIRE(parse_attention("full").kind == nn::AttentionKind::full);
  // the layout the fused kernel gets
  REQUIRE(parse_attention("band:8,3").sparsity().kind == SparsityKind::band);
  REQUIRE(parse_attention("linformer:32").sparsity().kind == SparsityKind::full);

  for (const char* text : {"full", "local:16", "band:8,3", "band:8", "bigbird:4,2,1", "linformer:32",
                           "performer:64", "reformer:8,2", "reformer:2,64", "local:1048576"}) {
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
  refused("reformer:8", "expected 2 comma-separated numbers");
  refused("reformer:7,2", "the buckets B must be even");
  refused("reformer:0,2", "the buckets B must be in [2");
  refused("reformer:8,0", "the rounds R must be in [1, 64], got 0");
  refused("reformer:8,65", "the rounds R must be in [1, 64], got 65");
  refused("reformer", "needs its numbers");
  refused("full:3", "full takes no numbers");
  refused("full:", "full takes no numbers");
  REQUIRE_THROWS_WITH(parse_position("Rope"),
                      Catch::Contains("--position must be sinusoidal, rope, alibi, none, "
                                      "t5[:B[,D]] or shaw[:K], got 'Rope'"));
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
  refused(config_for("charlm", "reformer:4,2", "alibi"), "--position alibi needs the fused kernel");
  config_for("charlm", "reformer:4,2", "rope").validate();
  config_for("textcls", "reformer:4,2", "sinusoidal").validate();
  TrainConfig many_rotations = config_for("charlm", "reformer:1048576,64", "sinusoidal");
  refused(many_rotations, "its rotations [R, head dim");
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

TEST_CASE("The --position t5 and shaw flags: numbers, canonical spelling, refusals",
          "[config][attention][relative-position]") {
  const nn::AttentionSpec t5 = parse_position("t5");
  REQUIRE(t5.position == nn::PositionKind::t5);
  REQUIRE((t5.relative.buckets == 32 && t5.relative.max_distance == 128));  // T5's defaults
  REQUIRE(format_position(t5) == "t5:32,128");  // every number written: no default in a checkpoint
  const nn::AttentionSpec small = parse_position("t5:8");
  REQUIRE((small.relative.buckets == 8 && small.relative.max_distance == 128));
  REQUIRE(format_position(parse_position("t5:16,64")) == "t5:16,64");
  const nn::AttentionSpec shaw = parse_position("shaw");
  REQUIRE(shaw.position == nn::PositionKind::shaw);
  REQUIRE(shaw.relative.clip == 16);
  REQUIRE(format_position(shaw) == "shaw:16");
  REQUIRE(format_position(parse_position("shaw:4")) == "shaw:4");

  const auto refused = [](const std::string& text, const std::string& expected) {
    INFO("--position " << text);
    REQUIRE_THROWS_WITH(parse_position(text),
                        Catch::Contains("--position") && Catch::Contains(expected));
  };
  refused("t5:", "is not an integer");
  refused("t5:3", "the buckets B must be in [4, 1024], got 3");
  refused("t5:32,16", "the max distance D 16 must be at least the buckets B 32");
  refused("t5:256", "must be at least the buckets B 256");  // the default D 128 is too short
  refused("t5:8,16,2", "expected 1 to 2 comma-separated numbers");
  refused("shaw:0", "the clipping distance K must be in [1");
  refused("shaw:2,3", "expected 1 comma-separated number");
  refused("rope:4", "rope takes no numbers");
  refused("T5", "must be sinusoidal, rope, alibi, none, t5[:B[,D]] or shaw[:K], got 'T5'");
}

TEST_CASE("t5 and shaw: model_config carries their numbers; validate refuses what cannot work",
          "[config][attention][relative-position]") {
  TrainConfig config = config_for("charlm", "local:8", "t5:16,64");
  const nn::ModelConfig model = config.model_config();
  REQUIRE(model.attention.kind == nn::AttentionKind::local);
  REQUIRE(model.attention.position == nn::PositionKind::t5);
  REQUIRE((model.attention.relative.buckets == 16 && model.attention.relative.max_distance == 64));
  REQUIRE(config_for("textcls", "full", "shaw:3").model_config().attention.relative.clip == 3);
  for (const char* attention : {"full", "local:4", "band:4,2", "bigbird:4,1,1"}) {
    config_for("charlm", attention, "t5:32,128").validate();
    config_for("charlm", attention, "shaw:16").validate();
  }
  const auto refused = [](TrainConfig c, const std::string& expected) {
    INFO(c.task << " --attention " << c.attention << " --position " << c.position);
    REQUIRE_THROWS_WITH(c.validate(), Catch::Contains(expected));
  };
  refused(config_for("charlm", "performer:16", "t5:32,128"),
          "--position t5:32,128 adds to the [S, S] scores");
  refused(config_for("textcls", "linformer:8", "shaw:16"),
          "which --attention linformer:8 does not form");
  refused(config_for("charlm", "reformer:4,1", "shaw:16"), "T5 and Shaw work with full");
  TrainConfig wide = config_for("charlm", "full", "shaw:1048576");
  wide.dim = 4096;
  wide.heads = 1;
  refused(wide, "would have more than");

  // stored and read back in the canonical spelling
  nlohmann::json stored = to_json(config_for("charlm", "full", "t5:32,128"));
  REQUIRE(stored.at("position") == "t5:32,128");
  stored["position"] = "shaw";
  REQUIRE(config_from_json(stored).position == "shaw:16");
  stored["position"] = "t5:3";
  REQUIRE_THROWS_WITH(config_from_json(stored), Catch::Contains("'position'"));
}

TEST_CASE("layout_covers_every_pair: a sparse layout that is full attention at this length",
          "[config][attention]") {
  const auto covers = [](const std::string& attention, int64_t length, bool causal) {
    return layout_covers_every_pair(parse_attention(attention), length, causal);
  };
  for (const bool causal : {false, true}) {
    REQUIRE(covers("local:64", 64, causal));  // |i - j| <= 63 < 64
    REQUIRE(covers("local:100", 64, causal));
    REQUIRE_FALSE(covers("local:63", 64, causal));  // keys 63 apart are out
    REQUIRE(covers("band:64", 64, causal));  // dilation 1: a window
    REQUIRE_FALSE(covers("band:64,2", 64, causal));  // odd distances are out
    REQUIRE(covers("band:4,3", 1, causal));  // one position: one pair
    // at 64 or less, one block: its one random block is every block
    REQUIRE(covers("bigbird:3,1,2", 64, causal));
    REQUIRE(covers("bigbird:3,1,0", 20, causal));
    REQUIRE_FALSE(covers("bigbird:3,0,0", 20, causal));  // no random block: a window of 3
    REQUIRE(covers("bigbird:20,0,0", 20, causal));        // ... unless the window reaches
    REQUIRE(covers("bigbird:3,0,19", 20, causal));  // or the global tokens ((19, 19): the window)
    REQUIRE_FALSE(covers("bigbird:1,0,18", 20, causal));  // (19, 18) is in neither
    REQUIRE(covers("bigbird:3,2,0", 128, causal));        // two blocks, both random for each
    REQUIRE_FALSE(covers("bigbird:3,1,2", 1024, causal));
    REQUIRE_FALSE(covers("full", 16, causal));             // no layout to speak of
    REQUIRE_FALSE(covers("performer:8", 16, causal));
  }
  // 65 positions: keys 64 apart need a window of 65
  REQUIRE_FALSE(covers("bigbird:64,0,0", 65, true));
  REQUIRE(covers("bigbird:65,0,0", 65, true));
  REQUIRE(covers("local:65", 65, false));
  REQUIRE_FALSE(covers("local:64", 65, false));
  REQUIRE(full_coverage_notice(parse_attention("local:64"), 64, true, "--context 64") ==
          "attention: --attention local:64 covers every (query, key) pair at --context 64: it "
          "equals full attention there");
  REQUIRE(full_coverage_notice(parse_attention("local:32"), 64, true, "--context 64").empty());
}
