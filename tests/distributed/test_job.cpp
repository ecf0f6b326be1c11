// distributed/job.h without MPI: the text a rank's run definition is sent as, the sentence naming
// the first setting two ranks disagree on, check_ranks_agree on a fake rank 1; and the installed
// tapegrad, which has no test hooks (they live in the tests' tapegrad_hooked).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "tapegrad/distributed/job.h"
#include "tests/cli/cli_support.h"

namespace {

// Rank 1 of 2, with rank 0's definition text: broadcast delivers rank 0's length, then its bytes;
// allreduce_min sees rank 0's vote too, which is 2 (rank 0 always agrees with itself).
class JobTestRank1 final : public tg::dist::Communicator {
 public:
  explicit JobTestRank1(std::string rank0_text) : rank0_text_(std::move(rank0_text)) {}
  int rank() const override { return 1; }
  int size() const override { return 2; }
  const char* name() const override { return "job-test"; }
  void allreduce(float*, int64_t, tg::dist::Reduce) override {}
  void allreduce(double*, int64_t, tg::dist::Reduce) override {}
  int64_t allreduce_min(int64_t value) override { return std::min<int64_t>(value, 2); }
  void broadcast(void* bytes, int64_t size, int root) override {
    REQUIRE(root == 0);
    if (broadcasts_++ == 0) {
      const int64_t length = static_cast<int64_t>(rank0_text_.size());
      REQUIRE(size == static_cast<int64_t>(sizeof length));
      std::memcpy(bytes, &length, sizeof length);
    } else {
      REQUIRE(size == static_cast<int64_t>(rank0_text_.size()));
      std::memcpy(bytes, rank0_text_.data(), rank0_text_.size());
    }
  }
  void barrier() override {}
  int64_t start_allreduce(float*, int64_t) override { return 0; }
  void progress() override {}
  void wait(int64_t) override {}
  [[noreturn]] void abort(int) override { FAIL("abort"); std::abort(); }

 private:
  std::string rank0_text_;
  int broadcasts_ = 0;
};

// The message of the JobStopped that check_ranks_agree throws on rank 1, or "agreed".
std::string job_test_outcome(const std::string& rank0_text, const tg::dist::RunDefinition& own) {
  JobTestRank1 comm(rank0_text);
  try {
    tg::dist::check_ranks_agree(comm, own);
  } catch (const tg::dist::JobStopped& stopped) {
    REQUIRE(stopped.code() == 2);
    return stopped.what();
  }
  return "agreed";
}

}  // namespace

TEST_CASE("dist: a run definition is sent as name=value lines, newlines escaped", "[dist]") {
  REQUIRE(tg::dist::definition_text({{"--dim", "32"}, {"--target", "a\nb"}}) ==
          "--dim=32\n--target=a\\nb\n");
  REQUIRE(tg::dist::definition_text({}).empty());
}

TEST_CASE("dist: the first differing setting is named with both ranks' values", "[dist]") {
  using tg::dist::first_disagreement;
  const std::string rank0 = "--task=charlm\n--dim=32\n--lr=0.001\n";
  REQUIRE(first_disagreement(rank0, rank0, 1).empty());
  REQUIRE(first_disagreement(rank0, "--task=charlm\n--dim=64\n--lr=0.002\n", 1) ==
          "ranks disagree on --dim: rank 0 has 32, rank 1 has 64");
  REQUIRE(first_disagreement(rank0, "--task=textcls\n--dim=32\n--lr=0.001\n", 3) ==
          "ranks disagree on --task: rank 0 has charlm, rank 3 has textcls");
  // Lists that name other settings, or end early: the whole lines.
  REQUIRE(first_disagreement(rank0, "--task=charlm\n--window=6\n", 1) ==
          "ranks disagree on the run's settings: rank 0 has '--dim=32', rank 1 has '--window=6'");
  REQUIRE(first_disagreement(rank0, "--task=charlm\n--dim=32\n", 2) ==
          "ranks disagree on the run's settings: rank 0 has '--lr=0.001', rank 2 has nothing");
  REQUIRE(first_disagreement("--task=charlm\n", "--task=charlm\n--dim=32\n", 1) ==
          "ranks disagree on the run's settings: rank 0 has nothing, rank 1 has '--dim=32'");
}

TEST_CASE("dist: check_ranks_agree stops a rank that differs from rank 0, and only then",
          "[dist]") {
  const std::string rank0 = "--task=charlm\n--steps=4\n";
  REQUIRE(job_test_outcome(rank0, {{"--task", "charlm"}, {"--steps", "4"}}) == "agreed");
  REQUIRE(job_test_outcome(rank0, {{"--task", "charlm"}, {"--steps", "6"}}) ==
          "ranks disagree on --steps: rank 0 has 4, rank 1 has 6");
  // One process: nothing to compare with.
  tg::dist::LocalCommunicator local;
  REQUIRE_NOTHROW(tg::dist::check_ranks_agree(local, {{"--steps", "6"}}));
}

TEST_CASE("dist: the installed tapegrad has no test hooks; TAPEGRAD_TEST_RANK_* change nothing",
          "[dist][cli]") {
  using namespace tg::testing;
  REQUIRE(read_bytes(TAPEGRAD_BIN).find("TAPEGRAD_TEST_RANK") == std::string::npos);
  TempDir dir;
  write_bytes(dir.file("text.txt"), small_text());
  const CliResult run = run_cli(
      "train --task charlm --context 8 --layers 1 --dim 16 --heads 2 --batch 8 --steps 2 "
      "--threads 1 --data '" + dir.file("text.txt") + "' --save '" + dir.file("model.st") + "'",
      dir,
      "env TAPEGRAD_TEST_RANK_DIES=0:1 TAPEGRAD_TEST_RANK_DATA=0:'" + dir.file("none.txt") + "'");
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  REQUIRE_THAT(run.out, Catch::Contains("trained 2 steps (2/2)"));
  REQUIRE(std::filesystem::exists(dir.file("model.st")));
}
