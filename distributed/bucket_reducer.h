#pragma once
// How one bucket of gradients is summed over the ranks: the one choice that depends on where the
// gradients live, kept out of distributed/gradient_sync.cpp (which packs and unpacks the buckets).
//
// A bucket is a contiguous f32 tensor on the parameters' device. start(bucket) begins the sum
// over the ranks, in place; after wait(handle) the bucket holds the sum, as far as any later
// kernel on that device can tell (for a GPU: in stream order, the host may not have seen it yet).
// Every rank starts the same buckets in the same order, as collectives require.
//
// Three implementations:
//
//   make_host_reducer            CPU buckets: MPI_Iallreduce on the bucket's own memory
//                                (Communicator::start_allreduce). name "mpi".
//   make_staged_device_reducer   GPU buckets, reduced over MPI: each bucket is copied to the
//                                host, reduced there, and copied back into the device bucket.
//                                name "mpi (host-staged)". Correct everywhere, and what a build
//                                without NCCL uses on a GPU; with any Communicator (the tests
//                                run it on the emulated CUDA device with a fake one).
//   make_nccl_reducer            GPU buckets, reduced by NCCL in device memory (only in builds
//                                with NCCL: distributed/nccl_reducer.cpp). name "nccl".
//
// make_bucket_reducer() picks one for a device: the host reducer for the CPU, NCCL for a CUDA
// device when the program was built with it, else the host-staged one.
#include <cstdint>
#include <memory>

#include "tapegrad/autograd/device.h"
#include "tapegrad/autograd/tensor.h"
#include "tapegrad/distributed/communicator.h"

namespace tg::dist {

class BucketReducer {
 public:
  virtual ~BucketReducer() = default;
  virtual const char* name() const = 0;  // what carries the gradients: "mpi", "nccl", ...
  // Starts the sum over the ranks of `bucket` (contiguous f32 on the reducer's device), in place.
  // The bucket must stay alive and untouched until wait(handle) returns.
  virtual int64_t start(const Tensor& bucket) = 0;
  // Lets running reductions advance (MPI moves data only inside its calls).
  virtual void progress() = 0;
  virtual void wait(int64_t handle) = 0;
};

std::unique_ptr<BucketReducer> make_host_reducer(Communicator& comm);
std::unique_ptr<BucketReducer> make_staged_device_reducer(Communicator& comm);
#if defined(TAPEGRAD_HAVE_NCCL)
// Joins an NCCL communicator of `comm`'s ranks on CUDA device `device` (bootstrapped over comm).
std::unique_ptr<BucketReducer> make_nccl_reducer(Communicator& comm, Device device);
#endif

// The reducer for buckets on `device` (see above). Compiled per command-line library
// (CMakeLists.txt): with NCCL only in the one over the real CUDA backend.
std::unique_ptr<BucketReducer> make_bucket_reducer(Communicator& comm, Device device);

}  // namespace tg::dist
