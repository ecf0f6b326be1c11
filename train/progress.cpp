#include "tapegrad/train/progress.h"

#include <unistd.h>

#include <cstdio>

namespace tg::train {

Progress::Progress(int64_t total_steps, int64_t first_step, bool silent)
    : total_(total_steps), first_(first_step), terminal_(isatty(STDERR_FILENO) != 0), silent_(silent),
      start_(std::chrono::steady_clock::now()) {}

void Progress::update(int64_t step, int64_t epoch, double loss, double lr, double examples_per_s) {
  if (silent_) return;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double per_step = elapsed / static_cast<double>(std::max<int64_t>(1, step - first_));
  const int eta = static_cast<int>(per_step * static_cast<double>(total_ - step));
  if (terminal_) {
    constexpr int kWidth = 24;
    const int filled = static_cast<int>(kWidth * step / std::max<int64_t>(1, total_));
    std::string bar(filled, '=');
    if (filled < kWidth) bar += '>' + std::string(kWidth - filled - 1, ' ');
    std::fprintf(stderr, "\r[%s] %lld/%lld  loss %.4f  %.0f ex/s  ETA %d:%02d ", bar.c_str(),
                 static_cast<long long>(step), static_cast<long long>(total_), loss,
                 examples_per_s, eta / 60, eta % 60);
    std::fflush(stderr);
    bar_drawn_ = true;
    return;
  }
  const int64_t every = std::max<int64_t>(1, total_ / 20);
  if (step % every == 0 || step == total_ || step == first_ + 1) {
    std::fprintf(stderr, "step %lld/%lld  epoch %lld  loss %.4f  lr %.2e  %.0f ex/s  ETA %d:%02d\n",
                 static_cast<long long>(step), static_cast<long long>(total_),
                 static_cast<long long>(epoch), loss, lr, examples_per_s, eta / 60, eta % 60);
  }
}

void Progress::message(const std::string& line) {
  if (silent_) return;
  if (bar_drawn_) std::fputc('\n', stderr);
  bar_drawn_ = false;
  std::fprintf(stderr, "%s\n", line.c_str());
}

void Progress::finish() {
  if (bar_drawn_) std::fputc('\n', stderr);
  bar_drawn_ = false;
}

}  // namespace tg::train
