// The thread policy (see threads.h): OpenMP threads for our loops, OpenBLAS on one thread.
#include "tapegrad/autograd/threads.h"

#include <omp.h>

#include <algorithm>
#include <thread>

#include "tapegrad/autograd/error.h"

extern "C" void openblas_set_num_threads(int);  // the only declaration: nothing else calls it

namespace tg {
namespace {
int current_threads = 0;
}

void pin_blas_to_one_thread() {
  static const bool pinned = [] {  // once, even when first called from several threads
    openblas_set_num_threads(1);
    return true;
  }();
  (void)pinned;
}

void set_num_threads(int threads) {
  TG_CHECK(threads >= 0 && threads <= kMaxThreads, "set_num_threads: ", threads,
           " threads is outside [0, ", kMaxThreads, "] (0: all cores)");
  if (threads == 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  current_threads = threads;
  omp_set_num_threads(threads);
  pin_blas_to_one_thread();
}

int num_threads() { return current_threads > 0 ? current_threads : omp_get_max_threads(); }

}  // namespace tg
