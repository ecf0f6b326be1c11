#pragma once
// Training progress on stderr: a one-line bar redrawn in place when stderr is a terminal,
// plain periodic lines when it is not (logs, CI).
#include <chrono>
#include <cstdint>
#include <string>

namespace tg::train {

class Progress {
 public:
  // silent: prints nothing (the ranks other than 0 of a data-parallel job)
  Progress(int64_t total_steps, int64_t first_step, bool silent = false);
  // After each step: the step just done (1-based), the batch loss and examples per second.
  void update(int64_t step, int64_t epoch, double loss, double lr, double examples_per_s);
  void message(const std::string& line);  // a line that does not disturb the bar
  void finish();
  bool silent() const { return silent_; }

 private:
  int64_t total_, first_;
  bool terminal_;
  bool silent_;
  bool bar_drawn_ = false;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace tg::train
