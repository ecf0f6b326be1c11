// The bucket reducers that sum over a host Communicator (MPI): a CPU bucket in place, and a device
// bucket staged through host memory (distributed/bucket_reducer.h).
#include <unordered_map>
#include <utility>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/distributed/bucket_reducer.h"

namespace tg::dist {
namespace {

// A CPU bucket is handed to the communicator as it is: the allreduce writes the sum into it.
class HostReducer final : public BucketReducer {
 public:
  explicit HostReducer(Communicator& comm) : comm_(comm) {}
  const char* name() const override { return "mpi"; }
  int64_t start(const Tensor& bucket) override {
    TG_CHECK(bucket.device() == kCPU && bucket.dtype() == DType::f32 && bucket.is_contiguous(),
             "host reducer: a bucket must be a contiguous f32 tensor on the cpu");
    return comm_.start_allreduce(bucket.data_as<float>(), bucket.numel());
  }
  void progress() override { comm_.progress(); }
  void wait(int64_t handle) override { comm_.wait(handle); }

 private:
  Communicator& comm_;
};

// A device bucket: copied to a host buffer (one transfer per bucket), reduced there, and copied
// back into the device bucket by wait(). The copies are the backend's synchronous transfers.
class StagedDeviceReducer final : public BucketReducer {
 public:
  explicit StagedDeviceReducer(Communicator& comm) : comm_(comm) {}
  const char* name() const override { return "mpi (host-staged)"; }
  int64_t start(const Tensor& bucket) override {
    TG_CHECK(bucket.dtype() == DType::f32 && bucket.is_contiguous(),
             "host-staged reducer: a bucket must be a contiguous f32 tensor");
    Tensor host = copy_to_device(bucket, kCPU);
    const int64_t handle = comm_.start_allreduce(host.data_as<float>(), host.numel());
    staged_.insert_or_assign(handle, Staged{bucket, std::move(host)});
    return handle;
  }
  void progress() override { comm_.progress(); }
  void wait(int64_t handle) override {
    comm_.wait(handle);
    const auto found = staged_.find(handle);
    TG_CHECK(found != staged_.end(), "host-staged reducer: no bucket started with handle ", handle);
    const Staged& staged = found->second;
    kernels(staged.device_bucket.device()).copy_from_host(staged.host.data(), staged.device_bucket);
    staged_.erase(found);
  }

 private:
  struct Staged {
    Tensor device_bucket;  // where the sum goes back to
    Tensor host;           // the host copy the communicator reduces
  };
  Communicator& comm_;
  std::unordered_map<int64_t, Staged> staged_;  // by the communicator's handle, until waited for
};

}  // namespace

std::unique_ptr<BucketReducer> make_host_reducer(Communicator& comm) {
  return std::make_unique<HostReducer>(comm);
}

std::unique_ptr<BucketReducer> make_staged_device_reducer(Communicator& comm) {
  return std::make_unique<StagedDeviceReducer>(comm);
}

}  // namespace tg::dist
