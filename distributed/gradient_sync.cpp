#include "tapegrad/distributed/gradient_sync.h"

#include <algorithm>
#include <chrono>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"

namespace tg::dist {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

bool is_local(const Communicator& comm) { return dynamic_cast<const LocalCommunicator*>(&comm) != nullptr; }

// The one device every parameter lives on (the CPU for none).
Device device_of(const std::vector<Tensor>& params) {
  const Device device = params.empty() ? kCPU : params.front().device();
  for (const Tensor& p : params) {
    TG_CHECK(p.device() == device, "gradient sync: parameters on ", device_name(device), " and ",
             device_name(p.device()), "; data-parallel training needs them on one device");
  }
  return device;
}

}  // namespace

GradientSync::GradientSync(Communicator& comm, std::vector<Tensor> params, bool overlap, int64_t bucket_bytes)
    // (params copied, not moved: the arguments may be evaluated in any order)
    : GradientSync(comm, is_local(comm) ? nullptr : make_bucket_reducer(comm, device_of(params)), params,
                   overlap, bucket_bytes) {}

GradientSync::GradientSync(Communicator& comm, std::unique_ptr<BucketReducer> reducer, std::vector<Tensor> params,
                           bool overlap, int64_t bucket_bytes)
    : comm_(comm), reducer_(std::move(reducer)), params_(std::move(params)), overlap_(overlap),
      active_(reducer_ != nullptr), bucket_of_(params_.size()), uses_(params_.size(), 0) {
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
  if (!active_) return;  // one process: no buffers needed
  // Each bucket's buffer on the parameters' device, and each parameter's slot in it: its elements,
  // one parameter after another in the bucket's order, viewed as the parameter's shape.
  const Device device = device_of(params_);
  const NoGrad no_grad;
  for (Bucket& bucket : buckets_) {
    int64_t elements = 0;
    for (const size_t k : bucket.params) elements += params_[k].numel();
    bucket.buffer = empty({elements}, DType::f32, device);
    int64_t at = 0;
    for (const size_t k : bucket.params) {
      bucket.slots.push_back(bucket.buffer.narrow(0, at, params_[k].numel()).view(params_[k].shape()));
      at += params_[k].numel();
    }
  }
}

GradientSync::~GradientSync() {
  if (watching_) set_tape_observer(next_);
}

const char* GradientSync::carrier() const { return reducer_ ? reducer_->name() : "none"; }

void GradientSync::begin_step() {
  if (!active_ || !overlap_ || watching_) return;
  std::fill(uses_.begin(), uses_.end(), 0);
  for (Bucket& bucket : buckets_) bucket.waiting = 0;
  finished_.clear();
  next_ = set_tape_observer(this);
  watching_ = true;
  in_backward_ = false;
}

// Packs the bucket's gradients into its buffer, on the device, and starts their reduction. A
// gradient of another dtype is converted by the copy; a missing one is packed as zeros.
void GradientSync::start(Bucket& bucket) {
  const auto started = Clock::now();
  const NoGrad no_grad;
  Kernels& device = kernels(bucket.buffer.device());
  for (size_t i = 0; i < bucket.params.size(); ++i) {
    const Tensor grad = params_[bucket.params[i]].grad();
    if (grad.defined()) {
      device.copy(grad, bucket.slots[i]);
    } else {
      device.fill(bucket.slots[i], 0.0);
    }
  }
  bucket.handle = reducer_->start(bucket.buffer);
  stats_.bytes += bucket.buffer.numel() * static_cast<int64_t>(sizeof(float));
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
  reducer_->progress();
  stats_.seconds += seconds_since(started);
}

void GradientSync::average() {
  if (!active_) return;
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
  const double scale = 1.0 / comm_.size();
  for (Bucket& bucket : buckets_) {
    reducer_->wait(bucket.handle);
    bucket.handle = -1;
    // Unpack: the sum times 1/N, then each parameter gets a fresh gradient of its own dtype on its
    // own device (a copy: the buffer is packed again next step while the optimizer still reads).
    Kernels& device = kernels(bucket.buffer.device());
    if (comm_.size() > 1) device.unary(UnaryOp::mul_scalar, bucket.buffer, scale, bucket.buffer);
    for (size_t i = 0; i < bucket.params.size(); ++i) {
      const Tensor& p = params_[bucket.params[i]];
      const Tensor grad = empty(p.shape(), p.dtype(), p.device());
      device.copy(bucket.slots[i], grad);
      p.set_grad(grad);
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
