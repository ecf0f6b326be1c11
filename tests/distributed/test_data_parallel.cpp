// Data-parallel training under `mpirun -np 2` on this machine (loopback): the same result as one
// process with the same global batch, checkpoints that resume under either count, and failures
// that stop the whole job. Hidden ([.mpi]): CMake registers each case by its own tag with CTest
// (ctest -R mpi), with a timeout, only when MPI was found (TAPEGRAD_MPIRUN: the launcher found).
#if defined(TAPEGRAD_MPIRUN)
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "tapegrad/io/sha256.h"
#include "tapegrad/train/checkpoint_file.h"
#include "tests/support/background_run.h"
#include "tests/support/temp_files.h"
#include "tests/cli/cli_support.h"

namespace tg::testing {
namespace {

// `tapegrad <arguments>` on `ranks` processes.
CliResult run_ranks(int ranks, const std::string& arguments, const TempDir& dir) {
  if (ranks == 1) return run_cli(arguments, dir);
  return run_cli(arguments, dir, mpi_launcher(ranks));
}

// The tests' tapegrad_hooked (tests/distributed/hooked_tapegrad.cpp) on `ranks` processes, with
// `env` ("NAME=VALUE", its test hook) passed to every rank.
CliResult run_hooked_ranks(int ranks, const std::string& arguments, const TempDir& dir,
                           const std::string& env) {
  return run_cli(arguments, dir, mpi_launcher(ranks) + " -x " + env, TAPEGRAD_HOOKED_BIN);
}

// A job of 2 ranks that each get their own arguments: mpirun's `-np 1 A : -np 1 B`; with
// `first_ranks`, that many ranks run A (`-np N A : -np 1 B`).
CliResult run_two_ranks(const std::string& rank0_arguments, const std::string& rank1_arguments,
                        const TempDir& dir, int first_ranks = 1) {
  const std::string launcher =
      mpi_launcher(first_ranks) + " '" + TAPEGRAD_BIN + "' " + rank0_arguments + " : -np 1";
  return run_cli(rank1_arguments, dir, launcher);
}

// Equal within f32 reduction-order noise: the model's and the optimizer's tensors agree to 1e-3
// of each tensor's largest magnitude (Adam's update divides by small second moments, which
// amplifies the last bits), and everything else (step, RNG state, config) exactly.
void require_same_checkpoint(const std::string& a_path, const std::string& b_path) {
  const train::Checkpoint a = train::load_checkpoint(a_path), b = train::load_checkpoint(b_path);
  REQUIRE(a.step == b.step);
  REQUIRE(a.rng.seed == b.rng.seed);
  REQUIRE(a.rng.offset == b.rng.offset);  // every rank reserved what one process reserves
  REQUIRE(a.config.batch == b.config.batch);
  for (const auto* pair : {&a.model, &a.optimizer}) {
    const nn::NamedTensors& other = pair == &a.model ? b.model : b.optimizer;
    REQUIRE(pair->size() == other.size());
    for (size_t k = 0; k < pair->size(); ++k) {
      INFO((*pair)[k].first);
      REQUIRE((*pair)[k].first == other[k].first);
      const std::vector<double> x = (*pair)[k].second.to_host_f64(), y = other[k].second.to_host_f64();
      REQUIRE(x.size() == y.size());
      double largest = 1e-12, worst = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        largest = std::max(largest, std::abs(x[i]));
        worst = std::max(worst, std::abs(x[i] - y[i]));
      }
      REQUIRE(worst <= 1e-3 * largest + 1e-7);
    }
  }
}

struct TaskCase {
  const char* name;
  std::string file, contents, options;
};

std::vector<TaskCase> task_cases() {
  std::string tsv;
  const char* words[] = {"good fine great", "bad awful poor", "nice lovely", "sad grim dull"};
  for (int i = 0; i < 48; ++i) tsv += std::string(i % 2 ? "neg" : "pos") + "\t" + words[i % 4] + (i % 3 ? " day" : "") + "\n";
  // Dropout on (0.1, the default; charlm's is 0, so typed) and --batch 8: 4 examples a rank, the
  // global batch's numbering. --lr 1e-3 (charlm's default is 1e-2): Adam moves a weight whose
  // gradient is near 0 by about lr either way, so the summation order shows ten times more.
  return {
      {"textcls", "texts.tsv", tsv, "--task textcls --tokenizer word --layers 1 --dim 16 --heads 2"},
      {"timeseries", "series.csv", small_csv(), "--task timeseries --window 6 --horizon 2 --layers 1 --dim 16 --heads 2"},
      {"charlm", "text.txt", small_text(),
       "--task charlm --context 8 --layers 1 --dim 16 --heads 2 --dropout 0.1 --lr 1e-3"},
  };
}

}  // namespace

