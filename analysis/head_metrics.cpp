#include "tapegrad/analysis/head_metrics.h"

#include <cmath>
#include <cstdlib>

#include "tapegrad/autograd/error.h"

namespace tg::analysis {

HeadMetricTotals& HeadMetricTotals::operator+=(const HeadMetricTotals& o) {
  entropy += o.entropy;
  distance += o.distance;
  previous += o.previous;
  same += o.same;
  first += o.first;
  uniform_entropy += o.uniform_entropy;
  uniform_distance += o.uniform_distance;
  queries += o.queries;
  queries_with_previous += o.queries_with_previous;
  return *this;
}

HeadMetrics HeadMetricTotals::mean() const {
  const auto over = [](double sum, int64_t count) { return count > 0 ? sum / static_cast<double>(count) : 0.0; };
  HeadMetrics m;
  m.entropy = over(entropy, queries);
  m.distance = over(distance, queries);
  m.previous = over(previous, queries_with_previous);
  m.same = over(same, queries);
  m.first = over(first, queries);
  m.uniform_entropy = over(uniform_entropy, queries);
  m.uniform_distance = over(uniform_distance, queries);
  return m;
}

std::vector<HeadMetricTotals> head_metric_totals(const Tensor& weights, int64_t length, bool causal) {
  TG_CHECK(weights.dim() == 3 && weights.size(1) == weights.size(2) && is_floating(weights.dtype()),
           "head metrics: weights must be floating [heads, S, S], got ", shape_str(weights.shape()));
  const int64_t heads = weights.size(0), seq = weights.size(1);
  if (length < 0) length = seq;
  TG_CHECK(length >= 1 && length <= seq, "head metrics: length ", length, " is outside [1, ", seq, "]");
  const std::vector<double> w = weights.to_host_f64();  // contiguous row-major copy
  std::vector<HeadMetricTotals> totals(heads);
  for (int64_t h = 0; h < heads; ++h) {
    HeadMetricTotals& t = totals[h];
    for (int64_t i = 0; i < length; ++i) {
      const double* row = w.data() + (h * seq + i) * seq;
      const int64_t visible = causal ? i + 1 : length;  // the keys a uniform head would spread over
      for (int64_t j = 0; j < length; ++j) {
        const double p = row[j];
        if (p > 0) t.entropy -= p * std::log(p);
        t.distance += p * static_cast<double>(std::llabs(i - j));
      }
      double spread = 0;  // sum of |i - j| over the visible keys
      for (int64_t j = 0; j < visible; ++j) spread += static_cast<double>(std::llabs(i - j));
      t.uniform_entropy += std::log(static_cast<double>(visible));
      t.uniform_distance += spread / static_cast<double>(visible);
      t.same += row[i];
      t.first += row[0];
      if (i >= 1) {
        t.previous += row[i - 1];
        ++t.queries_with_previous;
      }
      ++t.queries;
    }
  }
  return totals;
}

std::vector<HeadMetrics> head_metrics(const Tensor& weights, int64_t length, bool causal) {
  std::vector<HeadMetrics> metrics;
  for (const HeadMetricTotals& totals : head_metric_totals(weights, length, causal)) {
    metrics.push_back(totals.mean());
  }
  return metrics;
}

}  // namespace tg::analysis
