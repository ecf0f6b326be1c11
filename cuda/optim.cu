// CUDA kernels for the optimizers: the SGD and Adam/AdamW updates, the sum of squares behind
// gradient-norm clipping, and the loss scaler's unscale + inf check.
// The CPU twins are in cpu/optim.cpp; the formulas are in autograd/kernels.h.
//
// The updates give the same bits as the CPU. Both compute in IEEE f64, where +, -, *, / and sqrt
// are correctly rounded, and round each stored value to the tensor's dtype the same way. The one
// trap is nvcc's habit of fusing a * b + c into one FMA (rounded once instead of twice), so the
// update kernels spell their products and sums with the _rn intrinsics below, which it never fuses.
#include <cstdint>

#include "tapegrad/cuda/device_types.h"
#include "tapegrad/cuda/kernels.h"

namespace tg::cuda {
namespace {

constexpr unsigned kThreads = 256;

// ---- f64 arithmetic rounded step by step, exactly as the CPU's ---------------------------------
#if defined(TAPEGRAD_CUDA_EMULATION)
// (g++ on x86-64 does not contract a * b + c without FMA instructions enabled, as the CPU
// reference is compiled.)
inline double add(double a, double b) { return a + b; }
inline double sub(double a, double b) { return a - b; }
inline double mul(double a, double b) { return a * b; }
#else
__device__ inline double add(double a, double b) { return __dadd_rn(a, b); }
__device__ inline double sub(double a, double b) { return __dsub_rn(a, b); }
__device__ inline double mul(double a, double b) { return __dmul_rn(a, b); }
#endif

// The SGD update of one parameter (T float or double), one thread an element:
//   d = g + weight_decay * p; with a momentum buffer, buf = first_step ? d
//   : momentum * buf + (1 - dampening) * d, and d = nesterov ? d + momentum * buf : buf;
//   p -= lr * d.   buf is null without momentum; one_minus_dampening = 1 - dampening.
template <typename T>
__global__ void sgd_step_kernel(T* param, const T* grad, T* buf, int64_t count, double lr,
                                double momentum, double one_minus_dampening, double weight_decay,
                                bool nesterov, bool first_step) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const double p = param[i];
    double direction = add(grad[i], mul(weight_decay, p));
    if (buf != nullptr) {
      const T velocity = static_cast<T>(
          first_step ? direction : add(mul(momentum, buf[i]), mul(one_minus_dampening, direction)));
      buf[i] = velocity;
      direction = nesterov ? add(direction, mul(momentum, velocity)) : double(velocity);
    }
    param[i] = static_cast<T>(sub(p, mul(lr, direction)));
  }
}

// The Adam/AdamW update of one parameter, one thread an element:
//   p *= decay_factor; g += l2 * p; m = beta1 m + (1 - beta1) g; v = beta2 v + (1 - beta2) g^2;
//   m_hat = m / bias_correction1; v_hat = v / bias_correction2;
//   p -= lr * m_hat / (sqrt(v_hat) + eps),
// each of p (after the decay), m, v and the final p rounded to T before it is used again.
template <typename T>
__global__ void adam_step_kernel(T* param, const T* grad, T* exp_avg, T* exp_avg_sq, int64_t count,
                                 AdamStep s, double one_minus_beta1, double one_minus_beta2) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const T decayed = static_cast<T>(mul(param[i], s.decay_factor));
    const double gradient = add(grad[i], mul(s.l2, decayed));
    const T m = static_cast<T>(add(mul(s.beta1, exp_avg[i]), mul(one_minus_beta1, gradient)));
    const T v = static_cast<T>(
        add(mul(s.beta2, exp_avg_sq[i]), mul(mul(one_minus_beta2, gradient), gradient)));
    const double m_hat = static_cast<double>(m) / s.bias_correction1;
    const double v_hat = static_cast<double>(v) / s.bias_correction2;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    param[i] = static_cast<T>(sub(decayed, mul(s.lr, m_hat) / add(sqrt(v_hat), s.eps)));
  }
}

// *total += sum of x[i]^2 in f64: each thread sums its share, a tree in shared memory sums the
// block's (blockDim.x = kThreads), and one atomicAdd per block adds that to the total.
template <typename T>
__global__ void sum_of_squares_kernel(const T* x, int64_t count, double* total) {
  __shared__ double partial[kThreads];
  double sum = 0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const double value = x[i];
    sum += value * value;
  }
  const unsigned t = threadIdx.x;
  partial[t] = sum;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (t < half) partial[t] += partial[t + half];
    __syncthreads();
  }
  if (t == 0) atomicAdd(total, partial[0]);
}

// out = grad * factor in T (factor already rounded to T: an f32 product for f32 gradients), and
// *found_inf = 1 when some element of out is inf or NaN (x - x is NaN exactly for those): an inf
// or NaN gradient, or a finite one that overflowed by the factor (as the CPU's, cpu/optim.cpp).
template <typename T>
__global__ void unscale_and_check_kernel(const T* grad, T factor, T* out, int64_t count,
                                         float* found_inf) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const T unscaled = grad[i] * factor;
    const T difference = unscaled - unscaled;
    if (difference != difference) atomicExch(found_inf, 1.0f);
    out[i] = unscaled;
  }
}