TEST_CASE("mpi: 2 processes train each model as one process does with the same global batch", "[.mpi][mpi_train_matches_one_process]") {
  for (const TaskCase& task : task_cases()) {
    SECTION(task.name) {
      TempDir dir;
      const std::string data = dir.file(task.file);
      write_bytes(data, task.contents);
      const auto f = [&](const char* name) { return "'" + dir.file(name) + "'"; };
      const std::string common = task.options + " --data '" + data + "' --batch 8 --steps 4 --threads 1 ";
      const CliResult one = run_ranks(1, "train " + common + "--save " + f("one.st") + " --log " + f("one.csv") +
                                             " --save-init " + f("init1.st"), dir);
      INFO(one.err);
      REQUIRE(one.exit_code == 0);
      const CliResult two = run_ranks(2, "train " + common + "--save " + f("two.st") + " --log " + f("two.csv") +
                                             " --save-init " + f("init2.st"), dir);
      INFO(two.err);
      REQUIRE(two.exit_code == 0);
      const std::vector<double> a = logged_losses(dir.file("one.csv")), b = logged_losses(dir.file("two.csv"));
      REQUIRE(a.size() == 4);
      REQUIRE(b.size() == 4);
      for (size_t i = 0; i < a.size(); ++i) REQUIRE(b[i] == Approx(a[i]).epsilon(1e-4));
      require_same_checkpoint(dir.file("init1.st"), dir.file("init2.st"));
      require_same_checkpoint(dir.file("one.st"), dir.file("two.st"));
      REQUIRE(lines_of(two.out).size() == 1);  // rank 0 alone writes: one summary line
    }
  }
}

TEST_CASE("mpi: clipping and recomputed activations (no overlap) with a profile match one process", "[.mpi][mpi_train_options]") {
  TempDir dir;
  const std::string data = dir.file("text.txt");
  write_bytes(data, small_text());
  const auto f = [&](const char* name) { return "'" + dir.file(name) + "'"; };
  // --lr 1e-3, not charlm's 1e-2: the summation order moves Adam's updates by up to lr.
  const std::string common = "--task charlm --context 8 --layers 2 --dim 16 --heads 2 --data '" + data +
                             "' --batch 8 --steps 3 --threads 1 --lr 1e-3 --clip 0.5 --checkpoint-activations --profile ";
  const CliResult one = run_ranks(1, "train " + common + "--save " + f("one.st"), dir);
  INFO(one.err);
  REQUIRE(one.exit_code == 0);
  const CliResult two = run_ranks(2, "train " + common + "--save " + f("two.st"), dir);
  INFO(two.err);
  REQUIRE(two.exit_code == 0);
  REQUIRE_THAT(two.err, Catch::Contains("allreduce"));  // the profile has its row
  require_same_checkpoint(dir.file("one.st"), dir.file("two.st"));
}

