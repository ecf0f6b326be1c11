#include "tapegrad/train/grad_health.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>

namespace tg::train {
namespace {

// A norm or a ratio in a finding: %.3g, inf and NaN spelled one way.
std::string health_number(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", value);
  return text;
}

// "a, b, c".
std::string health_joined(const std::vector<std::string>& items) {
  std::string text;
  for (const std::string& item : items) text += (text.empty() ? "" : ", ") + item;
  return text;
}

// The first `count` of `names` joined, and how many more there are: "a, b and 3 more".
std::string health_first_of(const std::vector<std::string>& names, size_t count) {
  if (names.size() <= count) return health_joined(names);
  const std::vector<std::string> first(names.begin(), names.begin() + count);
  return health_joined(first) + " and " + std::to_string(names.size() - count) + " more";
}

// Where an explosion is: the parameters whose gradient holds inf or NaN, and the three largest
// finite gradients with their norms. Adds the parameters it names to `named`.
std::string health_culprits(std::vector<ParameterNorms> norms, std::vector<std::string>& named) {
  std::erase_if(norms, [](const ParameterNorms& p) { return !p.has_grad; });
  const auto size = [](double norm) { return std::isnan(norm) ? INFINITY : norm; };  // an order
  std::stable_sort(norms.begin(), norms.end(), [&](const auto& a, const auto& b) {
    return size(a.grad_norm) > size(b.grad_norm);
  });
  std::vector<std::string> broken, largest;
  for (const ParameterNorms& p : norms) {
    if (!std::isfinite(p.grad_norm)) {
      broken.push_back(p.name);
    } else if (largest.size() < 3) {
      largest.push_back(p.name + " " + health_number(p.grad_norm));
      named.push_back(p.name);
    }
  }
  std::string text;
  if (!broken.empty()) {
    text += "; inf or NaN gradients in " + std::to_string(broken.size()) + " of " +
            std::to_string(norms.size()) + " parameters: " + health_first_of(broken, 3);
    const size_t shown = std::min<size_t>(3, broken.size());
    named.insert(named.begin(), broken.begin(), broken.begin() + static_cast<std::ptrdiff_t>(shown));
  }
  if (!largest.empty()) {
    text += std::string("; the largest ") + (broken.empty() ? "" : "finite ") + "gradients: " +
            health_joined(largest);
  }
  return text;
}

// Why a step's global norm is exploding, or empty when it is not. `first` and `previous` are 0
// until there is one.
std::string health_explosion_reason(double norm, double first, double previous,
                                    int64_t previous_step) {
  if (!std::isfinite(norm)) {
    return "the global gradient norm is " + health_number(norm) + " (a gradient holds inf or NaN)";
  }
  if (previous > 0 && norm > kExplodingJump * previous) {
    return "the global gradient norm jumped to " + health_number(norm) + ", " +
           health_number(norm / previous) + " times step " + std::to_string(previous_step) +
           "'s " + health_number(previous) + " (the limit: " + health_number(kExplodingJump) +
           " times)";
  }
  if (first > 0 && norm > kExplodingOverFirst * first) {
    return "the global gradient norm rose to " + health_number(norm) + ", " +
           health_number(norm / first) + " times the first step's " + health_number(first) +
           " (the limit: " + health_number(kExplodingOverFirst) + " times)";
  }
  return "";
}

// What every key-bias note says of why its gradient is zero.
constexpr const char* kKeyBiasReason =
    "softmax is unchanged by adding one constant to all the scores of a query row, and a key "
    "bias b adds q.b to every score of row q";

}  // namespace

std::string GradFinding::line() const {
  return std::string("tapegrad train: ") + (is_note() ? "note: " : "warning: ") + text;
}

bool is_key_projection_bias(const std::string& name) {
  const std::string suffix = "k_proj.bias";
  if (name == suffix) return true;
  return name.size() > suffix.size() && name.ends_with("." + suffix);
}

std::optional<GradFinding> GradHealthJudge::observe_global_norm(int64_t step, double norm,
                                                                const NormsNow& norms_now) {
  const std::string reason =
      exploded_ ? "" : health_explosion_reason(norm, first_norm_, previous_norm_, previous_step_);
  if (std::isfinite(norm) && norm > 0) {
    if (first_norm_ == 0) first_norm_ = norm;
    previous_norm_ = norm;
    previous_step_ = step;
  }
  if (reason.empty()) return std::nullopt;
  exploded_ = true;
  std::vector<std::string> named;
  const std::string culprits = norms_now ? health_culprits(norms_now(), named) : "";
  return add(GradIssue::exploding, step, named,
             "exploding gradients at step " + std::to_string(step), reason + culprits);
}

std::vector<GradFinding> GradHealthJudge::observe_record(
    int64_t step, const std::vector<ParameterNorms>& record) {
  ++records_;
  last_record_step_ = step;
  std::vector<std::string> vanishing, by_construction;
  for (const ParameterNorms& norms : record) {
    judge_parameter(step, norms, vanishing, by_construction);
  }
  return record_findings(step, vanishing, by_construction);
}

// One parameter on one record: its counts, its stretch below kVanishingRatio, and whether that
// makes a finding now (its name added to `vanishing` or `by_construction`).
void GradHealthJudge::judge_parameter(int64_t step, const ParameterNorms& norms,
                                      std::vector<std::string>& vanishing,
                                      std::vector<std::string>& by_construction) {
  const auto [entry, added] = parameters_.try_emplace(norms.name);
  if (added) order_.push_back(norms.name);
  ParameterRecord& p = entry->second;
  ++p.records;
  if (!norms.has_grad) {
    ++p.missing;
    p.tiny_records = 0;
    return;
  }
  if (norms.grad_norm == 0) ++p.zero;
  // All-zero weights with a non-zero gradient: an infinite ratio, not a small one.
  const double ratio = norms.grad_norm == 0 ? 0 : norms.grad_norm / norms.weight_norm;
  if (!(ratio < kVanishingRatio)) {  // NaN is not small either
    p.tiny_records = 0;
    return;
  }
  if (p.tiny_records == 0) p.tiny_first_step = step, p.tiny_largest_ratio = 0;
  ++p.tiny_records;
  p.tiny_largest_ratio = std::max(p.tiny_largest_ratio, ratio);
  if (p.reported) return;
  if (is_key_projection_bias(norms.name)) {
    p.reported = true;
    ratio_text_[norms.name] = ratio == 0 ? "exactly 0" : "||grad|| / ||weight|| " +
                                                             health_number(ratio) + ": rounding";
    by_construction.push_back(norms.name);
    return;
  }
  const bool long_enough = p.tiny_records >= kVanishingRecords &&
                           step - p.tiny_first_step + 1 >= kVanishingSteps;
  const bool dead = p.zero + p.missing == p.records;  // the zero finding names it at the end
  if (!long_enough || dead) return;
  p.reported = true;
  ratio_text_[norms.name] = "at most " + health_number(p.tiny_largest_ratio) + " since step " +
                            std::to_string(p.tiny_first_step);
  vanishing.push_back(norms.name);
}

// The findings of one record: the parameters that began vanishing on it, and the key biases
// first seen with a zero gradient (one line each kind, naming all of them).
std::vector<GradFinding> GradHealthJudge::record_findings(
    int64_t step, const std::vector<std::string>& vanishing,
    const std::vector<std::string>& by_construction) {
  const auto described = [&](const std::vector<std::string>& names) {
    std::vector<std::string> items;
    for (const std::string& name : names) items.push_back(name + " (" + ratio_text_[name] + ")");
    return health_joined(items);
  };
  const std::string at_step = " at step " + std::to_string(step);
  std::vector<GradFinding> made;
  if (!vanishing.empty()) {
    made.push_back(add(GradIssue::vanishing, step, vanishing, "vanishing gradients" + at_step,
                       "||grad|| / ||weight|| below " + health_number(kVanishingRatio) +
                           " on every record for " + std::to_string(kVanishingSteps) +
                           "+ steps: " + described(vanishing)));
  }
  if (!by_construction.empty()) {
    made.push_back(add(GradIssue::zero_by_construction, step, by_construction,
                       "a zero gradient by construction" + at_step,
                       described(by_construction) + "; " + kKeyBiasReason));
  }
  return made;
}

std::vector<GradFinding> GradHealthJudge::finish() {
  if (finished_ || records_ == 0) return {};
  finished_ = true;
  std::vector<std::string> zero, missing;
  for (const std::string& name : order_) {
    const ParameterRecord& p = parameters_.at(name);
    if (p.missing == p.records) {
      missing.push_back(name);
    } else if (p.zero + p.missing == p.records && !is_key_projection_bias(name)) {
      zero.push_back(name);
    }
  }
  const std::string records = " the " + std::to_string(records_) + " --grad-stats records";
  std::vector<GradFinding> made;
  if (!zero.empty()) {
    made.push_back(add(GradIssue::zero, last_record_step_, zero,
                       "a gradient of exactly 0 on every one of" + records, health_joined(zero)));
  }
  if (!missing.empty()) {
    made.push_back(add(GradIssue::missing, last_record_step_, missing,
                       "no gradient on any of" + records,
                       "they do not reach the loss: " + health_joined(missing)));
  }
  return made;
}

std::vector<std::string> GradHealthJudge::summary() const {
  if (findings_.empty()) return {};
  const auto notes = std::count_if(findings_.begin(), findings_.end(),
                                   [](const GradFinding& f) { return f.is_note(); });
  const auto warnings = static_cast<int64_t>(findings_.size()) - notes;
  const auto counted = [](int64_t count, const std::string& what) {
    return count == 0 ? "" : std::to_string(count) + " " + what + (count == 1 ? "" : "s");
  };
  std::string header = counted(warnings, "warning");
  if (notes > 0) header += (header.empty() ? "" : ", ") + counted(notes, "note");
  std::vector<std::string> lines = {"gradient health: " + header};
  // Each finding's headline and the parameters it names (the full text was printed when found).
  for (const GradFinding& f : findings_) {
    std::string line = std::string("  ") + (f.is_note() ? "note: " : "warning: ") + f.headline;
    if (!f.parameters.empty()) line += ": " + health_first_of(f.parameters, 6);
    lines.push_back(line);
  }
  return lines;
}

// A finding kept for the summary, and returned: "<headline>: <detail>" its text.
GradFinding GradHealthJudge::add(GradIssue issue, int64_t step,
                                 const std::vector<std::string>& parameters,
                                 const std::string& headline, const std::string& detail) {
  findings_.push_back({.issue = issue, .step = step, .parameters = parameters,
                       .headline = headline, .text = headline + ": " + detail});
  return findings_.back();
}

}  // namespace tg::train
