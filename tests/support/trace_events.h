#pragma once
// Reading a Chrome trace (runtime/trace.h) in tests: its events by phase, its slices by name and
// its steps' slices in order.
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace tg::testing {

// The events whose "ph" is `phase` ("X" slices, "C" counters, "M" names), in file order.
inline std::vector<nlohmann::json> events_with(const nlohmann::json& trace, const std::string& phase) {
  std::vector<nlohmann::json> events;
  for (const nlohmann::json& event : trace["traceEvents"]) {
    if (event["ph"] == phase) events.push_back(event);
  }
  return events;
}

inline std::vector<nlohmann::json> slices_named(const nlohmann::json& trace, const std::string& name) {
  std::vector<nlohmann::json> slices;
  for (const nlohmann::json& event : events_with(trace, "X")) {
    if (event["name"] == name) slices.push_back(event);
  }
  return slices;
}

// The names of the whole-step slices ("ProfilerStep#3", ...), in file order.
inline std::vector<std::string> step_slice_names(const nlohmann::json& trace) {
  std::vector<std::string> names;
  for (const nlohmann::json& event : events_with(trace, "X")) {
    if (event["cat"] == "step") names.push_back(event["name"]);
  }
  return names;
}

}  // namespace tg::testing
