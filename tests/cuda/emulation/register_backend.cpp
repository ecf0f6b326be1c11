// The emulated device's backend registration (TEST HARNESS). The library the emulated tests link
// (tapegrad_lib_cpu) has no CUDA backend of its own, so the kernels of cuda/*.cu compiled by g++
// are registered here, from a static object in an object library that is always linked.
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/cuda/kernels.h"

namespace {

const bool registered =
    (tg::register_backend(tg::DeviceType::cuda, tg::cuda::cuda_backend()), true);

}  // namespace
