// Checkpoints of older releases load under today's names: a textcls head saved as
// `classifier.*` (before it took the tutorial's name `fc`) loads everywhere (load_checkpoint renames it).
#include "tapegrad/ops/ops.h"
#include "tapegrad/train/legacy_names.h"
#include "tests/cli/cli_support.h"

using namespace tg;
using namespace tg::testing;

TEST_CASE("rename_legacy_tensors maps a textcls head's classifier.* to fc.*", "[checkpoint][legacy]") {
  nn::NamedTensors model = {{"embedding.weight", zeros({3, 2})},
                            {"classifier.weight", zeros({2, 2})},
                            {"classifier.bias", zeros({2})}};
  REQUIRE(train::rename_legacy_tensors("textcls", model) == 2);
  REQUIRE(model[0].first == "embedding.weight");
  REQUIRE(model[1].first == "fc.weight");
  REQUIRE(model[2].first == "fc.bias");
  // Nothing else is renamed, and other tasks keep their names.
  REQUIRE(train::rename_legacy_tensors("textcls", model) == 0);
  nn::NamedTensors other = {{"classifier.weight", zeros({2, 2})}};
  REQUIRE(train::rename_legacy_tensors("charlm", other) == 0);
  REQUIRE(other[0].first == "classifier.weight");
  // Both names present: left alone, for validation to report.
  nn::NamedTensors both = {{"classifier.bias", zeros({2})}, {"fc.bias", zeros({2})}};
  REQUIRE(train::rename_legacy_tensors("textcls", both) == 0);
}

TEST_CASE("a textcls checkpoint saved with classifier.* still loads", "[cli][checkpoint][legacy]") {
  TempDir dir;
  const std::string old = std::string(TAPEGRAD_SOURCE_DIR) +
                          "/tests/fuzz/corpus/fuzz_checkpoint/checkpoint-textcls.safetensors";
  REQUIRE(read_bytes(old).find("classifier.weight") != std::string::npos);
  const CliResult classified = run_cli("sample --load '" + old + "' --prompt 'the cat'", dir);
  INFO(classified.err);
  REQUIRE(classified.exit_code == 0);
}
