#include "tapegrad/distributed/job.h"

#include <algorithm>

namespace tg::dist {
namespace {

// The step hook tapegrad_hooked installs (none in the installed tapegrad).
StepHook& installed_step_hook() {
  static StepHook hook = nullptr;
  return hook;
}

// One "name=value" line of a definition's text, a newline inside either written as \n.
std::string definition_line(const std::string& name, const std::string& value) {
  std::string line = name + "=" + value;
  for (size_t at = line.find('\n'); at != std::string::npos; at = line.find('\n', at + 2)) {
    line.replace(at, 1, "\\n");
  }
  return line;
}

// The lines of a definition's text (each ends with '\n').
std::vector<std::string> definition_lines(const std::string& text) {
  std::vector<std::string> lines;
  for (size_t start = 0; start < text.size();) {
    const size_t end = std::min(text.find('\n', start), text.size());
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

// The setting a definition line names: what comes before its first '='.
std::string setting_name(const std::string& line) { return line.substr(0, line.find('=')); }

// How a rank's side of a differing line reads: the value when both name the same setting, else
// the whole line (or "nothing" when the rank's list ended).
std::string agreement_side(const std::string& line, bool found, bool same_name) {
  if (!found) return "nothing";
  return same_name ? line.substr(line.find('=') + 1) : "'" + line + "'";
}

}  // namespace

void setup_succeeded(Communicator& comm) {
  if (comm.size() == 1) return;
  if (comm.allreduce_min(comm.size()) < comm.size()) throw JobStopped("", 2);
}

void setup_failed(Communicator& comm, const std::string& what) {
  if (comm.size() == 1) throw JobStopped(what, 2);
  const int64_t first_failed = comm.allreduce_min(comm.rank());
  if (first_failed != comm.rank()) throw JobStopped("", 2);
  throw JobStopped("rank " + std::to_string(comm.rank()) + " of " + std::to_string(comm.size()) + ": " + what, 2);
}

std::string definition_text(const RunDefinition& definition) {
  std::string text;
  for (const auto& [name, value] : definition) text += definition_line(name, value) + "\n";
  return text;
}

std::string first_disagreement(const std::string& rank0_text, const std::string& own_text,
                               int rank) {
  const std::vector<std::string> rank0 = definition_lines(rank0_text);
  const std::vector<std::string> own = definition_lines(own_text);
  for (size_t i = 0; i < std::max(rank0.size(), own.size()); ++i) {
    const bool rank0_has = i < rank0.size(), own_has = i < own.size();
    if (rank0_has && own_has && rank0[i] == own[i]) continue;
    const std::string rank0_line = rank0_has ? rank0[i] : "", own_line = own_has ? own[i] : "";
    const bool same_name =
        rank0_has && own_has && setting_name(rank0_line) == setting_name(own_line);
    return "ranks disagree on " + (same_name ? setting_name(rank0_line) : "the run's settings") +
           ": rank 0 has " + agreement_side(rank0_line, rank0_has, same_name) + ", rank " +
           std::to_string(rank) + " has " + agreement_side(own_line, own_has, same_name);
  }
  return "";
}

void check_ranks_agree(Communicator& comm, const RunDefinition& definition) {
  if (comm.size() == 1) return;
  const std::string own = definition_text(definition);
  int64_t length = static_cast<int64_t>(own.size());
  comm.broadcast(&length, sizeof length, 0);
  std::string rank0 = comm.rank() == 0 ? own : std::string(static_cast<size_t>(length), '\0');
  comm.broadcast(rank0.data(), length, 0);
  const std::string difference = first_disagreement(rank0, own, comm.rank());
  const int64_t first_differing =
      comm.allreduce_min(difference.empty() ? comm.size() : comm.rank());
  if (first_differing == comm.size()) return;
  throw JobStopped(first_differing == comm.rank() ? difference : "", 2);
}

void set_step_hook(StepHook hook) { installed_step_hook() = hook; }

void run_step_hook(const Communicator& comm, long long step) {
  if (installed_step_hook() != nullptr) installed_step_hook()(comm.rank(), step);
}

}  // namespace tg::dist
