#include "tapegrad/dist/gradient_sync.h"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace tg::dist {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The gradient as a contiguous f32 tensor on the host (itself when it already is one).
Tensor host_f32(const Tensor& grad) {
  Tensor g = grad;
  if (g.dtype() != DType::f32) g = g.to(DType::f32);
  if (g.device() != kCPU) g = copy_to_device(g, kCPU);
  return g.is_contiguous() ? g : g.contiguous();
}

}  // namespace

GradientSync::GradientSync(Communicator& comm, std::vector<Tensor> params, bool overlap, int64_t bucket_bytes)
    : comm_(comm), params_(std::move(params)), overlap_(overlap), bucket_of_(params_.size()),
      uses_(params_.size(), 0) {
  int64_t filled = 0;
  for (size_t k = params_.size(); k-- > 0;) {  // reverse registration order
    const int64_t bytes = params_[k].numel() * static_cast<int64_t>(sizeof(float));
    if (buckets_.empty() || (filled > 0 && filled + bytes > bucket_bytes)) {
      buckets_.emplace_back();
      filled = 0;
    }
    buckets_.back().params.push_back(k);
    filled += bytes;
    bucket_of_[k] = buckets_.size() - 1;
    index_of_[params_[k].impl()] = k;
  }
  for (Bucket& bucket : buckets_) {
    int64_t elements = 0;
    for (const size_t k : bucket.params) elements += params_[k].numel();
    bucket.buffer.resize(static_cast<size_t>(elements));
  }
}

GradientSync::~GradientSync() {
  if (watching_) set_tape_observer(next_);
}

void GradientSync::begin_step() {
  if (comm_.size() == 1 || !overlap_ || watching_) return;
  std::fill(uses_.begin(), uses_.end(), 0);
  for (Bucket& bucket : buckets_) bucket.waiting = 0;
  finished_.clear();
  next_ = set_tape_observer(this);
  watching_ = true;
  in_backward_ = false;
}

// Packs the bucket's gradients one after another and starts their allreduce.
void GradientSync::start(Bucket& bucket) {
  const auto started = Clock::now();
  const NoGrad no_grad;
  int64_t at = 0;
  for (const size_t k : bucket.params) {
    const Tensor& p = params_[k];
    const Tensor grad = p.grad();
    if (grad.defined()) {
      const Tensor g = host_f32(grad);
      std::memcpy(bucket.buffer.data() + at, g.data_as<float>(), sizeof(float) * g.numel());
    } else {
      std::fill_n(bucket.buffer.data() + at, p.numel(), 0.0f);
    }
    at += p.numel();
  }
  bucket.handle = comm_.start_allreduce(bucket.buffer.data(), at);
  stats_.bytes += at * static_cast<int64_t>(sizeof(float));
  ++stats_.calls;
  if (in_backward_) ++stats_.early_calls;
  stats_.seconds += seconds_since(started);
}

// The parameters whose last use ran back before this event have their gradients accumulated now.
void GradientSync::start_ready() {
  for (const size_t k : finished_) {
    Bucket& bucket = buckets_[bucket_of_[k]];
    if (--bucket.waiting == 0 && bucket.handle < 0) start(bucket);
  }
  finished_.clear();
  const auto started = Clock::now();
  comm_.progress();
  stats_.seconds += seconds_since(started);
}

void GradientSync::average() {
  if (comm_.size() == 1) return;
  if (watching_) {
    start_ready();
    set_tape_observer(next_);
    watching_ = false;
    in_backward_ = false;
  }
  const auto started = Clock::now();
  const double before = stats_.seconds;
  for (Bucket& bucket : buckets_) {
    if (bucket.handle < 0) start(bucket);  // not started during backward
  }
  const NoGrad no_grad;
  const float scale = 1.0f / static_cast<float>(comm_.size());
  for (Bucket& bucket : buckets_) {
    comm_.wait(bucket.handle);
    bucket.handle = -1;
    // Unpack: each parameter gets a fresh gradient of its own dtype on its own device.
    int64_t at = 0;
    for (const size_t k : bucket.params) {
      const Tensor& p = params_[k];
      Tensor g = empty(p.shape(), DType::f32, kCPU);
      float* out = g.data_as<float>();
      for (int64_t i = 0; i < p.numel(); ++i) out[i] = bucket.buffer[static_cast<size_t>(at + i)] * scale;
      if (p.dtype() != DType::f32) g = g.to(p.dtype());
      if (p.device() != kCPU) g = copy_to_device(g, p.device());
      p.set_grad(g);
      at += p.numel();
    }
  }
  const double spent = seconds_since(started);
  stats_.seconds = before + spent;
  stats_.exposed_seconds += spent;
}

// ---- the TapeObserver: count each parameter's uses forward, and down again backward -------------

void GradientSync::op_recorded(const char* op, const std::vector<Tensor>& inputs) {
  for (const Tensor& input : inputs) {
    if (!input.defined() || input.grad_fn() || !input.requires_grad()) continue;  // edges to leaves only
    const auto found = index_of_.find(input.impl());
    if (found == index_of_.end()) continue;
    if (uses_[found->second]++ == 0 && !in_backward_) ++buckets_[bucket_of_[found->second]].waiting;
  }
  if (next_) next_->op_recorded(op, inputs);
}

void GradientSync::backward_started() {
  in_backward_ = true;
  if (next_) next_->backward_started();
}

void GradientSync::backward_finished() {
  if (next_) next_->backward_finished();
}

void GradientSync::node_started(const Node& node) {
  start_ready();
  if (next_) next_->node_started(node);
}

void GradientSync::node_finished(const Node& node) {
  for (const Edge& edge : node.inputs) {
    if (!edge.leaf) continue;
    const auto found = index_of_.find(edge.leaf.get());
    if (found != index_of_.end() && uses_[found->second] > 0 && --uses_[found->second] == 0) {
      finished_.push_back(found->second);
    }
  }
  if (next_) next_->node_finished(node);
}

void GradientSync::region_started(std::string_view name, const char* suffix) {
  if (next_) next_->region_started(name, suffix);
}

void GradientSync::region_finished() {
  if (next_) next_->region_finished();
}

}  // namespace tg::dist
