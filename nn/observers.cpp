#include "tapegrad/nn/observers.h"

#include <algorithm>
#include <cmath>

#include "tapegrad/autograd/error.h"

namespace tg::nn {
namespace {

// The values of any floating tensor, on the host, as f32 (what the int8 kernels quantize).
std::vector<float> host_values(const Tensor& x) {
  TG_CHECK(x.defined() && is_floating(x.dtype()), "observer: needs a floating tensor");
  const Tensor dense = x.detach().to(DType::f32).cpu().contiguous();
  const float* data = dense.data_as<float>();
  return std::vector<float>(data, data + dense.numel());
}

}  // namespace

double Observer::scale(const std::string& what) const {
  const double r = range();
  TG_CHECK(std::isfinite(r) && r > 0, what, ": the calibration saw ",
           r == 0 ? "no input other than zeros" : "non-finite inputs",
           ", so it has no input scale (calibrate on real batches)");
  return std::max(r / 127.0, 0x1p-126);  // never below the smallest normal f32 (ops/quantize.h)
}

void MinMaxObserver::observe(const Tensor& x) {
  for (float v : host_values(x)) {
    TG_CHECK(std::isfinite(v), "MinMaxObserver: a calibration input holds NaN/Inf");
    min_ = std::min<double>(min_, v);
    max_ = std::max<double>(max_, v);
  }
}

PercentileObserver::PercentileObserver(double percentile) : percentile_(percentile), bins_(kBins, 0) {
  TG_CHECK(percentile > 0 && percentile <= 100, "PercentileObserver: the percentile must be in (0, 100], got ",
           percentile);
}

void PercentileObserver::grow_to(double value) {
  if (top_ == 0) top_ = std::ldexp(1.0, std::ilogb(value) + 1);  // a power of two above value
  while (value >= top_) {
    for (int64_t i = 0; i < kBins / 2; ++i) bins_[i] = bins_[2 * i] + bins_[2 * i + 1];
    std::fill(bins_.begin() + kBins / 2, bins_.end(), 0);
    top_ *= 2;
  }
}

void PercentileObserver::observe(const Tensor& x) {
  const std::vector<float> values = host_values(x);
  for (float v : values) {
    const double a = std::fabs(static_cast<double>(v));
    TG_CHECK(std::isfinite(a), "PercentileObserver: a calibration input holds NaN/Inf");
    if (a > 0) grow_to(a);
    max_ = std::max(max_, a);
    const int64_t bin = top_ == 0 ? 0 : std::min<int64_t>(kBins - 1, static_cast<int64_t>(a / top_ * kBins));
    ++bins_[bin];
    ++count_;
  }
}

double PercentileObserver::range() const {
  if (count_ == 0 || top_ == 0) return 0;
  // The smallest r with at least percentile% of the values <= r, interpolated within its bin.
  const double wanted = percentile_ / 100.0 * static_cast<double>(count_);
  const double width = top_ / kBins;
  double below = 0;
  for (int64_t i = 0; i < kBins; ++i) {
    const double in_bin = static_cast<double>(bins_[i]);
    if (below + in_bin >= wanted && in_bin > 0) {
      const double fraction = (wanted - below) / in_bin;
      return std::min(max_, width * (static_cast<double>(i) + fraction));
    }
    below += in_bin;
  }
  return max_;
}

}  // namespace tg::nn
