// NCCL on the CUDA backend's stream, the legacy default stream (see the header: compiled here,
// never run on these machines).
#include "tapegrad/distributed/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include "tapegrad/autograd/error.h"

namespace tg::dist {
namespace {

void check_nccl(ncclResult_t result, const char* call) {
  TG_CHECK(result == ncclSuccess, call, " failed: ", ncclGetErrorString(result));
}
void check_cuda(cudaError_t result, const char* call) {
  TG_CHECK(result == cudaSuccess, call, " failed: ", cudaGetErrorString(result));
}

}  // namespace

NcclCommunicator::NcclCommunicator(Communicator& bootstrap, int device) {
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  ncclUniqueId id{};
  if (bootstrap.rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  bootstrap.broadcast(&id, sizeof id, 0);
  ncclComm_t comm = nullptr;
  check_nccl(ncclCommInitRank(&comm, bootstrap.size(), id, bootstrap.rank()), "ncclCommInitRank");
  comm_ = comm;
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ != nullptr) ncclCommDestroy(static_cast<ncclComm_t>(comm_));
}

// cudaStream_t{} is stream 0, the legacy default stream: the one the CUDA backend uses throughout.
void NcclCommunicator::enqueue_allreduce(float* device_data, int64_t count) {
  check_nccl(ncclAllReduce(device_data, device_data, static_cast<size_t>(count), ncclFloat32, ncclSum,
                           static_cast<ncclComm_t>(comm_), cudaStream_t{}),
             "ncclAllReduce");
}

}  // namespace tg::dist