TEST_CASE("mpi: a checkpoint resumes under either process count", "[.mpi][mpi_resume_any_count]") {
  TempDir dir;
  const std::string data = dir.file("text.txt");
  write_bytes(data, small_text());
  const auto f = [&](const char* name) { return "'" + dir.file(name) + "'"; };
  // --lr 1e-3, not charlm's 1e-2: the summation order moves Adam's updates by up to lr.
  const std::string common = "--task charlm --context 8 --layers 1 --dim 16 --heads 2 --data '" + data +
                             "' --batch 8 --steps 4 --threads 1 --lr 1e-3 ";
  REQUIRE(run_ranks(1, "train " + common + "--save " + f("whole.st"), dir).exit_code == 0);
  // 2 processes stop halfway, 1 finishes; and the other way round.
  REQUIRE(run_ranks(2, "train " + common + "--stop-after 2 --save " + f("half2.st"), dir).exit_code == 0);
  REQUIRE(run_ranks(1, "train --resume " + f("half2.st") + " --threads 1 --save " + f("end1.st"), dir).exit_code == 0);
  require_same_checkpoint(dir.file("whole.st"), dir.file("end1.st"));
  REQUIRE(run_ranks(1, "train " + common + "--stop-after 2 --save " + f("half1.st"), dir).exit_code == 0);
  const CliResult resumed = run_ranks(2, "train --resume " + f("half1.st") + " --threads 1 --save " + f("end2.st"), dir);
  INFO(resumed.err);
  REQUIRE(resumed.exit_code == 0);
  require_same_checkpoint(dir.file("whole.st"), dir.file("end2.st"));
}

TEST_CASE("mpi: a rank that dies mid-run stops the job, and the good checkpoint stays", "[.mpi][mpi_rank_dies]") {
  TempDir dir;
  const std::string data = dir.file("text.txt");
  write_bytes(data, small_text());
  const std::string common = "train --task charlm --context 8 --layers 1 --dim 16 --heads 2 --data '" + data +
                             "' --batch 8 --threads 1 --save '" + dir.file("model.st") + "'";
  REQUIRE(run_ranks(1, common + " --steps 4", dir).exit_code == 0);
  const std::string good = read_bytes(dir.file("model.st"));
  const CliResult died = run_hooked_ranks(2, common + " --steps 6", dir, "TAPEGRAD_TEST_RANK_DIES=1:3");
  INFO(died.err);
  REQUIRE(died.exit_code != 0);
  REQUIRE(died.exit_code != 124);  // timeout(1)'s code: the job hung
  // The surviving rank says in one line why it stopped (or, if MPI noticed first, which call failed).
  const bool said = died.err.find("rank 0 of 2: stopped by the MPI launcher") != std::string::npos ||
                    died.err.find("rank 0: MPI_") != std::string::npos;
  REQUIRE(said);
  REQUIRE(read_bytes(dir.file("model.st")) == good);
}

TEST_CASE("mpi: SIGTERM to one rank stops every rank after the same step, and rank 0 saves",
          "[.mpi][mpi_signal_one_rank]") {
  TempDir dir;
  const std::string data = dir.file("text.txt");
  write_bytes(data, small_text());
  const std::string train = "train --task charlm --context 8 --layers 1 --dim 16 --heads 2 "
                            "--warmup 0 --data '" + data + "' --batch 8 --steps 8 --threads 1 ";
  REQUIRE(run_ranks(2, train + "--save '" + dir.file("whole.st") + "'", dir).exit_code == 0);
  // Rank 1 alone waits at the start of step 5 (rank 0 goes on, into the step's allreduce) and
  // gets the signal; without the ranks agreeing, rank 0 would wait for it forever.
  const BackgroundRun job = start_background(
      mpi_launcher(2) + " -x TAPEGRAD_TEST_WAIT_AT=5@1 '" + TAPEGRAD_HOOKED_BIN + "' " + train +
          "--save '" + dir.file("cut.st") + "' > '" + dir.file("out") + "'",
      dir.file("err"));
  const std::string waiting = wait_for_text(job, "waiting at step 5");
  const size_t pid_at = waiting.find("rank 1 (pid ");
  REQUIRE(pid_at != std::string::npos);
  REQUIRE(kill(static_cast<pid_t>(std::stol(waiting.substr(pid_at + 12))), SIGTERM) == 0);
  const int status = wait_for_end(job);
  const std::string err = read_bytes(job.err);
  INFO(err);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) != 0);    // the ranks' 143, or the launcher's own code
  REQUIRE(WEXITSTATUS(status) != 124);  // timeout(1)'s code: the job hung
  REQUIRE_THAT(err, Catch::Contains("SIGTERM: stopped after step 5 of 8; saved"));
  REQUIRE(train::load_checkpoint(dir.file("cut.st")).step == 5);
  const CliResult resumed = run_ranks(2, "train --resume '" + dir.file("cut.st") +
                                             "' --threads 1 --save '" + dir.file("end.st") + "'",
                                      dir);
  INFO(resumed.err);
  REQUIRE(resumed.exit_code == 0);
  require_same_checkpoint(dir.file("whole.st"), dir.file("end.st"));
}

