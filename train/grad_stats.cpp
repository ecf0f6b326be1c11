#include "tapegrad/train/grad_stats.h"

#include <cmath>
#include <cstdio>

#include "tapegrad/autograd/error.h"

namespace tg::train {
namespace {

// A CSV cell: %.6g, "NaN"/"inf" spelled one way, empty for a value that does not exist.
std::string cell(double value, bool exists = true) {
  if (!exists) return "";
  if (std::isnan(value)) return "NaN";
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", value);
  return text;
}

double l2_norm(const std::vector<double>& values) {
  double sum = 0;
  for (double v : values) sum += v * v;
  return std::sqrt(sum);
}

int64_t checked_every(int64_t every) {
  TG_CHECK(every >= 1, "--grad-stats-every must be at least 1, got ", every);
  return every;
}

std::string joined(const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& name : names) text += (text.empty() ? "" : ", ") + name;
  return text;
}

}  // namespace

GradientHealth measure_gradient(const std::string& name, const Tensor& parameter) {
  GradientHealth health{.name = name};
  const Tensor grad = parameter.grad();
  if (!grad.defined()) return health;
  health.has_grad = true;
  const std::vector<double> values = grad.to_host_f64();  // any device, any dtype
  double abs_sum = 0;
  for (double v : values) abs_sum += std::abs(v);
  health.mean_abs = values.empty() ? 0 : abs_sum / static_cast<double>(values.size());
  health.norm = l2_norm(values);
  return health;
}

std::vector<ParameterNorms> gradient_norms(const nn::NamedTensors& parameters) {
  std::vector<ParameterNorms> norms;
  for (const auto& [name, parameter] : parameters) {
    const GradientHealth health = measure_gradient(name, parameter);
    norms.push_back({.name = name, .has_grad = health.has_grad, .grad_norm = health.norm,
                     .weight_norm = 0});
  }
  return norms;
}

std::string dead_gradient_warning(const std::vector<GradientHealth>& gradients) {
  std::vector<std::string> missing, zero;
  for (const GradientHealth& g : gradients) {
    if (!g.has_grad) missing.push_back(g.name);
    if (g.all_zero()) zero.push_back(g.name);
  }
  if (missing.empty() && zero.empty()) return "";
  std::string text = "tapegrad train: warning: ";
  if (!missing.empty()) text += "no gradient after backward (does not reach the loss): " + joined(missing);
  if (!missing.empty() && !zero.empty()) text += "; ";
  if (!zero.empty()) text += "an all-zero gradient: " + joined(zero);
  return text;
}

GradStatsLog::GradStatsLog(const std::string& path, int64_t every, const std::string& flag)
    : every_(checked_every(every)), log_(path, flag) {
  log_.write_line("step,name,mean_abs_grad,grad_norm,update_ratio");
}

bool GradStatsLog::due(int64_t step, int64_t first_step) const {
  return step == first_step || step % every_ == 0;
}

void GradStatsLog::measure(const nn::NamedTensors& parameters) {
  gradients_.clear();
  weights_before_.clear();
  for (const auto& [name, parameter] : parameters) {
    gradients_.push_back(measure_gradient(name, parameter));
    weights_before_.push_back(parameter.to_host_f64());
  }
}

std::string GradStatsLog::write_rows(int64_t step, const nn::NamedTensors& parameters) {
  TG_CHECK(gradients_.size() == parameters.size(), "grad-stats: measure() was not called before write_rows()");
  std::vector<GradientHealth> newly_dead;
  recorded_.clear();
  for (size_t i = 0; i < parameters.size(); ++i) {
    const GradientHealth& g = gradients_[i];
    std::vector<double> update = parameters[i].second.to_host_f64();
    const std::vector<double>& before = weights_before_[i];
    for (size_t k = 0; k < update.size(); ++k) update[k] -= before[k];
    const double weight_norm = l2_norm(before);
    // Weights that are all zero (a bias before its first update) have no ratio: an empty cell.
    const double ratio = weight_norm > 0 ? l2_norm(update) / weight_norm : NAN;
    log_.write_line(std::to_string(step) + "," + g.name + "," + cell(g.mean_abs, g.has_grad) + "," +
                    cell(g.norm, g.has_grad) + "," + cell(ratio, weight_norm > 0));
    recorded_.push_back({.name = g.name, .has_grad = g.has_grad, .grad_norm = g.norm,
                         .weight_norm = weight_norm});
    // A key bias's zero gradient is no accident: grad_health.h notes it instead.
    const bool dead = !g.has_grad || (g.all_zero() && !is_key_projection_bias(g.name));
    if (dead && warned_.insert(g.name).second) newly_dead.push_back(g);
  }
  gradients_.clear();
  weights_before_.clear();
  return dead_gradient_warning(newly_dead);
}

}  // namespace tg::train
