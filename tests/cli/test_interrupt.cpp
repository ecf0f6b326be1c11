// Checkpoints during training and runs that stop early (train/checkpoint_policy.h,
// train/stop_signals.h): SIGINT or SIGTERM at a step, SIGKILL after a --save-every checkpoint,
// and --patience each resume to the very checkpoint an uninterrupted run writes (the same bytes:
// weights, optimizer state, RNG, step, validation record); --save-best keeps the minimum of the
// logged validation losses. The signals are sent by this process to the tests' tapegrad_hooked,
// which waits at the chosen step for them (tests/distributed/hooked_tapegrad.cpp).
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <random>

#include "tapegrad/io/safetensors.h"
#include "tests/cli/cli_support.h"
#include "tests/support/background_run.h"
#include "tests/support/run_command.h"

using namespace tg::testing;
using Catch::Contains;

namespace {

// 24 steps of a tiny char LM with dropout (so the RNG must resume too), validated every 4 steps,
// on a small text it writes into `dir`.
std::string interrupt_training(const TempDir& dir) {
  write_bytes(dir.file("text.txt"), small_text());
  return "train --task charlm --context 8 --dim 8 --heads 2 --batch 4 --threads 1 --seed 3 "
         "--dropout 0.1 --lr 0.001 --warmup 2 --steps 24 --eval-every 4 --data " +
         dir.file("text.txt");
}

// tapegrad_hooked running `arguments` in the background, waiting at the start of step
// `wait_step` for a signal (`wait_step` "K:twice": for two); stdout and stderr go to files.
BackgroundRun start_hooked(const std::string& arguments, const std::string& wait_step,
                           const TempDir& dir) {
  return start_background("env TAPEGRAD_TEST_WAIT_AT=" + wait_step + " '" + TAPEGRAD_HOOKED_BIN +
                              "' " + arguments + " > '" + dir.file(".hooked-stdout") + "'",
                          dir.file(".hooked-stderr"));
}

// "" when the two checkpoints hold the same metadata and tensors bit for bit, else the first
// difference; then the files must be the same bytes too.
std::string checkpoint_difference(const std::string& a_path, const std::string& b_path) {
  const tg::SafetensorsFile a = tg::load_safetensors(a_path), b = tg::load_safetensors(b_path);
  for (const auto& [key, value] : a.metadata) {
    if (b.metadata.count(key) == 0) return "metadata '" + key + "' only in " + a_path;
    if (b.metadata.at(key) != value) {
      return "metadata '" + key + "': " + value + " vs " + b.metadata.at(key);
    }
  }
  if (a.metadata.size() != b.metadata.size()) return "metadata keys differ";
  if (a.tensors.size() != b.tensors.size()) return "tensor counts differ";
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    const auto& [name, tensor] = a.tensors[i];
    if (b.tensors[i].first != name) return "tensor " + name + " vs " + b.tensors[i].first;
    if (tensor.to_host_f64() != b.tensors[i].second.to_host_f64()) return "tensor " + name;
  }
  return read_bytes(a_path) == read_bytes(b_path) ? "" : "the files' bytes differ";
}

// The resumed run's log continues the interrupted one's: together, the uninterrupted log.
void require_logs_continue(const std::string& first, const std::string& second,
                           const std::string& whole) {
  std::vector<std::string> pieced = log_without_ms(first);
  const std::vector<std::string> rest = log_without_ms(second);
  pieced.insert(pieced.end(), rest.begin() + 1, rest.end());
  REQUIRE(pieced == log_without_ms(whole));
}

// The step a checkpoint was saved after.
int64_t saved_step(const std::string& path) {
  return std::stoll(tg::load_safetensors(path).metadata.at("step"));
}

// Resumes `checkpoint` to the end and requires the uninterrupted run's final checkpoint.
void require_resumes_to(const std::string& checkpoint, const std::string& reference,
                        const TempDir& dir, const std::string& log = "") {
  const std::string final_path = dir.file("final.st");
  const CliResult resumed = run_cli("train --resume " + checkpoint + " --threads 1 --save " +
                                        final_path + (log.empty() ? "" : " --log " + log), dir);
  INFO(resumed.err);
  REQUIRE(resumed.exit_code == 0);
  REQUIRE(checkpoint_difference(final_path, reference) == "");
}

// The validation losses of a --log, by step (the rows that have one).
std::vector<std::pair<int64_t, std::string>> logged_val_losses(const std::string& path) {
  std::vector<std::pair<int64_t, std::string>> losses;
  const std::vector<std::string> lines = lines_of(read_bytes(path));
  std::vector<std::string> header;
  std::stringstream head(lines.at(0));
  for (std::string cell; std::getline(head, cell, ',');) header.push_back(cell);
  const size_t column = std::find(header.begin(), header.end(), "val_loss") - header.begin();
  for (size_t i = 1; i < lines.size(); ++i) {
    std::vector<std::string> cells;
    std::stringstream in(lines[i]);
    for (std::string cell; std::getline(in, cell, ',');) cells.push_back(cell);
    if (column < cells.size() && !cells[column].empty()) {
      losses.emplace_back(std::stoll(cells[0]), cells[column]);
    }
  }
  return losses;
}

}  // namespace

