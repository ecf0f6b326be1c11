#include "tapegrad/plot/module_panels.h"

#include <algorithm>
#include <cstddef>
#include <map>
#include <string>

namespace tg::plot {
namespace {

using ModuleParts = std::vector<std::string>;
using PanelMembers = std::vector<size_t>;  // indices of series

// One panel's series, and whether several groups (modules) were packed into it.
struct PackedPanel {
  PanelMembers members;
  bool packed = false;
};

// "layers.0.attn.q_proj.weight" -> layers.0, attn, q_proj, weight.
ModuleParts module_parts(const std::string& name) {
  ModuleParts parts;
  for (size_t start = 0;;) {
    const size_t dot = name.find('.', start);
    const std::string part = name.substr(start, dot == std::string::npos ? dot : dot - start);
    const bool number = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) {
      return c >= '0' && c <= '9';
    });
    if (number && !parts.empty()) {
      parts.back() += "." + part;
    } else {
      parts.push_back(part);
    }
    if (dot == std::string::npos) return parts;
    start = dot + 1;
  }
}

// The parts joined back with dots, from `first` on.
std::string module_joined(const ModuleParts& parts, size_t first) {
  std::string text;
  for (size_t i = first; i < parts.size(); ++i) text += (i == first ? "" : ".") + parts[i];
  return text;
}

// `members` split by their part at `depth`, in order of first appearance; a member without one
// (its whole name is the path the others share) is a group of its own.
std::vector<PanelMembers> module_split(const std::vector<ModuleParts>& parts,
                                       const PanelMembers& members, size_t depth) {
  std::vector<PanelMembers> groups;
  std::map<std::string, size_t> group_of;
  for (const size_t m : members) {
    if (depth >= parts[m].size()) {
      groups.push_back({m});
      continue;
    }
    const auto [entry, added] = group_of.try_emplace(parts[m][depth], groups.size());
    if (added) groups.emplace_back();
    groups[entry->second].push_back(m);
  }
  return groups;
}

// Whether some member has a part past `depth`, which a further split could tell apart.
bool module_splittable(const std::vector<ModuleParts>& parts, const PanelMembers& members,
                       size_t depth) {
  return std::any_of(members.begin(), members.end(),
                     [&](size_t m) { return parts[m].size() > depth + 1; });
}

// Appends the panels of `members` (which share their first `depth` parts) to `panels`.
void module_group(const std::vector<ModuleParts>& parts, const PanelMembers& members,
                  size_t depth, std::vector<PackedPanel>& panels) {
  PackedPanel packed;  // consecutive groups that fit, sharing a panel
  int groups = 0;      // ... how many
  const auto flush = [&] {
    packed.packed = groups > 1;
    if (!packed.members.empty()) panels.push_back(packed);
    packed.members.clear();
    groups = 0;
  };
  for (const PanelMembers& group : module_split(parts, members, depth)) {
    if (group.size() <= kMaxLinesPerPanel) {
      if (packed.members.size() + group.size() > kMaxLinesPerPanel) flush();
      packed.members.insert(packed.members.end(), group.begin(), group.end());
      ++groups;
      continue;
    }
    flush();
    if (module_splittable(parts, group, depth)) {
      module_group(parts, group, depth + 1, panels);
      continue;
    }
    // Names alike to the last part (duplicates): in panels of kMaxLinesPerPanel, in order.
    for (size_t i = 0; i < group.size(); i += kMaxLinesPerPanel) {
      const size_t end = std::min(group.size(), i + kMaxLinesPerPanel);
      panels.push_back({PanelMembers(group.begin() + i, group.begin() + end), false});
    }
  }
  flush();
}

// How many leading parts the members share, not counting any member's last part.
size_t module_shared_parts(const std::vector<ModuleParts>& parts, const PanelMembers& members) {
  size_t shared = parts[members[0]].size() - 1;
  for (const size_t m : members) {
    shared = std::min(shared, parts[m].size() - 1);
    size_t k = 0;
    while (k < shared && parts[m][k] == parts[members[0]][k]) ++k;
    shared = k;
  }
  return shared;
}

// ": norm2, mlp": the modules under the members' shared path (for groups packed into one panel).
std::string module_submodules(const std::vector<ModuleParts>& parts, const PanelMembers& members,
                              size_t shared) {
  ModuleParts modules;
  for (const size_t m : members) {
    const bool module = parts[m].size() > shared + 1;  // not the tensor's own name
    if (module && std::find(modules.begin(), modules.end(), parts[m][shared]) == modules.end()) {
      modules.push_back(parts[m][shared]);
    }
  }
  if (modules.size() < 2) return "";
  std::string text = ": ";
  for (size_t i = 0; i < modules.size(); ++i) text += (i == 0 ? "" : ", ") + modules[i];
  return text;
}

// One panel: its title, and its series under the rest of their names.
LinePanel module_panel(const std::vector<Series>& series, const std::vector<ModuleParts>& parts,
                       const PackedPanel& packed) {
  const PanelMembers& members = packed.members;
  LinePanel panel;
  const size_t shared = module_shared_parts(parts, members);
  const ModuleParts& some = parts[members[0]];
  ModuleParts title_parts(some.begin(), some.begin() + static_cast<std::ptrdiff_t>(shared));
  for (const size_t m : members) {
    const std::string& first = parts[m][0];
    const bool named =
        std::find(title_parts.begin(), title_parts.end(), first) != title_parts.end();
    if (shared == 0 && !named) title_parts.push_back(first);  // no shared path: each module
    panel.series.push_back(series[m]);
    panel.series.back().name = module_joined(parts[m], shared);
  }
  if (shared == 0 && title_parts.size() > 3) {  // modules of their own: the first few named
    const size_t more = title_parts.size() - 3;
    title_parts.resize(3);
    title_parts.back() += " and " + std::to_string(more) + " more";
  }
  for (const std::string& part : title_parts) {
    panel.title += (panel.title.empty() ? "" : shared > 0 ? "." : ", ") + part;
  }
  if (shared > 0 && packed.packed) panel.title += module_submodules(parts, members, shared);
  return panel;
}

}  // namespace

std::vector<LinePanel> panels_by_module(const std::vector<Series>& series) {
  std::vector<ModuleParts> parts;
  PanelMembers everyone;
  for (size_t i = 0; i < series.size(); ++i) {
    parts.push_back(module_parts(series[i].name));
    everyone.push_back(i);
  }
  std::vector<PackedPanel> grouped;
  module_group(parts, everyone, 0, grouped);
  std::vector<LinePanel> panels;
  for (const PackedPanel& packed : grouped) panels.push_back(module_panel(series, parts, packed));
  return panels;
}

}  // namespace tg::plot
