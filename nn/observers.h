#pragma once
// Calibration observers for static quantization (nn/quantization.h): each watches the inputs a
// Linear sees while the f32 model runs on calibration batches, then proposes the one symmetric
// int8 scale for them, range / 127, as torch.ao.quantization's observers do.
//
//   MinMaxObserver       range = max |x| over everything seen: nothing ever saturates, but one
//                        outlier stretches the grid for every other value.
//   PercentileObserver   range = the p-th percentile of |x| (p = 99.99 by default): the rarest
//                        0.01% of values saturate at +-127 scale, the rest get a finer grid.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "tapegrad/autograd/tensor.h"

namespace tg::nn {

class Observer {
 public:
  virtual ~Observer() = default;
  virtual void observe(const Tensor& x) = 0;  // any floating shape and device; values read as f32
  virtual double range() const = 0;            // the |x| that maps to 127; 0 when nothing was seen
  // range() / 127, or a tg::Error naming `what` when the range is 0 (nothing seen, or all zeros)
  // or not finite: such a scale would quantize every input to 0 or NaN.
  double scale(const std::string& what) const;
};

class MinMaxObserver : public Observer {
 public:
  void observe(const Tensor& x) override;
  double range() const override { return std::max(-min_, max_); }
  double min() const { return min_; }
  double max() const { return max_; }

 private:
  double min_ = 0, max_ = 0;  // the range always holds 0, as a symmetric grid does
};

// A histogram of |x| over [0, top) in kBins equal bins. When a value reaches past the top, the
// range doubles and neighbouring bins merge in pairs (exactly: the edges line up), so memory stays
// kBins counts however much calibration data flows by. The percentile is then read from the
// histogram, linear within its bin: exact up to one bin width, top / kBins.
class PercentileObserver : public Observer {
 public:
  static constexpr int64_t kBins = 4096;
  explicit PercentileObserver(double percentile = 99.99);  // in (0, 100]
  void observe(const Tensor& x) override;
  double range() const override;
  int64_t count() const { return count_; }

 private:
  void grow_to(double value);  // doubles top_ until value < top_

  double percentile_;
  double top_ = 0;
  std::vector<int64_t> bins_;
  int64_t count_ = 0;
  double max_ = 0;  // the range never exceeds what was seen
};

}  // namespace tg::nn
