// The thread policy's count (runtime/threads.h): the default is the CPUs of the affinity mask
// capped by the cgroup CPU quota, read by pure functions tested here on the files' texts.
#include <catch2/catch.hpp>

#include <sched.h>

#include <optional>
#include <string>

#include "tapegrad/runtime/threads.h"

TEST_CASE("threads: cgroup v2 cpu.max gives ceil(quota / period) CPUs, none for max",
          "[threads]") {
  REQUIRE(tg::cgroup_v2_quota_cpus("max 100000") == std::nullopt);
  REQUIRE(tg::cgroup_v2_quota_cpus("max 100000\n") == std::nullopt);
  REQUIRE(tg::cgroup_v2_quota_cpus("150000 100000") == 2);
  REQUIRE(tg::cgroup_v2_quota_cpus("150000 100000\n") == 2);
  REQUIRE(tg::cgroup_v2_quota_cpus("100000 100000") == 1);
  REQUIRE(tg::cgroup_v2_quota_cpus("50000 100000") == 1);  // half a CPU: still one thread
  REQUIRE(tg::cgroup_v2_quota_cpus("400000 100000") == 4);
  REQUIRE(tg::cgroup_v2_quota_cpus("250000 50000") == 5);
  // Not two positive integers: no quota known (the affinity mask alone decides).
  for (const char* text : {"", "\n", "max", "150000", "0 100000", "-1 100000", "150000 0",
                           "150000 -5", "abc 100000", "1.5 1", "150000 100000 7"}) {
    INFO(text);
    REQUIRE(tg::cgroup_v2_quota_cpus(text) == std::nullopt);
  }
  // A quota of more CPUs than kMaxThreads is kMaxThreads.
  REQUIRE(tg::cgroup_v2_quota_cpus("9223372036854775807 1") == tg::kMaxThreads);
}

TEST_CASE("threads: cgroup v1 cfs_quota_us / cfs_period_us, none for a quota of -1", "[threads]") {
  REQUIRE(tg::cgroup_v1_quota_cpus("-1", "100000") == std::nullopt);
  REQUIRE(tg::cgroup_v1_quota_cpus("-1\n", "100000\n") == std::nullopt);
  REQUIRE(tg::cgroup_v1_quota_cpus("150000", "100000") == 2);
  REQUIRE(tg::cgroup_v1_quota_cpus("200000\n", "100000\n") == 2);
  REQUIRE(tg::cgroup_v1_quota_cpus("300000", "100000") == 3);
  REQUIRE(tg::cgroup_v1_quota_cpus("", "") == std::nullopt);  // files that could not be read
  REQUIRE(tg::cgroup_v1_quota_cpus("150000", "0") == std::nullopt);
}

TEST_CASE("threads: the cores available are the affinity count capped by the quota, >= 1",
          "[threads]") {
  REQUIRE(tg::cores_available(4, std::nullopt) == 4);
  REQUIRE(tg::cores_available(4, 2) == 2);
  REQUIRE(tg::cores_available(2, 8) == 2);
  REQUIRE(tg::cores_available(64, 1) == 1);
  REQUIRE(tg::cores_available(0, std::nullopt) == 1);
  REQUIRE(tg::cores_available(5000, std::nullopt) == tg::kMaxThreads);
}

TEST_CASE("threads: the default count is this process's cores, and says where it came from",
          "[threads]") {
  const int before = tg::num_threads();
  cpu_set_t mask;
  REQUIRE(sched_getaffinity(0, sizeof(mask), &mask) == 0);
  const tg::AvailableCores& cores = tg::available_cores();
  REQUIRE(cores.affinity_cpus == CPU_COUNT(&mask));
  REQUIRE(cores.cores == tg::cores_available(cores.affinity_cpus, cores.quota_cpus));
  tg::set_num_threads(0);
  REQUIRE(tg::num_threads() == cores.cores);
  REQUIRE(tg::describe_num_threads().find("the default: " + std::to_string(cores.affinity_cpus) +
                                          " CPU") == 0);
  tg::set_num_threads(3);
  REQUIRE(tg::num_threads() == 3);
  REQUIRE(tg::describe_num_threads() == "--threads 3");
  tg::set_num_threads(before);
}
