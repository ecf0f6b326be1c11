#include "tapegrad/autograd/threads.h"

#include <omp.h>

#include <algorithm>
#include <thread>

#include "tapegrad/autograd/error.h"

extern "C" void openblas_set_num_threads(int);

namespace tg {
namespace {
int current_threads = 0;
}

void set_num_threads(int threads) {
  TG_CHECK(threads >= 0 && threads <= kMaxThreads, "set_num_threads: ", threads,
           " threads is outside [0, ", kMaxThreads, "] (0: all cores)");
  if (threads == 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  current_threads = threads;
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
}

int num_threads() { return current_threads > 0 ? current_threads : omp_get_max_threads(); }

}  // namespace tg
