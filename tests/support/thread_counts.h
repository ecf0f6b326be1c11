#pragma once
// Runs a check at several thread counts (runtime/threads.h): the kernels split work differently at each.
#include <catch2/catch.hpp>

#include "tapegrad/runtime/threads.h"

namespace tg::testing {

// Runs body() at 1 thread, then at 2 and 3, restoring the thread count.
template <typename Body>
void at_thread_counts(Body&& body) {
  const int before = num_threads();
  for (int threads : {1, 2, 3}) {
    INFO(threads << " threads");
    set_num_threads(threads);
    body();
  }
  set_num_threads(before);
}

}  // namespace tg::testing
