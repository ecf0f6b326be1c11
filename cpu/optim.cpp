// CPU kernels for the optimizers: the SGD and Adam/AdamW updates, the sum of squares behind
// gradient-norm clipping, and the loss scaler's unscale + inf check. The formulas are in
// autograd/kernels.h; every value is computed in f64 and rounded once to the tensor's dtype. Adam
// on f32 has a vectorised fast path (cpu/fast/optim_avx2.cpp) that computes in f32, as PyTorch does.
#include <algorithm>
#include <cmath>

#include "tapegrad/cpu/kernels.h"
#include "tapegrad/runtime/features.h"

namespace tg::cpu {
namespace {

// An Adam step of at most this many elements runs on the calling thread (the thread policy:
// runtime/threads.h); larger ones in chunks of at least about half of it.
constexpr int64_t kParallelAdamElements = 1 << 15;

}  // namespace

void CpuKernels::sgd_step(const SgdStep& s, const Tensor& param, const Tensor& grad,
                          const Tensor& momentum_buffer) {
  dispatch_floating(param.dtype(), "sgd_step", [&](auto tag) {
    using T = decltype(tag);
    T* p = param.data_as<T>();
    const T* g = grad.data_as<T>();
    T* buf = momentum_buffer.defined() ? momentum_buffer.data_as<T>() : nullptr;
    for (int64_t i = 0; i < param.numel(); ++i) {
      double direction = g[i] + s.weight_decay * p[i];
      if (buf != nullptr) {
        buf[i] = static_cast<T>(s.first_step ? direction
                                             : s.momentum * buf[i] + (1 - s.dampening) * direction);
        direction = s.nesterov ? direction + s.momentum * buf[i] : buf[i];
      }
      p[i] = static_cast<T>(p[i] - s.lr * direction);
    }
  });
}

void CpuKernels::adam_step(const AdamStep& s, const Tensor& param, const Tensor& grad,
                           const Tensor& exp_avg, const Tensor& exp_avg_sq) {
  if (param.dtype() == DType::f32 && fast_paths_enabled()) {
    constexpr int64_t kBlock = 8;  // the vector width: chunks start on whole vectors
    const int64_t count = param.numel(), blocks = (count + kBlock - 1) / kBlock;
    float* p = param.data_as<float>();
    const float* g = grad.data_as<float>();
    float* m = exp_avg.data_as<float>();
    float* v = exp_avg_sq.data_as<float>();
    const int64_t grain = grain_for(kBlock, kParallelAdamElements);
    parallel_for(blocks, grain, [&](int64_t first, int64_t past) {
      const int64_t start = first * kBlock, size = std::min(past * kBlock, count) - start;
      adam_step_f32_avx2(s, p + start, g + start, m + start, v + start, size);
    });
    return;
  }
  dispatch_floating(param.dtype(), "adam_step", [&](auto tag) {
    using T = decltype(tag);
    T* p = param.data_as<T>();
    const T* g = grad.data_as<T>();
    T* m = exp_avg.data_as<T>();
    T* v = exp_avg_sq.data_as<T>();
    const int64_t count = param.numel();
    // Kingma & Ba's Algorithm 1 at step t, with AdamW's decoupled decay of p before it:
    //   m = b1 m + (1 - b1) g            v = b2 v + (1 - b2) g^2
    //   m_hat = m / (1 - b1^t)           v_hat = v / (1 - b2^t)
    //   p = p - lr m_hat / (sqrt(v_hat) + eps)
    parallel_for(count, kParallelAdamElements, [&](int64_t first, int64_t past) {
      for (int64_t i = first; i < past; ++i) {
        const T decayed = static_cast<T>(p[i] * s.decay_factor);  // AdamW: p (1 - lr wd); Adam: p
        const double gradient = g[i] + s.l2 * decayed;             // Adam's L2: g + wd p; AdamW: g
        m[i] = static_cast<T>(s.beta1 * m[i] + (1 - s.beta1) * gradient);
        v[i] = static_cast<T>(s.beta2 * v[i] + (1 - s.beta2) * gradient * gradient);
        const double m_hat = static_cast<double>(m[i]) / s.bias_correction1;
        const double v_hat = static_cast<double>(v[i]) / s.bias_correction2;
        p[i] = static_cast<T>(decayed - s.lr * m_hat / (std::sqrt(v_hat) + s.eps));
      }
    });
  });
}

void CpuKernels::accumulate_sum_of_squares(const Tensor& x, const Tensor& total) {
  double sum = 0;
  dispatch_floating(x.dtype(), "accumulate_sum_of_squares", [&](auto tag) {
    using T = decltype(tag);
    const T* values = x.data_as<T>();
    for (int64_t i = 0; i < x.numel(); ++i) sum += static_cast<double>(values[i]) * values[i];
  });
  *total.data_as<double>() += sum;
}

void CpuKernels::unscale_and_check(const Tensor& grad, double inv_scale, const Tensor& out,
                                   const Tensor& found_inf) {
  dispatch_floating(grad.dtype(), "unscale_and_check", [&](auto tag) {
    using T = decltype(tag);
    const T* g = grad.data_as<T>();
    T* result = out.data_as<T>();
    const T factor = static_cast<T>(inv_scale);
    // The check is on the product, what the optimizer will see: inf or NaN in grad stays so, and a
    // finite grad can still overflow when the factor is large (a scale backed off to its floor).
    bool all_finite = true;
    for (int64_t i = 0; i < grad.numel(); ++i) {
      result[i] = g[i] * factor;
      all_finite = all_finite && std::isfinite(result[i]);
    }
    if (!all_finite) *found_inf.data_as<float>() = 1.0f;
  });
}

}  // namespace tg::cpu
