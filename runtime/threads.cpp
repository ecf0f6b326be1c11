// The thread policy (see threads.h): the thread count, its default from the affinity mask and the
// cgroup CPU quota, and OpenBLAS on one thread.
#include "tapegrad/runtime/threads.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdint>
#include <fstream>
#include <functional>
#include <thread>

#include "tapegrad/autograd/error.h"

extern "C" void openblas_set_num_threads(int);  // the only declaration: nothing else calls it

namespace tg {
namespace {

std::atomic<int> asked_threads{0};  // set_num_threads' count; 0: the default

// A whole positive integer spanning all of `text` (surrounding blanks and a newline allowed).
std::optional<int64_t> threads_positive_integer(std::string_view text) {
  const size_t first = text.find_first_not_of(" \t\n");
  const size_t last = text.find_last_not_of(" \t\n");
  if (first == std::string_view::npos) return std::nullopt;
  text = text.substr(first, last - first + 1);
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value <= 0) return std::nullopt;
  return value;
}

// ceil(quota / period) CPUs, kept within an int.
std::optional<int> threads_quota_cpus(std::string_view quota, std::string_view period) {
  const std::optional<int64_t> q = threads_positive_integer(quota);
  const std::optional<int64_t> p = threads_positive_integer(period);
  if (!q || !p) return std::nullopt;
  const int64_t cpus = *q / *p + (*q % *p != 0);
  return static_cast<int>(std::min<int64_t>(cpus, kMaxThreads));
}

// The CPUs in this process's affinity mask (a mask of up to 64k CPUs), or the machine's count
// when the mask cannot be read.
int threads_affinity_cpus() {
  for (int cpus = CPU_SETSIZE; cpus <= (1 << 16); cpus *= 2) {
    cpu_set_t* set = CPU_ALLOC(cpus);
    const size_t bytes = CPU_ALLOC_SIZE(cpus);
    const bool read = set != nullptr && sched_getaffinity(0, bytes, set) == 0;
    const int count = read ? CPU_COUNT_S(bytes, set) : 0;
    if (set != nullptr) CPU_FREE(set);
    if (read) return std::max(count, 1);
  }
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// The first line of a file, "" when it cannot be read.
std::string threads_first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// This process's cgroup path (the third field of /proc/self/cgroup) in the v2 hierarchy ("0::"),
// or in the v1 hierarchy that has the cpu controller; none when there is no such line.
std::optional<std::string> threads_cgroup_path(bool v2) {
  std::ifstream in("/proc/self/cgroup");
  for (std::string line; std::getline(in, line);) {
    const size_t colon = line.find(':'), second = line.find(':', colon + 1);
    if (colon == std::string::npos || second == std::string::npos) continue;
    std::string controllers = ",";  // ",name,name," (an append: GCC 12 warns on "," + a temporary)
    controllers.append(line, colon + 1, second - colon - 1).append(",");
    const bool match = v2 ? line.compare(0, colon, "0") == 0 && controllers == ",,"
                          : controllers.find(",cpu,") != std::string::npos;
    if (match) return line.substr(second + 1);
  }
  return std::nullopt;
}

// The smallest quota of the cgroup `dir` under `mount` and of its ancestors, each read by
// quota_of(directory). Walking up also finds a container's own cgroup, mounted at `mount`, when
// /proc/self/cgroup names its path on the host.
std::optional<int> threads_smallest_quota(
    const std::string& mount, std::string dir,
    const std::function<std::optional<int>(const std::string&)>& quota_of) {
  std::optional<int> smallest;
  for (;; dir = dir.substr(0, dir.rfind('/'))) {
    if (dir == "/") dir.clear();
    const std::optional<int> quota = quota_of(mount + dir);
    if (quota && (!smallest || *quota < *smallest)) smallest = quota;
    if (dir.empty()) return smallest;
  }
}

// The cgroup CPU quota of this process in CPUs (v2, else v1), none when there is none.
std::optional<int> threads_cgroup_quota() {
  if (const std::optional<std::string> path = threads_cgroup_path(true)) {
    const std::optional<int> quota =
        threads_smallest_quota("/sys/fs/cgroup", *path, [](const std::string& dir) {
          return cgroup_v2_quota_cpus(threads_first_line(dir + "/cpu.max"));
        });
    if (quota) return quota;
  }
  const std::optional<std::string> path = threads_cgroup_path(false);
  if (!path) return std::nullopt;
  for (const char* mount : {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"}) {
    const auto quota_of = [](const std::string& dir) {
      return cgroup_v1_quota_cpus(threads_first_line(dir + "/cpu.cfs_quota_us"),
                                  threads_first_line(dir + "/cpu.cfs_period_us"));
    };
    const std::optional<int> quota = threads_smallest_quota(mount, *path, quota_of);
    if (quota) return quota;
  }
  return std::nullopt;
}

}  // namespace

std::optional<int> cgroup_v2_quota_cpus(std::string_view cpu_max) {
  const size_t first = cpu_max.find_first_not_of(" \t\n");
  if (first == std::string_view::npos) return std::nullopt;
  cpu_max = cpu_max.substr(first);
  const size_t space = cpu_max.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  return threads_quota_cpus(cpu_max.substr(0, space), cpu_max.substr(space + 1));  // "max": none
}

std::optional<int> cgroup_v1_quota_cpus(std::string_view quota_us, std::string_view period_us) {
  return threads_quota_cpus(quota_us, period_us);  // a quota of -1 (none) is no positive integer
}

int cores_available(int affinity_cpus, std::optional<int> quota_cpus) {
  const int cores = quota_cpus ? std::min(affinity_cpus, *quota_cpus) : affinity_cpus;
  return std::clamp(cores, 1, kMaxThreads);
}

const AvailableCores& available_cores() {
  static const AvailableCores cores = [] {
    AvailableCores found;
    found.affinity_cpus = threads_affinity_cpus();
    found.quota_cpus = threads_cgroup_quota();
    found.cores = cores_available(found.affinity_cpus, found.quota_cpus);
    return found;
  }();
  return cores;
}

std::string describe_num_threads() {
  if (const int asked = asked_threads.load(std::memory_order_relaxed); asked > 0) {
    return "--threads " + std::to_string(asked);
  }
  const AvailableCores& cores = available_cores();
  const std::string quota = cores.quota_cpus
                                ? "cgroup CPU quota " + std::to_string(*cores.quota_cpus)
                                : "no cgroup CPU quota";
  return "the default: " + std::to_string(cores.affinity_cpus) + " CPU" +
         (cores.affinity_cpus == 1 ? "" : "s") + " in the affinity mask, " + quota;
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
           " threads is outside [0, ", kMaxThreads, "] (0: the cores available, threads.h)");
  asked_threads.store(threads, std::memory_order_relaxed);
  pin_blas_to_one_thread();
}

int num_threads() {
  const int asked = asked_threads.load(std::memory_order_relaxed);
  return asked > 0 ? asked : available_cores().cores;
}

}  // namespace tg
