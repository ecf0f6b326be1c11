#include "autograd/threads.h"

#include <omp.h>

#include <thread>

extern "C" void openblas_set_num_threads(int);

namespace tg {
namespace {
int current_threads = 0;
}

void set_num_threads(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  current_threads = threads;
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
}

int num_threads() { return current_threads > 0 ? current_threads : omp_get_max_threads(); }

}  // namespace tg
