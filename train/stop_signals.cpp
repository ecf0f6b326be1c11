#include "tapegrad/train/stop_signals.h"

#include <signal.h>
#include <sys/time.h>

#include <csignal>

namespace tg::train {
namespace {

// The first stop signal received, 0 before one.
volatile std::sig_atomic_t stop_signal_received = 0;

// The actions before the StopSignals guard, restored by its destructor.
struct sigaction stop_signal_old_int, stop_signal_old_term, stop_signal_old_hup, stop_signal_old_alarm;

// How long a signalled step may take before the signal takes its old action (0: for ever).
volatile std::sig_atomic_t stop_grace_ms = 0;

// Arms (ms > 0) or disarms (0) the one-shot real-time timer that raises SIGALRM.
void stop_signal_timer(int ms) {
  struct itimerval timer {};
  timer.it_value.tv_sec = ms / 1000;
  timer.it_value.tv_usec = (ms % 1000) * 1000;
  setitimer(ITIMER_REAL, &timer, nullptr);
}

// The grace ran out (the step never finished: a data-parallel step waiting for a rank that
// died): the recorded signal again, now with the action it had before the guard.
extern "C" void stop_signal_grace_over(int) { raise(stop_signal_received); }

// The handler: remember the signal, and give the next one the action it had before the guard
// (the default: the process ends).
extern "C" void stop_signal_handler(int signal) {
  stop_signal_received = signal;
  sigaction(SIGINT, &stop_signal_old_int, nullptr);
  sigaction(SIGTERM, &stop_signal_old_term, nullptr);
  sigaction(SIGHUP, &stop_signal_old_hup, nullptr);
  if (stop_grace_ms > 0) stop_signal_timer(stop_grace_ms);
}

// Installs `action` for `signal`, keeping the old one in `old`; a signal ignored when tapegrad
// started (a background job of a shell ignores SIGINT) stays ignored.
void stop_signal_install(int signal, const struct sigaction& action, struct sigaction& old) {
  sigaction(signal, nullptr, &old);
  if (old.sa_handler != SIG_IGN) sigaction(signal, &action, nullptr);
}

}  // namespace

StopSignals::StopSignals(int grace_ms) {
  stop_signal_received = 0;
  stop_grace_ms = grace_ms;
  if (grace_ms > 0) {
    struct sigaction alarm {};
    alarm.sa_handler = stop_signal_grace_over;
    sigemptyset(&alarm.sa_mask);
    sigaction(SIGALRM, &alarm, &stop_signal_old_alarm);
  }
  struct sigaction action {};
  action.sa_handler = stop_signal_handler;
  sigemptyset(&action.sa_mask);
  sigaddset(&action.sa_mask, SIGINT);  // one handler at a time
  sigaddset(&action.sa_mask, SIGTERM);
  sigaddset(&action.sa_mask, SIGHUP);
  action.sa_flags = SA_RESTART;  // a write or a wait in progress continues
  stop_signal_install(SIGINT, action, stop_signal_old_int);
  stop_signal_install(SIGTERM, action, stop_signal_old_term);
  stop_signal_install(SIGHUP, action, stop_signal_old_hup);  // the terminal closed (nohup: ignored)
}

StopSignals::~StopSignals() {
  sigaction(SIGINT, &stop_signal_old_int, nullptr);
  sigaction(SIGTERM, &stop_signal_old_term, nullptr);
  sigaction(SIGHUP, &stop_signal_old_hup, nullptr);
  if (stop_grace_ms > 0) {
    stop_signal_timer(0);
    sigaction(SIGALRM, &stop_signal_old_alarm, nullptr);
  }
}

void StopSignals::step_finished() {
  if (stop_grace_ms > 0) stop_signal_timer(0);
}

int pending_stop_signal() { return stop_signal_received; }

const char* stop_signal_name(int signal) {
  if (signal == SIGINT) return "SIGINT";
  if (signal == SIGTERM) return "SIGTERM";
  if (signal == SIGHUP) return "SIGHUP";
  return "a signal";
}

}  // namespace tg::train
