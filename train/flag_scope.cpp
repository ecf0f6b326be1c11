#include "tapegrad/train/flag_scope.h"

#include "tapegrad/autograd/device.h"
#include "tapegrad/autograd/error.h"

namespace tg::train {

void check_flags_apply(const std::set<std::string>& given, const std::vector<FlagScope>& table) {
  for (const FlagScope& scope : table) {
    if (scope.applies) continue;
    for (const std::string& flag : scope.flags) {
      TG_CHECK(given.count(flag) == 0, "--", flag, " does not apply to ", scope.setting);
    }
  }
}

FlagScope tf32_scope(const std::string& device) {
  return {{"tf32"}, parse_device(device).type == DeviceType::cuda, "--device " + device};
}

}  // namespace tg::train