// ---- Host-side checks -------------------------------------------------------------------------

// `t` is contiguous, with the parameter's dtype and number of elements.
void check_like(const char* kernel, const char* what, const Tensor& t, const Tensor& param) {
  TG_CHECK(t.defined() && t.dtype() == param.dtype() && t.numel() == param.numel() &&
               t.is_contiguous(),
           "kernel '", kernel, "' on cuda: ", what, " must be a contiguous ",
           dtype_name(param.dtype()), " tensor of ", param.numel(), " elements");
}

void check_scalar(const char* kernel, const char* what, const Tensor& t, DType dtype) {
  TG_CHECK(t.defined() && t.dtype() == dtype && t.numel() == 1, "kernel '", kernel, "' on cuda: ",
           what, " must be an ", dtype_name(dtype), " scalar");
}

LaunchShape elementwise_launch(int64_t count) {
  return LaunchShape{dim3(blocks_for(count, kThreads)), dim3(kThreads), 0};
}

}  // namespace

// ---- The Kernels methods ----------------------------------------------------------------------

void CudaKernels::sgd_step(const SgdStep& step, const Tensor& param, const Tensor& grad,
                           const Tensor& momentum_buffer) {
  DeviceGuard guard(device_index());
  TG_CHECK(param.is_contiguous(), "kernel 'sgd_step' on cuda: the parameter must be contiguous");
  check_like("sgd_step", "grad", grad, param);
  if (momentum_buffer.defined()) check_like("sgd_step", "momentum_buffer", momentum_buffer, param);
  const int64_t count = param.numel();
  if (count == 0) return;
  dispatch_floating(param.dtype(), "sgd_step", [&](auto tag) {
    using T = decltype(tag);
    launch("sgd_step", sgd_step_kernel<T>, elementwise_launch(count), param.data_as<T>(),
           grad.data_as<const T>(), momentum_buffer.defined() ? momentum_buffer.data_as<T>() : nullptr,
           count, step.lr, step.momentum, 1 - step.dampening, step.weight_decay, step.nesterov,
           step.first_step);
  });
}

void CudaKernels::adam_step(const AdamStep& step, const Tensor& param, const Tensor& grad,
                            const Tensor& exp_avg, const Tensor& exp_avg_sq) {
  DeviceGuard guard(device_index());
  TG_CHECK(param.is_contiguous(), "kernel 'adam_step' on cuda: the parameter must be contiguous");
  check_like("adam_step", "grad", grad, param);
  check_like("adam_step", "exp_avg", exp_avg, param);
  check_like("adam_step", "exp_avg_sq", exp_avg_sq, param);
  const int64_t count = param.numel();
  if (count == 0) return;
  dispatch_floating(param.dtype(), "adam_step", [&](auto tag) {
    using T = decltype(tag);
    launch("adam_step", adam_step_kernel<T>, elementwise_launch(count), param.data_as<T>(),
           grad.data_as<const T>(), exp_avg.data_as<T>(), exp_avg_sq.data_as<T>(), count, step,
           1 - step.beta1, 1 - step.beta2);
  });
}

void CudaKernels::accumulate_sum_of_squares(const Tensor& x, const Tensor& total) {
  DeviceGuard guard(device_index());
  TG_CHECK(x.is_contiguous(), "kernel 'accumulate_sum_of_squares' on cuda: x must be contiguous");
  check_scalar("accumulate_sum_of_squares", "total", total, DType::f64);
  const int64_t count = x.numel();
  if (count == 0) return;
  dispatch_floating(x.dtype(), "accumulate_sum_of_squares", [&](auto tag) {
    using T = decltype(tag);
    launch("accumulate_sum_of_squares", sum_of_squares_kernel<T>, elementwise_launch(count),
           x.data_as<const T>(), count, total.data_as<double>());
  });
}

void CudaKernels::unscale_and_check(const Tensor& grad, double inv_scale, const Tensor& out,
                                    const Tensor& found_inf) {
  DeviceGuard guard(device_index());
  TG_CHECK(grad.is_contiguous(), "kernel 'unscale_and_check' on cuda: grad must be contiguous");
  check_like("unscale_and_check", "out", out, grad);
  check_scalar("unscale_and_check", "found_inf", found_inf, DType::f32);
  const int64_t count = grad.numel();
  if (count == 0) return;
  dispatch_floating(grad.dtype(), "unscale_and_check", [&](auto tag) {
    using T = decltype(tag);
    launch("unscale_and_check", unscale_and_check_kernel<T>, elementwise_launch(count),
           grad.data_as<const T>(), static_cast<T>(inv_scale), out.data_as<T>(), count,
           found_inf.data_as<float>());
  });
}

}  // namespace tg::cuda
