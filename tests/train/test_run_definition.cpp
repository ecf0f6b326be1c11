// What defines a data-parallel run (train/run_definition.h): the settings by flag, the data's
// hash and what the task derived from it, the steps, the parameters; not the data's path or the
// thread count, which each rank may choose.
#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "tapegrad/autograd/tensor.h"
#include "tapegrad/train/run_definition.h"

namespace {

// The definition of a small charlm run with `config`, as a map from setting to value (and the
// count of lines, to see that no name appears twice).
std::map<std::string, std::string> run_definition_of(const tg::train::TrainConfig& config,
                                                     size_t* lines = nullptr) {
  const nlohmann::json data_state = {{"vocab", {"<pad>", "<unk>", "a", "b"}}, {"sha256", "abc"}};
  const tg::nn::NamedTensors parameters = {{"embed.weight", tg::zeros({4, 8})},
                                           {"head.bias", tg::zeros({4})}};
  const tg::dist::RunDefinition definition = tg::train::run_definition(
      {.config = config, .stop_after = 2, .resumed = "none", .data_sha256 = "d00d",
       .data_state = data_state, .examples = 100, .planned_steps = 10, .first_step = 0,
       .last_step = 2, .parameters = parameters});
  if (lines) *lines = definition.size();
  return {definition.begin(), definition.end()};
}

tg::train::TrainConfig run_definition_config() {
  tg::train::TrainConfig config;
  config.task = "charlm";
  config.data = "corpus.txt";
  config.dim = 8;
  return config;
}

}  // namespace

TEST_CASE("run definition: every setting by its flag, then the data, steps and parameters",
          "[train]") {
  size_t lines = 0;
  const tg::train::TrainConfig config = run_definition_config();
  const std::map<std::string, std::string> definition = run_definition_of(config, &lines);
  REQUIRE(lines == definition.size());
  CHECK(definition.at("--resume") == "none");
  CHECK(definition.at("--task") == "charlm");
  CHECK(definition.at("--dim") == "8");
  CHECK(definition.at("--lr") == "0.001");
  CHECK(definition.at("--seed") == "0");
  CHECK(definition.at("--amp") == "none");
  CHECK(definition.at("--no-shuffle") == "false");
  CHECK(definition.at("--weight-decay") == "0.01");
  CHECK(definition.at("--stop-after") == "2");
  CHECK(definition.at("--data (SHA-256 of its contents)") == "d00d");
  CHECK(definition.at("the data's vocab").rfind("4 entries, SHA-256 ", 0) == 0);
  CHECK(definition.count("the data's sha256") == 0);  // the line above says it
  CHECK(definition.at("planned steps") == "10");
  CHECK(definition.at("last step") == "2");
  CHECK(definition.at("the model's parameters") == "2 tensors, 36 values");
  CHECK(definition.at("parameter embed.weight") == "[4, 8] f32");
  CHECK(definition.count("--data") == 0);
  CHECK(definition.count("--threads") == 0);
}

TEST_CASE("run definition: the checkpoint and early-stop options every rank acts on", "[train]") {
  const tg::train::TrainConfig config = run_definition_config();
  const nlohmann::json data_state = {{"sha256", "abc"}};
  const tg::nn::NamedTensors parameters;
  const auto definition_with = [&](int64_t save_every, bool save_best, int64_t patience) {
    const tg::dist::RunDefinition lines = tg::train::run_definition(
        {.config = config, .save_every = save_every, .save_best = save_best,
         .patience = patience, .resumed = "none", .data_state = data_state,
         .parameters = parameters});
    return std::map<std::string, std::string>(lines.begin(), lines.end());
  };
  const std::map<std::string, std::string> none = definition_with(0, false, 0);
  CHECK(none.at("--save-every") == "none");
  CHECK(none.at("--save-best") == "none");
  CHECK(none.at("--patience") == "none");
  const std::map<std::string, std::string> all = definition_with(5, true, 3);
  CHECK(all.at("--save-every") == "5");
  CHECK(all.at("--save-best") == "given");
  CHECK(all.at("--patience") == "3");
}

TEST_CASE("run definition: the data's path and the thread count may differ, a setting may not",
          "[train]") {
  const tg::train::TrainConfig config = run_definition_config();
  tg::train::TrainConfig elsewhere = config;
  elsewhere.data = "/elsewhere/corpus.txt";
  elsewhere.threads = 3;
  REQUIRE(run_definition_of(elsewhere) == run_definition_of(config));
  tg::train::TrainConfig unshuffled = config;
  unshuffled.shuffle = false;
  REQUIRE(run_definition_of(unshuffled).at("--no-shuffle") == "true");
}
