#include "tapegrad/train/legacy_names.h"

#include <algorithm>
#include <utility>

namespace tg::train {
namespace {

struct Rename {
  const char* task;
  const char* old_prefix;
  const char* new_prefix;
};

// Every rename, oldest first.
constexpr Rename kRenames[] = {
    {"textcls", "classifier.", "fc."},
};

bool has_name(const nn::NamedTensors& tensors, const std::string& name) {
  return std::any_of(tensors.begin(), tensors.end(), [&](const auto& entry) { return entry.first == name; });
}

}  // namespace

int rename_legacy_tensors(const std::string& task, nn::NamedTensors& model) {
  int renamed = 0;
  for (const Rename& rename : kRenames) {
    if (task != rename.task) continue;
    const std::string old_prefix = rename.old_prefix;
    for (auto& [name, tensor] : model) {
      if (name.rfind(old_prefix, 0) != 0) continue;
      std::string new_name = rename.new_prefix + name.substr(old_prefix.size());
      if (has_name(model, new_name)) continue;
      name = std::move(new_name);
      ++renamed;
    }
  }
  return renamed;
}

}  // namespace tg::train