TEST_CASE("mpi: bad input on one rank is reported once with its rank, and every rank exits with 2", "[.mpi][mpi_bad_input_one_rank]") {
  TempDir dir;
  const std::string data = dir.file("text.txt");
  write_bytes(data, small_text());
  const std::string common = "train --task charlm --context 8 --layers 1 --batch 8 --steps 2 --save '" +
                             dir.file("model.st") + "' --data ";
  // Rank 1 is given a data file that does not exist.
  const CliResult bad = run_two_ranks(common + "'" + data + "'", common + "'" + dir.file("missing.txt") + "'", dir);
  INFO(bad.err);
  REQUIRE(bad.exit_code == 2);
  size_t reports = 0;
  for (const std::string& line : lines_of(bad.err)) reports += line.find("tapegrad train: error:") != std::string::npos;
  REQUIRE(reports == 1);
  REQUIRE_THAT(bad.err, Catch::Contains("tapegrad train: error: rank 1 of 2: --data: cannot open"));
  REQUIRE(!std::filesystem::exists(dir.file("model.st")));
}

TEST_CASE("mpi: the global batch must divide among the processes", "[.mpi][mpi_batch_divides]") {
  TempDir dir;
  const std::string data = dir.file("text.txt");
  write_bytes(data, small_text());
  const CliResult bad = run_ranks(2, "train --task charlm --context 8 --layers 1 --data '" + data + "' --batch 7 --steps 2", dir);
  REQUIRE(bad.exit_code == 2);
  REQUIRE_THAT(bad.err, Catch::Contains("rank 0 of 2: --batch 7 (the global batch) is not divisible by the 2 processes"));
}

// Under mpirun the gradients go through the communicator even with one process (an identity
// there): how a machine with a single GPU runs the NCCL path. On the CPU it is MPI's.
TEST_CASE("mpi: one process under mpirun reduces its gradients and trains as without mpirun", "[.mpi][mpi_one_process]") {
  TempDir dir;
  const std::string data = dir.file("text.txt");
  write_bytes(data, small_text());
  const auto f = [&](const char* name) { return "'" + dir.file(name) + "'"; };
  const std::string common = "--task charlm --context 8 --layers 1 --dim 16 --heads 2 --data '" + data +
                             "' --batch 8 --steps 3 --threads 1 --optimizer sgd ";
  const CliResult plain = run_cli("train " + common + "--save " + f("plain.st"), dir);
  INFO(plain.err);
  REQUIRE(plain.exit_code == 0);
  REQUIRE_THAT(plain.err, !Catch::Contains("data parallel"));
  const CliResult one = run_cli("train " + common + "--save " + f("one.st"), dir, mpi_launcher(1));
  INFO(one.err);
  REQUIRE(one.exit_code == 0);
  REQUIRE_THAT(one.err, Catch::Contains("data parallel: 1 process (mpi)") && Catch::Contains("(gradients: mpi)"));
  require_same_checkpoint(dir.file("plain.st"), dir.file("one.st"));
}


