#pragma once
// Which flags apply where: the one rule behind "--tokenizer does not apply to --task charlm".
// Each command builds a table of FlagScope rows once it knows the setting (the task, the device,
// the workload, the checkpoint it loaded), and checks the flags typed on its command line against
// it in one place. A flag the setting ignores is an error, never silently dropped.
#include <set>
#include <string>
#include <vector>

namespace tg::train {

// Some flags and whether they apply in this run; when they do not, `setting` names what they do
// not apply to ("--task charlm", "--device cpu", "a textcls checkpoint").
struct FlagScope {
  std::vector<std::string> flags;  // option names without the dashes
  bool applies = true;
  std::string setting;
};

// Throws tg::Error "--FLAG does not apply to SETTING" for the first row, in table order, that
// does not apply and names a flag of `given` (the option names typed, without dashes).
void check_flags_apply(const std::set<std::string>& given, const std::vector<FlagScope>& table);

// The row every command with --device shares: --tf32 applies to a CUDA device only. `device` is
// the --device text (a malformed one is parse_device's tg::Error).
FlagScope tf32_scope(const std::string& device);

}  // namespace tg::train