TEST_CASE("train: SIGINT or SIGTERM at a random step saves --save, and it resumes exactly",
          "[cli][interrupt]") {
  TempDir dir;
  const std::string train = interrupt_training(dir);
  const std::string reference = dir.file("whole.st");
  REQUIRE(run_cli(train + " --save " + reference + " --log " + dir.file("whole.csv"), dir)
              .exit_code == 0);
  std::mt19937 steps_drawn(29);  // the steps are this test's choice, the same on every run
  std::uniform_int_distribution<int64_t> step_between(1, 23);
  for (int attempt = 0; attempt < 4; ++attempt) {
    const int64_t step = step_between(steps_drawn);
    const int signal = attempt % 2 == 0 ? SIGINT : SIGTERM;
    WARN("attempt " << attempt << ": " << (signal == SIGINT ? "SIGINT" : "SIGTERM")
                    << " at step " << step);  // the steps drawn, shown on every run
    const std::string cut = dir.file("cut.st");
    const BackgroundRun run = start_hooked(train + " --save " + cut + " --log " +
                                           dir.file("first.csv"), std::to_string(step), dir);
    wait_for_text(run, "waiting at step " + std::to_string(step));
    REQUIRE(kill(run.pid, signal) == 0);
    const int status = wait_for_end(run);
    const std::string err = read_bytes(run.err);
    INFO(err);
    // The step finishes, --save is written, one line says where; 130 or 143.
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) == (signal == SIGINT ? 130 : 143));
    REQUIRE_THAT(err, Contains(std::string(signal == SIGINT ? "SIGINT" : "SIGTERM") +
                               ": stopped after step " + std::to_string(step) + " of 24; saved " +
                               cut + " (continue with: tapegrad train --resume " + cut + ")"));
    REQUIRE(saved_step(cut) == step);
    // (A new log each time: a resumed run continues a log that holds its checkpoint's step.)
    fs::remove(dir.file("second.csv"));
    require_resumes_to(cut, reference, dir, dir.file("second.csv"));
    require_logs_continue(dir.file("first.csv"), dir.file("second.csv"), dir.file("whole.csv"));
  }
}

TEST_CASE("train: a signal without --save says that nothing was saved", "[cli][interrupt]") {
  TempDir dir;
  const BackgroundRun run = start_hooked(interrupt_training(dir), "5", dir);
  wait_for_text(run, "waiting at step 5");
  REQUIRE(kill(run.pid, SIGTERM) == 0);
  const int status = wait_for_end(run);
  INFO(read_bytes(run.err));
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 143);
  REQUIRE_THAT(read_bytes(run.err),
               Contains("SIGTERM: stopped after step 5 of 24; nothing saved (no --save given)"));
}

TEST_CASE("train --save-every: killed with SIGKILL, the last periodic checkpoint resumes exactly",
          "[cli][interrupt]") {
  TempDir dir;
  const std::string train = interrupt_training(dir);
  const std::string reference = dir.file("whole.st");
  REQUIRE(run_cli(train + " --save " + reference, dir).exit_code == 0);
  const std::string periodic = dir.file("periodic.st");
  // Waiting at the start of step 13: steps 5 and 10 were saved, step 12 was not.
  const BackgroundRun run = start_hooked(train + " --save-every 5 --save " + periodic, "13", dir);
  wait_for_text(run, "waiting at step 13");
  REQUIRE(kill(run.pid, SIGKILL) == 0);
  const int status = wait_for_end(run);
  const std::string err = read_bytes(run.err);
  INFO(err);
  REQUIRE(WIFSIGNALED(status));
  REQUIRE(WTERMSIG(status) == SIGKILL);
  REQUIRE_THAT(err, Contains("step 5: saved " + periodic) && Contains("step 10: saved "));
  REQUIRE(saved_step(periodic) == 10);
  require_resumes_to(periodic, reference, dir);
  // An uninterrupted run with --save-every ends with the same checkpoint as one without.
  REQUIRE(run_cli(train + " --save-every 5 --save " + periodic, dir).exit_code == 0);
  REQUIRE(checkpoint_difference(periodic, reference) == "");
}

