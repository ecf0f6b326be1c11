#pragma once
// Ctrl-C during training: SIGINT, SIGTERM and SIGHUP (the terminal or the ssh session closed) ask
// the trainer to stop after the current step.
//
// While a StopSignals object lives (the training steps), the first SIGINT, SIGTERM or SIGHUP is
// only recorded: the handler stores its number in a sig_atomic_t and gives the three signals back
// the actions they had before (sigaction, an async-signal-safe call). The trainer reads the number
// after each step, writes the resumable checkpoint to --save and exits with 128 + the number (130
// for SIGINT, 143 for SIGTERM, 129 for SIGHUP, what a shell reports for a process the signal
// ended). A second
// signal therefore ends the process at once, as a second Ctrl-C does in PyTorch: a checkpoint
// being saved is left as it was (the save is atomic; the next save to that path sweeps the
// temporary). Outside the
// steps (reading the data, building the model, the final save) the signals keep their default.
// A signal that was ignored when the guard was made (SIGINT in a shell's background job, SIGHUP
// under nohup) stays ignored.
//
// A data-parallel step may never finish: a rank that died leaves the others waiting in a
// collective, and the launcher then sends them SIGTERM (and SIGKILL a little later). So a guard
// made with a grace (the trainer gives one when there are several ranks) arms a timer with the
// first signal; if the step has not finished (step_finished()) when it runs out, the signal is
// raised again and takes its old action at once (the launcher's line and exit 143).
namespace tg::train {

class StopSignals {
 public:
  // Installs the handler for SIGINT, SIGTERM and SIGHUP, forgetting an earlier signal; grace_ms > 0: a
  // signal must be followed by step_finished() within that time.
  explicit StopSignals(int grace_ms = 0);
  ~StopSignals();  // restores the actions there were before
  static void step_finished();  // the signalled step ended: the grace timer is disarmed
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
};

// The signal received while a StopSignals lived (SIGINT, SIGTERM or SIGHUP), or 0.
int pending_stop_signal();

// "SIGINT", "SIGTERM", "SIGHUP" (or "a signal").
const char* stop_signal_name(int signal);

}  // namespace tg::train
