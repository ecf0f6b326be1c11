// Data-parallel training under `mpirun -np 2` on this machine (loopback): the same result as one
// process with the same global batch, checkpoints that resume under either count, and failures
// that stop the whole job. Hidden ([.mpi]): CMake registers each case by its own tag with CTest
// (ctest -R mpi), with a timeout, only when MPI was found (TAPEGRAD_MPIRUN: the launcher found).
#if defined(TAPEGRAD_MPIRUN)
#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "tapegrad/train/checkpoint_file.h"
#include "tests/support/temp_files.h"
#include "tests/cli/cli_support.h"

namespace tg::testing {
namespace {

// `tapegrad <arguments>` on `ranks` processes; `env` is "NAME=VALUE" passed to every rank.
CliResult run_ranks(int ranks, const std::string& arguments, const TempDir& dir, const std::string& env = "") {
  if (ranks == 1) return run_cli(arguments, dir);
  std::string launcher = mpi_launcher(ranks);
  if (!env.empty()) launcher += " -x " + env;
  return run_cli(arguments, dir, launcher);
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
  // Dropout on (0.1, the default) and --batch 8: 4 examples a rank, the global batch's numbering.
  return {
      {"textcls", "texts.tsv", tsv, "--task textcls --tokenizer word --layers 1 --dim 16 --heads 2"},
      {"timeseries", "series.csv", small_csv(), "--task timeseries --window 6 --horizon 2 --layers 1 --dim 16 --heads 2"},
      {"charlm", "text.txt", small_text(), "--task charlm --context 8 --layers 1 --dim 16 --heads 2"},
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
  const std::string common = "--task charlm --context 8 --layers 2 --dim 16 --heads 2 --data '" + data +
                             "' --batch 8 --steps 3 --threads 1 --clip 0.5 --checkpoint-activations --profile ";
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
  const std::string common = "--task charlm --context 8 --layers 1 --dim 16 --heads 2 --data '" + data +
                             "' --batch 8 --steps 4 --threads 1 ";
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
  const CliResult died = run_ranks(2, common + " --steps 6", dir, "TAPEGRAD_TEST_RANK_DIES=1:3");
  INFO(died.err);
  REQUIRE(died.exit_code != 0);
  REQUIRE(died.exit_code != 124);  // timeout(1)'s code: the job hung
  // The surviving rank says in one line why it stopped (or, if MPI noticed first, which call failed).
  const bool said = died.err.find("rank 0 of 2: stopped by the MPI launcher") != std::string::npos ||
                    died.err.find("rank 0: MPI_") != std::string::npos;
  REQUIRE(said);
  REQUIRE(read_bytes(dir.file("model.st")) == good);
}

TEST_CASE("mpi: bad input on one rank is reported once with its rank, and every rank exits with 2", "[.mpi][mpi_bad_input_one_rank]") {
  TempDir dir;
  const std::string data = dir.file("text.txt");
  write_bytes(data, small_text());
  const CliResult bad = run_ranks(2, "train --task charlm --context 8 --layers 1 --data '" + data +
                                         "' --batch 8 --steps 2 --save '" + dir.file("model.st") + "'",
                                  dir, "TAPEGRAD_TEST_RANK_DATA=1:" + dir.file("missing.txt"));
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

}  // namespace tg::testing
#endif  // TAPEGRAD_MPIRUN
