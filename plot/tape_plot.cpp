#include "tapegrad/plot/tape_plot.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>
#include <utility>

#include "tapegrad/autograd/error.h"
#include "tapegrad/plot/png.h"
#include "tapegrad/plot/tape_style.h"

namespace tg::plot {
namespace {

// Who reads whom in a TapeGraph: the nodes each node reads (one entry an input) and is read by.
struct TapeLinks {
  std::vector<std::vector<size_t>> inputs, readers;
};

TapeLinks tape_links(const TapeGraph& graph) {
  TapeLinks links{std::vector<std::vector<size_t>>(graph.nodes.size()),
                  std::vector<std::vector<size_t>>(graph.nodes.size())};
  for (const TapeEdge& edge : graph.edges) {
    links.inputs[edge.to].push_back(edge.from);
    links.readers[edge.from].push_back(edge.to);
  }
  return links;
}

bool is_tape_op(const TapeGraph& graph, size_t node) {
  return graph.nodes[node].kind == TapeNodeKind::op;
}

// Each parameter's group from its name (groups numbered in tape order), -1 elsewhere.
std::vector<int> tape_parameter_groups(const TapeGraph& graph, std::vector<std::string>& names) {
  std::vector<int> group(graph.nodes.size(), -1);
  for (size_t node = 0; node < graph.nodes.size(); ++node) {
    if (graph.nodes[node].kind != TapeNodeKind::parameter) continue;
    const std::string name = layer_group_name(graph.nodes[node].name);
    if (name.empty()) continue;
    const auto known = std::find(names.begin(), names.end(), name);
    group[node] = static_cast<int>(known - names.begin());
    if (known == names.end()) names.push_back(name);
  }
  return group;
}

// The latest group each node depends on (nodes come in tape order: inputs first).
std::vector<int> tape_latest_groups(const TapeGraph& graph, const TapeLinks& links,
                                    const std::vector<int>& parameter_group) {
  std::vector<int> latest = parameter_group;
  for (size_t node = 0; node < graph.nodes.size(); ++node) {
    for (const size_t input : links.inputs[node])
      latest[node] = std::max(latest[node], latest[input]);
  }
  return latest;
}

// The ops of a group that lead, within it, to an op reading one of its parameters.
std::vector<bool> tape_group_cores(const TapeGraph& graph, const TapeLinks& links,
                                   const std::vector<int>& parameter_group,
                                   const std::vector<int>& latest) {
  std::vector<bool> core(graph.nodes.size(), false);
  for (size_t node = graph.nodes.size(); node-- > 0;) {
    if (!is_tape_op(graph, node) || latest[node] < 0) continue;
    for (const size_t input : links.inputs[node])
      core[node] = core[node] || parameter_group[input] == latest[node];
    for (const size_t reader : links.readers[node]) {
      core[node] = core[node] || (core[reader] && latest[reader] == latest[node]);
    }
  }
  return core;
}

// How many of an op's inputs are its group's values (core or tail so far, `in_group`); -1 when
// it reads a parameter or an op outside the group (it cannot be in the group's tail).
int tape_tail_inputs(const TapeGraph& graph, const TapeLinks& links, size_t node,
                     const std::vector<int>& latest, const std::vector<bool>& in_group) {
  int from_group = 0;
  for (const size_t input : links.inputs[node]) {
    const TapeNodeKind kind = graph.nodes[input].kind;
    if (kind == TapeNodeKind::parameter) return -1;
    if (kind != TapeNodeKind::op) continue;
    if (latest[input] != latest[node] || !in_group[input]) return -1;
    ++from_group;
  }
  return from_group;
}

// The ops after a group's core that read no parameter and only the group's values, kept when they
// lead to an op joining two of the group's values (the residual add that ends a layer).
std::vector<bool> tape_group_tails(const TapeGraph& graph, const TapeLinks& links,
                                   const std::vector<int>& latest, const std::vector<bool>& core) {
  const size_t count = graph.nodes.size();
  std::vector<bool> in_group = core, candidate(count, false), kept(count, false);
  for (size_t node = 0; node < count; ++node) {
    if (!is_tape_op(graph, node) || latest[node] < 0 || core[node]) continue;
    const int from_group = tape_tail_inputs(graph, links, node, latest, in_group);
    candidate[node] = in_group[node] = from_group >= 0;
    kept[node] = from_group >= 2;  // a join
  }
  for (size_t node = count; node-- > 0;) {  // and what leads to a join
    for (const size_t reader : links.readers[node]) {
      kept[node] = kept[node] || (kept[reader] && candidate[node] && candidate[reader]);
    }
  }
  return kept;
}

// The label and tooltip of one node's box.
TapeBox tape_node_box(const TapeNode& node, bool output) {
  TapeBox box;
  box.kind = output                                 ? TapeBoxKind::output
             : node.kind == TapeNodeKind::parameter ? TapeBoxKind::parameter
             : node.kind == TapeNodeKind::data      ? TapeBoxKind::data
                                                    : TapeBoxKind::op;
  box.lines = tape_node_lines(node);
  if (output) box.lines.push_back("(the loss)");
  for (const std::string& line : box.lines) box.details += (box.details.empty() ? "" : "\n") + line;
  if (node.kind == TapeNodeKind::op) {
    box.details += "\ntape position " + std::to_string(node.sequence) + ", " +
                   std::to_string(node.saved_tensors) + " tensors saved for backward";
  }
  return box;
}

// The one box of a collapsed group: its name, what it holds, and that a click opens it.
TapeBox tape_group_box(const TapeGraph& graph, const TapeGroups& groups, int group) {
  int64_t ops = 0, parameters = 0, saved = 0;
  for (size_t node = 0; node < graph.nodes.size(); ++node) {
    if (groups.group_of[node] != group) continue;
    ops += graph.nodes[node].kind == TapeNodeKind::op;
    parameters += graph.nodes[node].kind == TapeNodeKind::parameter;
    saved += graph.nodes[node].saved_bytes;
  }
  TapeBox box;
  box.kind = TapeBoxKind::group;
  box.group = group;
  box.lines = {groups.names[group],
               std::to_string(ops) + " ops, " + std::to_string(parameters) + " parameters",
               "saved " + format_bytes(saved), "click to expand"};
  box.details = box.lines[0] + ": " + box.lines[1] + ", " + box.lines[2];
  return box;
}

}  // namespace

std::string layer_group_name(const std::string& parameter) {
  const std::string word = "layers.";
  for (size_t at = parameter.find(word); at != std::string::npos;
       at = parameter.find(word, at + 1)) {
    if (at > 0 && parameter[at - 1] != '.') continue;
    size_t end = at + word.size();
    while (end < parameter.size() && std::isdigit(static_cast<unsigned char>(parameter[end])))
      ++end;
    if (end > at + word.size() && end < parameter.size() && parameter[end] == '.') {
      return parameter.substr(0, end);
    }
  }
  return "";
}

TapeGroups layer_groups(const TapeGraph& graph) {
  TapeGroups groups;
  const TapeLinks links = tape_links(graph);
  const std::vector<int> parameter_group = tape_parameter_groups(graph, groups.names);
  const std::vector<int> latest = tape_latest_groups(graph, links, parameter_group);
  const std::vector<bool> core = tape_group_cores(graph, links, parameter_group, latest);
  const std::vector<bool> tail = tape_group_tails(graph, links, latest, core);
  groups.group_of = parameter_group;
  for (size_t node = 0; node < graph.nodes.size(); ++node) {
    if (core[node] || tail[node]) groups.group_of[node] = latest[node];
  }
  for (size_t node = 0; node < graph.nodes.size(); ++node) {  // data: with the op reading it
    if (graph.nodes[node].kind == TapeNodeKind::data && !links.readers[node].empty()) {
      groups.group_of[node] = groups.group_of[links.readers[node].front()];
    }
  }
  return groups;
}

TapeView tape_view(const TapeGraph& graph, const TapeGroups& groups,
                   const std::vector<bool>& expanded) {
  TapeView view;
  std::vector<size_t> box_of(graph.nodes.size());
  std::vector<int> group_box_index(groups.names.size(), -1);
  for (size_t node = 0; node < graph.nodes.size(); ++node) {
    const int group = groups.group_of[node];
    if (group >= 0 && !expanded[group]) {
      if (group_box_index[group] < 0) {
        group_box_index[group] = static_cast<int>(view.boxes.size());
        view.boxes.push_back(tape_group_box(graph, groups, group));
      }
      box_of[node] = static_cast<size_t>(group_box_index[group]);
      continue;
    }
    box_of[node] = view.boxes.size();
    view.boxes.push_back(tape_node_box(graph.nodes[node], node == graph.output()));
    view.boxes.back().group = group;
  }
  std::set<std::pair<size_t, size_t>> merged;  // the arrows at a collapsed group, once each
  for (const TapeEdge& edge : graph.edges) {
    const size_t from = box_of[edge.from], to = box_of[edge.to];
    if (from == to) continue;
    const bool at_group =
        view.boxes[from].kind == TapeBoxKind::group || view.boxes[to].kind == TapeBoxKind::group;
    if (at_group && !merged.insert({from, to}).second) continue;
    view.edges.push_back({from, to});
  }
  return view;
}

}  // namespace tg::plot
