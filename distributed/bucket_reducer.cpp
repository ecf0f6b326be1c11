// Which bucket reducer a device gets (distributed/bucket_reducer.h). This file is compiled once per
// command-line library (CMakeLists.txt, tapegrad_add_cli_library): with TAPEGRAD_HAVE_NCCL only in
// the one over the real CUDA backend. The emulated CUDA device of the tests keeps its "device"
// memory in host memory, which NCCL cannot reduce, so its command line stages through the host.
#include "tapegrad/distributed/bucket_reducer.h"

namespace tg::dist {

std::unique_ptr<BucketReducer> make_bucket_reducer(Communicator& comm, Device device) {
  if (device == kCPU) return make_host_reducer(comm);
#if defined(TAPEGRAD_HAVE_NCCL)
  return make_nccl_reducer(comm, device);
#else
  return make_staged_device_reducer(comm);
#endif
}

}  // namespace tg::dist
