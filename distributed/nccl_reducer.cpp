// The bucket reducer on NCCL (distributed/bucket_reducer.h): a device bucket summed in device
// memory. Built only with NCCL, linked only over the real CUDA backend; never run here (no GPU).
//
// start() enqueues ncclAllReduce on the CUDA backend's stream right behind the kernels that packed
// the bucket and returns; wait() has nothing to do, because the kernels that unpack the bucket are
// enqueued on the same stream after it, and any host read of a gradient goes through the
// backend's copies to the host, which wait for that stream. So the reduction is ordered with the
// backward kernels rather than overlapped with them (a second stream and events would overlap
// them), and the host never waits for it here.
#include <memory>

#include "tapegrad/autograd/error.h"
#include "tapegrad/distributed/bucket_reducer.h"
#include "tapegrad/distributed/nccl_communicator.h"

namespace tg::dist {
namespace {

class NcclReducer final : public BucketReducer {
 public:
  NcclReducer(Communicator& comm, Device device) : device_(device), nccl_(comm, device.index) {}
  const char* name() const override { return "nccl"; }
  int64_t start(const Tensor& bucket) override {
    TG_CHECK(bucket.device() == device_ && bucket.dtype() == DType::f32 && bucket.is_contiguous(),
             "nccl reducer: a bucket must be a contiguous f32 tensor on ", device_name(device_));
    nccl_.enqueue_allreduce(bucket.data_as<float>(), bucket.numel());
    return started_++;
  }
  void progress() override {}           // NCCL runs on the GPU by itself
  void wait(int64_t) override {}        // stream order: see above

 private:
  Device device_;
  NcclCommunicator nccl_;
  int64_t started_ = 0;
};

}  // namespace

std::unique_ptr<BucketReducer> make_nccl_reducer(Communicator& comm, Device device) {
  TG_CHECK(device.type == DeviceType::cuda, "nccl reducer: ", device_name(device), " is not a CUDA device");
  return std::make_unique<NcclReducer>(comm, device);
}

}  // namespace tg::dist