// Ranks that disagree on what defines the run (distributed/job.h's check_ranks_agree): each job is
// two ranks with different flags (mpirun's `-np 1 A : -np 1 B`), which before the check crashed
// (--dim, --layers, --task), aborted inside Open MPI (other data), hung (--steps, --stop-after,
// other checkpoints) or trained inconsistent replicas (--seed, --lr, --batch, --no-shuffle, --amp).
namespace {

struct DisagreeCase {
  std::string rank0, rank1;  // each rank's flags after the common ones
  std::string expected;      // the error line, after "tapegrad train: error: "
};

// Every rank's outputs: none of them may be written when the ranks disagree.
std::string disagree_outputs(const TempDir& dir, bool resuming) {
  std::string outputs = " --save '" + dir.file("out.st") + "' --log '" + dir.file("log.csv") + "'";
  if (!resuming) {
    outputs += " --save-init '" + dir.file("init.st") + "' --profile-trace '" + dir.file("trace.json") + "'";
  }
  return outputs;
}

// The job stopped at once: exit code 2 (not a signal, not timeout(1)'s 124), one line from
// tapegrad, naming the setting and both values, and no file in `dir` but the inputs.
void require_disagreement(const CliResult& job, const DisagreeCase& c, const TempDir& dir,
                          const std::set<std::string>& inputs) {
  INFO("rank 0: " << c.rank0 << "\nrank 1: " << c.rank1 << "\nstderr:\n" << job.err);
  REQUIRE(job.exit_code == 2);
  std::vector<std::string> said;  // tapegrad's lines (mpirun adds its own)
  for (const std::string& line : lines_of(job.err)) {
    if (line.find("tapegrad") != std::string::npos) said.push_back(line);
  }
  REQUIRE(said == std::vector<std::string>{"tapegrad train: error: " + c.expected});
  REQUIRE(job.out.empty());
  for (const auto& entry : std::filesystem::directory_iterator(dir.path)) {
    const std::string name = entry.path().filename().string();
    INFO(name);
    REQUIRE((inputs.count(name) || name == ".stdout" || name == ".stderr"));
  }
}

// Runs each case as a 2-rank job of `common` plus the case's flags and every output.
void require_disagreements(const std::string& common, const std::vector<DisagreeCase>& cases,
                           const TempDir& dir, const std::set<std::string>& inputs, bool resuming = false) {
  const std::string outputs = disagree_outputs(dir, resuming);
  for (const DisagreeCase& c : cases) {
    const CliResult job = run_two_ranks(common + c.rank0 + outputs, common + c.rank1 + outputs, dir);
    require_disagreement(job, c, dir, inputs);
  }
}

}  // namespace

TEST_CASE("mpi: ranks with another model, task or data stop with one line naming it", "[.mpi][mpi_ranks_disagree_model]") {
  TempDir dir;
  write_bytes(dir.file("text.txt"), small_text());
  std::string other, tsv;
  for (int i = 0; i < 60; ++i) other += "a stitch in time saves nine! ";
  for (int i = 0; i < 48; ++i) tsv += std::string(i % 2 ? "neg" : "pos") + "\tgood day " + std::to_string(i % 5) + "\n";
  write_bytes(dir.file("other.txt"), other);
  write_bytes(dir.file("texts.tsv"), tsv);
  const std::string text = " --data '" + dir.file("text.txt") + "'";
  const std::string charlm = "--task charlm --context 8" + text;
  const std::string common = "train --threads 1 --batch 8 --steps 2 --heads 2 ";
  require_disagreements(common, {
      {"--layers 1 --dim 32 " + charlm, "--layers 1 --dim 64 " + charlm,
       "ranks disagree on --dim: rank 0 has 32, rank 1 has 64"},
      {"--dim 16 --layers 1 " + charlm, "--dim 16 --layers 2 " + charlm,
       "ranks disagree on --layers: rank 0 has 1, rank 1 has 2"},
      {"--dim 16 --layers 1 " + charlm,
       "--dim 16 --layers 1 --task textcls --tokenizer word --data '" + dir.file("texts.tsv") + "'",
       "ranks disagree on --task: rank 0 has charlm, rank 1 has textcls"},
      // Other data, so another vocabulary: named by the files' contents.
      {"--dim 16 --layers 1 " + charlm,
       "--dim 16 --layers 1 --task charlm --context 8 --data '" + dir.file("other.txt") + "'",
       "ranks disagree on --data (SHA-256 of its contents): rank 0 has " + train::sha256_hex(small_text()) +
           ", rank 1 has " + train::sha256_hex(other)},
  }, dir, {"text.txt", "other.txt", "texts.tsv"});
  // 3 ranks, the last one differs: it alone reports, and the others leave without a word.
  const std::string three = "train --threads 1 --steps 2 --heads 2 --layers 1 --batch 6 " + charlm +
                            disagree_outputs(dir, false);
  const DisagreeCase last{"--dim 32", "--dim 64", "ranks disagree on --dim: rank 0 has 32, rank 2 has 64"};
  require_disagreement(run_two_ranks(three + " --dim 32", three + " --dim 64", dir, 2), last, dir,
                       {"text.txt", "other.txt", "texts.tsv"});
}

