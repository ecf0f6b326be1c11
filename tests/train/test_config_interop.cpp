// The config fields added for PyTorch interop: --schedule and --inputs, stored in the checkpoint,
// defaulting (cosine, every column) when an older checkpoint lacks them.
#include <catch2/catch.hpp>

#include "tapegrad/autograd/error.h"
#include "tapegrad/io/strict_numbers.h"
#include "tapegrad/train/config.h"

using namespace tg::train;

TEST_CASE("schedule and inputs round-trip, and default when missing", "[config]") {
  TrainConfig config;
  config.task = "timeseries";
  config.data = "series.csv";
  config.schedule = "constant";
  config.inputs = {"value", std::string("t\xFF")};
  const TrainConfig back = config_from_json(nlohmann::json::parse(to_json(config).dump()));
  REQUIRE(back.schedule == "constant");
  REQUIRE(back.inputs == config.inputs);

  nlohmann::json old = to_json(config);
  old.erase("schedule");
  old.erase("inputs");
  const TrainConfig defaulted = config_from_json(old);
  REQUIRE(defaulted.schedule == "cosine");
  REQUIRE(defaulted.inputs.empty());
}

TEST_CASE("schedule, inputs and timeseries layers are checked", "[config]") {
  TrainConfig config;
  config.task = "timeseries";
  config.data = "series.csv";
  config.schedule = "step";
  REQUIRE_THROWS_WITH(config.validate(), Catch::Contains("--schedule must be cosine or constant"));
  config.schedule = "cosine";
  config.inputs = {"a", "a"};
  REQUIRE_THROWS_WITH(config.validate(), Catch::Contains("--inputs names 'a' twice"));
  config.inputs = {"a"};
  config.layers = 0;
  REQUIRE_THROWS_WITH(config.validate(), Catch::Contains("--layers 0 is not a timeseries model: --layers 1 is the tutorial's"));
  config.layers = 1;
  config.validate();
  config.task = "charlm";
  REQUIRE_THROWS_WITH(config.validate(), Catch::Contains("--inputs does not apply to --task charlm"));
  nlohmann::json json = to_json(config);
  json["inputs"] = "a,b";
  REQUIRE_THROWS_WITH(config_from_json(json), Catch::Contains("'inputs' must be an array"));
}

TEST_CASE("parse_inputs splits on commas and refuses empty names", "[config]") {
  REQUIRE(parse_inputs("SUNACTIVITY") == std::vector<std::string>{"SUNACTIVITY"});
  REQUIRE(parse_inputs("a,b c,d") == std::vector<std::string>{"a", "b c", "d"});
  for (const char* bad : {"", "a,", ",a", "a,,b"}) {
    INFO(bad);
    REQUIRE_THROWS_WITH(parse_inputs(bad), Catch::Contains("empty name"));
  }
}

TEST_CASE("shortest_text prints a double as typed", "[config]") {
  REQUIRE(shortest_text(0.1) == "0.1");
  REQUIRE(shortest_text(1e-3) == "0.001");
  REQUIRE(shortest_text(0.01) == "0.01");
  REQUIRE(shortest_text(1.0) == "1");
  REQUIRE(shortest_text(3e-4) == "3e-04");  // the shorter of 0.0003 and 3e-04
}