TEST_CASE("train: a second signal ends the run at once; --save keeps the last checkpoint",
          "[cli][interrupt]") {
  TempDir dir;
  const std::string train = interrupt_training(dir);
  const std::string reference = dir.file("whole.st");
  REQUIRE(run_cli(train + " --save " + reference, dir).exit_code == 0);
  const std::string periodic = dir.file("periodic.st");
  const BackgroundRun run = start_hooked(train + " --save-every 4 --save " + periodic, "11:twice",
                                     dir);
  wait_for_text(run, "waiting at step 11");
  REQUIRE(kill(run.pid, SIGINT) == 0);
  wait_for_text(run, "signal seen at step 11");  // the first one was handled: stop after step 11
  REQUIRE(kill(run.pid, SIGINT) == 0);
  const int status = wait_for_end(run);
  INFO(read_bytes(run.err));
  // Ended by the second signal itself (its default action), before step 11 finished.
  REQUIRE(WIFSIGNALED(status));
  REQUIRE(WTERMSIG(status) == SIGINT);
  REQUIRE(saved_step(periodic) == 8);
  require_resumes_to(periodic, reference, dir);
}

TEST_CASE("train --patience stops where the log predicts; --save-best keeps the minimum",
          "[cli][interrupt]") {
  TempDir dir;
  write_bytes(dir.file("text.txt"), small_text());
  // A constant, large learning rate: the validation loss falls, then wanders.
  const std::string train = "train --task charlm --context 8 --dim 8 --heads 2 --batch 4 "
                            "--threads 1 --seed 3 --dropout 0.1 --steps 40 --eval-every 2 "
                            "--lr 0.1 --warmup 0 --schedule constant --data " +
                            dir.file("text.txt");
  REQUIRE(run_cli(train + " --log " + dir.file("whole.csv"), dir).exit_code == 0);
  // By hand from the log: the best so far, and the first evaluation that is the 3rd in a row
  // not below it (before the last step, where the run ends anyway).
  const int64_t patience = 3;
  const auto losses = logged_val_losses(dir.file("whole.csv"));
  REQUIRE(losses.size() == 20);
  double best = INFINITY;
  int64_t best_step = 0, since = 0, predicted_stop = 0;
  std::string best_text;
  for (const auto& [step, text] : losses) {
    if (std::stod(text) < best) {
      best = std::stod(text), best_step = step, best_text = text, since = 0;
    } else if (++since == patience && step < 40) {
      predicted_stop = step;
      break;
    }
  }
  INFO("predicted: stop after step " << predicted_stop << ", best " << best_text << " after step "
                                      << best_step);
  REQUIRE(predicted_stop > 0);  // the run does stop early (else this test would check nothing)

  const std::string flags = " --patience 3 --save-best " + dir.file("best.st");
  const CliResult stopped = run_cli(train + flags + " --save " + dir.file("stopped.st") +
                                        " --log " + dir.file("stopped.csv"), dir);
  INFO(stopped.err);
  REQUIRE(stopped.exit_code == 0);
  const std::string at = std::to_string(predicted_stop);
  REQUIRE_THAT(stopped.err, Contains("early stop after step " + at + ": the val loss has not "
                                     "improved for 3 evaluations (best " + best_text +
                                     " after step " + std::to_string(best_step) + ")"));
  REQUIRE_THAT(stopped.out, Contains("trained " + at + " steps (" + at + "/40)"));
  // The log is the whole run's, up to the stop; --save is the stopped run's last step.
  std::vector<std::string> expected = log_without_ms(dir.file("whole.csv"));
  expected.resize(1 + predicted_stop);
  REQUIRE(log_without_ms(dir.file("stopped.csv")) == expected);
  REQUIRE(saved_step(dir.file("stopped.st")) == predicted_stop);
  // --save-best: the checkpoint of the best step, storing the loss the log shows there.
  const tg::SafetensorsFile best_file = tg::load_safetensors(dir.file("best.st"));
  REQUIRE(best_file.metadata.at("step") == std::to_string(best_step));
  REQUIRE(best_file.metadata.at("best_val_step") == std::to_string(best_step));
  char shown[32];
  std::snprintf(shown, sizeof shown, "%.6g", std::stod(best_file.metadata.at("best_val_loss")));
  REQUIRE(shown == best_text);

  // Cut before the stop and resumed with the same --patience: the count goes on, the run stops
  // at the same step with the same checkpoint.
  const int64_t cut_at = predicted_stop - 3;
  REQUIRE(run_cli(train + flags + " --stop-after " + std::to_string(cut_at) + " --save " +
                      dir.file("cut.st"), dir).exit_code == 0);
  const CliResult resumed = run_cli("train --resume " + dir.file("cut.st") + " --threads 1" +
                                        flags + " --save " + dir.file("resumed.st"), dir);
  INFO(resumed.err);
  REQUIRE(resumed.exit_code == 0);
  REQUIRE_THAT(resumed.err, Contains("early stop after step " + at));
  REQUIRE(checkpoint_difference(dir.file("resumed.st"), dir.file("stopped.st")) == "");
}