TEST_CASE("mpi: ranks with other training settings stop with one line naming them", "[.mpi][mpi_ranks_disagree_training]") {
  TempDir dir;
  write_bytes(dir.file("text.txt"), small_text());
  const std::string common = "train --task charlm --context 8 --layers 1 --dim 16 --heads 2 --threads 1 --data '" +
                             dir.file("text.txt") + "' ";
  require_disagreements(common, {
      {"--batch 8 --steps 4 --seed 1", "--batch 8 --steps 4 --seed 2", "ranks disagree on --seed: rank 0 has 1, rank 1 has 2"},
      {"--batch 8 --steps 4 --lr 0.001", "--batch 8 --steps 4 --lr 0.002", "ranks disagree on --lr: rank 0 has 0.001, rank 1 has 0.002"},
      {"--steps 4 --batch 8", "--steps 4 --batch 4", "ranks disagree on --batch: rank 0 has 8, rank 1 has 4"},
      {"--batch 8 --steps 4", "--batch 8 --steps 4 --no-shuffle", "ranks disagree on --no-shuffle: rank 0 has false, rank 1 has true"},
      {"--batch 8 --steps 4", "--batch 8 --steps 4 --amp bf16", "ranks disagree on --amp: rank 0 has none, rank 1 has bf16"},
      {"--batch 8 --steps 4", "--batch 8 --steps 6", "ranks disagree on --steps: rank 0 has 4, rank 1 has 6"},
      {"--batch 8 --steps 4", "--batch 8 --steps 4 --stop-after 2", "ranks disagree on --stop-after: rank 0 has none, rank 1 has 2"},
  }, dir, {"text.txt"});
}

TEST_CASE("mpi: ranks resuming other checkpoints stop; the same data or checkpoint under other paths trains", "[.mpi][mpi_ranks_disagree_resume]") {
  TempDir dir;
  write_bytes(dir.file("text.txt"), small_text());
  const auto f = [&](const char* name) { return "'" + dir.file(name) + "'"; };
  const std::string fresh = "--task charlm --context 8 --layers 1 --dim 16 --heads 2 --batch 8 --steps 4 --data " + f("text.txt");
  REQUIRE(run_ranks(1, "train " + fresh + " --threads 1 --stop-after 1 --save " + f("a.st"), dir).exit_code == 0);
  REQUIRE(run_ranks(1, "train " + fresh + " --threads 1 --stop-after 2 --save " + f("b.st"), dir).exit_code == 0);
  const std::string a = train::sha256_hex(read_bytes(dir.file("a.st")));
  const std::string b = train::sha256_hex(read_bytes(dir.file("b.st")));
  require_disagreements("train --threads 1 ", {
      {"--resume " + f("a.st"), "--resume " + f("b.st"),
       "ranks disagree on --resume: rank 0 has step 1, SHA-256 " + a + ", rank 1 has step 2, SHA-256 " + b},
      {"--resume " + f("b.st"), fresh,
       "ranks disagree on --resume: rank 0 has step 2, SHA-256 " + b + ", rank 1 has none"},
  }, dir, {"text.txt", "a.st", "b.st"}, /*resuming=*/true);
  // The same bytes under other paths, and another thread count, are the same run.
  std::filesystem::copy_file(dir.file("text.txt"), dir.file("copy.txt"));
  std::filesystem::copy_file(dir.file("b.st"), dir.file("copy.st"));
  const CliResult same = run_two_ranks("train --threads 1 --resume " + f("b.st") + " --save " + f("end.st"),
                                       "train --threads 2 --resume " + f("copy.st") + " --data " + f("copy.txt"), dir);
  INFO(same.err);
  REQUIRE(same.exit_code == 0);
  REQUIRE(train::load_checkpoint(dir.file("end.st")).step == 4);
}

}  // namespace tg::testing
#endif  // TAPEGRAD_MPIRUN
