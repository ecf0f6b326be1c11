// The CUDA tests' start (main itself is tests/catch_session.cpp's). On the real backend without a
// GPU every test would fail for want of a device, so the run reports "skipped" to CTest instead
// (exit code 77, SKIP_RETURN_CODE).
#include <cstdio>

#include "tapegrad/cuda/kernels.h"

int tapegrad_tests_skip_code() {
#if defined(TAPEGRAD_CUDA_REAL_DEVICE)
  if (tg::cuda::device_count() == 0) {
    std::puts("no CUDA device: the real-GPU variant of the CUDA tests is skipped");
    return 77;
  }
#endif
  return -1;
}
