#include "tapegrad/dist/gradient_sync.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "tapegrad/autograd/tape.h"

namespace tg::dist {
namespace {

// The gradient as a contiguous f32 tensor on the host (itself when it already is one).
Tensor host_f32(const Tensor& grad) {
  Tensor g = grad;
  if (g.dtype() != DType::f32) g = g.to(DType::f32);
  if (g.device() != kCPU) g = copy_to_device(g, kCPU);
  return g.is_contiguous() ? g : g.contiguous();
}

}  // namespace

GradientSync::GradientSync(Communicator& comm, std::vector<Tensor> params, int64_t bucket_bytes)
    : comm_(comm), params_(std::move(params)) {
  int64_t filled = 0, largest = 0, current = 0;
  for (size_t k = params_.size(); k-- > 0;) {  // reverse registration order
    const int64_t bytes = params_[k].numel() * static_cast<int64_t>(sizeof(float));
    if (buckets_.empty() || (filled > 0 && filled + bytes > bucket_bytes)) {
      buckets_.emplace_back();
      filled = 0;
      current = 0;
    }
    buckets_.back().push_back(k);
    filled += bytes;
    current += params_[k].numel();
    largest = std::max(largest, current);
  }
  staging_.resize(static_cast<size_t>(largest));
}

void GradientSync::average() {
  if (comm_.size() == 1) return;
  const NoGrad no_grad;
  const auto started = std::chrono::steady_clock::now();
  for (const std::vector<size_t>& bucket : buckets_) {
    // Pack: the bucket's gradients one after another in the staging buffer.
    int64_t at = 0;
    for (const size_t k : bucket) {
      const Tensor& p = params_[k];
      const Tensor grad = p.grad();
      if (grad.defined()) {
        const Tensor g = host_f32(grad);
        std::memcpy(staging_.data() + at, g.data_as<float>(), sizeof(float) * g.numel());
      } else {
        std::fill_n(staging_.data() + at, p.numel(), 0.0f);
      }
      at += p.numel();
    }
    comm_.allreduce(staging_.data(), at, Reduce::average);
    stats_.bytes += at * static_cast<int64_t>(sizeof(float));
    ++stats_.calls;
    // Unpack: each parameter gets a fresh gradient of its own dtype on its own device.
    at = 0;
    for (const size_t k : bucket) {
      const Tensor& p = params_[k];
      Tensor g = empty(p.shape(), DType::f32, kCPU);
      std::memcpy(g.data_as<float>(), staging_.data() + at, sizeof(float) * p.numel());
      if (p.dtype() != DType::f32) g = g.to(p.dtype());
      if (p.device() != kCPU) g = copy_to_device(g, p.device());
      p.set_grad(g);
      at += p.numel();
    }
  }
  stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
}

}  // namespace tg::dist
