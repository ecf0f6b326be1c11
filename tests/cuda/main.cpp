// The CUDA tests' entry point. On the real backend without a GPU every test would fail for want
// of a device, so the run reports "skipped" to CTest instead (exit code 77, SKIP_RETURN_CODE).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>

#include "tapegrad/cuda/kernels.h"

int main(int argc, char* argv[]) {
#if defined(TAPEGRAD_CUDA_REAL_DEVICE)
  if (tg::cuda::device_count() == 0) {
    std::puts("no CUDA device: the real-GPU variant of the CUDA tests is skipped");
    return 77;
  }
#endif
  return Catch::Session().run(argc, argv);
}