TEST_CASE("train: SIGHUP stops after the step like SIGINT, saves --save and exits 129",
          "[cli][interrupt]") {
  TempDir dir;
  const std::string cut = dir.file("cut.st");
  const BackgroundRun run = start_hooked(interrupt_training(dir) + " --save " + cut, "6", dir);
  wait_for_text(run, "waiting at step 6");
  REQUIRE(kill(run.pid, SIGHUP) == 0);
  const int status = wait_for_end(run);
  INFO(read_bytes(run.err));
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 129);  // 128 + SIGHUP's 1
  REQUIRE_THAT(read_bytes(run.err), Contains("SIGHUP: stopped after step 6 of 24; saved " + cut));
  REQUIRE(saved_step(cut) == 6);
}

TEST_CASE("train: Ctrl-C that also ends the --log pipe's reader still writes --save first",
          "[cli][interrupt]") {
  // `train --log /dev/stdout | tee log.csv` and Ctrl-C: the terminal signals the whole group, tee
  // ends, and the step's log row meets a closed pipe (EPIPE). Here the test holds the pipe's read
  // end (tee), closes it, then sends SIGINT.
  TempDir dir;
  const std::string train = interrupt_training(dir);
  const std::string reference = dir.file("whole.st");
  REQUIRE(run_cli(train + " --save " + reference, dir).exit_code == 0);
  const std::string pipe = dir.file("pipe"), cut = dir.file("cut.st");
  REQUIRE(::mkfifo(pipe.c_str(), 0600) == 0);
  const int reader = ::open(pipe.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);  // (not the run's)
  REQUIRE(reader >= 0);
  const BackgroundRun run = start_hooked(train + " --log " + pipe + " --save " + cut, "7", dir);
  wait_for_text(run, "waiting at step 7");
  REQUIRE(::close(reader) == 0);  // tee has ended
  REQUIRE(kill(run.pid, SIGINT) == 0);
  const int status = wait_for_end(run);
  const std::string err = read_bytes(run.err);
  INFO(err);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 130);
  REQUIRE_THAT(err, Contains("--log: writing '" + pipe + "' failed: Broken pipe"));
  REQUIRE_THAT(lines_of(err).back(),
               Contains("SIGINT: stopped after step 7 of 24; saved " + cut));
  REQUIRE(saved_step(cut) == 7);
  require_resumes_to(cut, reference, dir);
}

TEST_CASE("train: a --save-best that fails mid-run does not cost --save", "[cli][interrupt]") {
  TempDir dir;
  const std::string train = interrupt_training(dir);  // validated every 4 steps
  fs::create_directory(dir.file("best"));
  const std::string cut = dir.file("cut.st");
  const BackgroundRun run = start_hooked(train + " --save-best " + dir.file("best/b.st") +
                                             " --save " + cut, "8", dir);
  wait_for_text(run, "waiting at step 8");
  fs::remove_all(dir.file("best"));  // step 8's evaluation cannot write its checkpoint now
  REQUIRE(kill(run.pid, SIGTERM) == 0);
  const int status = wait_for_end(run);
  const std::string err = read_bytes(run.err);
  INFO(err);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 143);
  REQUIRE_THAT(err, Contains("--save-best: save_safetensors: cannot create a temporary file") &&
                        Contains("next to '" + dir.file("best/b.st") + "': No such file or directory"));
  REQUIRE(saved_step(cut) == 8);
}

TEST_CASE("train: the command a stopped run prints continues it verbatim and saves",
          "[cli][interrupt]") {
  TempDir dir;
  const std::string train = interrupt_training(dir);
  // A name a shell would split and unquote, unless the hint quotes it.
  const std::string cut = dir.file("it's a run.st");
  const BackgroundRun run =
      start_hooked(train + " --save \"" + cut + "\"", "9", dir);
  wait_for_text(run, "waiting at step 9");
  REQUIRE(kill(run.pid, SIGINT) == 0);
  const int status = wait_for_end(run);
  const std::string err = read_bytes(run.err);
  INFO(err);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 130);
  const std::string marker = "(continue with: tapegrad ";
  const size_t start = err.find(marker), end = err.rfind(')');
  REQUIRE(start != std::string::npos);
  const std::string hint_arguments = err.substr(start + marker.size(), end - start - marker.size());
  // The hint as printed, tapegrad being the binary under test: it trains steps 10-24 and saves
  // them back to the file it resumed.
  const auto [output, code] = run_command("'" TAPEGRAD_BIN "' " + hint_arguments + " 2>&1");
  INFO(hint_arguments << "\n" << output);
  REQUIRE(code == 0);
  REQUIRE_THAT(output, Contains("trained 15 steps (24/24)"));
  REQUIRE(saved_step(cut) == 24);
}
