#pragma once
// An op profiler, like the summary table of PyTorch's profiler, built from the op names the tape
// already knows. While a Profiler is alive on a thread, that thread's ops are timed and their
// allocations counted, one row per name:
//
//   "matmul", "linear", ...        forward ops, timed at record() (every op calls it)
//   "matmul.backward", ...         a node's backward function, timed exactly around the call
//   "backward()"                   the whole backward() sweep; its self time is the engine's own
//                                  work (the seed, gradient accumulation, broadcast reduction)
//   "(untaped)"                    time before a region or backward() that no op claims
//   any ProfileRegion name         e.g. "Adam.step": work you name yourself
//
// How forward time is measured: an op records itself after computing its output, so the time of
// a forward row is the gap since the previous hook on this thread (the previous op, region start
// or end, or the Profiler's start). That gap includes any untaped work in between: building a
// batch, a mask from_values(), a factory like zeros(). Wrap such work in a ProfileRegion to give
// it its own row; untaped work just before a region or backward() goes to "(untaped)", but work
// just before an op cannot be told apart from the op.
//
// Self vs total: a region (a backward node, backward(), a ProfileRegion) contains the ops and
// regions that run inside it (a node's backward calls matmul, sum, ...; those show up as their
// own forward-named rows, as aten::mm does under a backward node in PyTorch). total = wall time
// of the region, self = total minus its children. For forward rows self = total. Summing self
// over all rows gives the profiled wall time. Bytes are the allocator's bytes allocated (never
// freed ones subtracted) in the same way: "bytes" inclusive, "self bytes" without the children;
// the allocator counts every thread, the times are this thread's.
//
// Cost when off: one thread_local bool test per record() and per backward node.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tg {

struct ProfileRow {
  std::string name;
  int64_t calls = 0;
  double total_ms = 0;
  double self_ms = 0;
  int64_t bytes = 0;       // allocated inside, children included
  int64_t self_bytes = 0;  // allocated inside, children excluded
};
using ProfileTable = std::vector<ProfileRow>;  // sorted by self time, largest first

// RAII: profiles this thread from construction to destruction. Starting one clears the previous
// results of this thread; profile_results() still returns them after it ends. A Profiler created
// while another is alive on the thread does nothing (the outer one keeps recording).
class Profiler {
 public:
  Profiler();
  ~Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

 private:
  bool owner_;
};

// This thread's rows from the running or the last finished Profiler.
ProfileTable profile_results();
// The table as text, one row per line (max_rows = 0: all), with a total line.
std::string format_profile(const ProfileTable& table, size_t max_rows = 0);

namespace profiler_detail {
extern thread_local constinit bool enabled;
void op_recorded(const char* op);                                  // the forward hook
uint64_t begin_region(std::string_view name, const char* suffix);  // returns a token
void end_region(uint64_t token);
}  // namespace profiler_detail

// RAII: a named region (a row of its own, with children). Free when no Profiler is on.
// The name is name + suffix, joined only when profiling ("matmul" + ".backward").
class ProfileRegion {
 public:
  explicit ProfileRegion(std::string_view name, const char* suffix = "")
      : token_(profiler_detail::enabled ? profiler_detail::begin_region(name, suffix) : 0) {}
  ~ProfileRegion() {
    if (token_ != 0) profiler_detail::end_region(token_);
  }
  ProfileRegion(const ProfileRegion&) = delete;
  ProfileRegion& operator=(const ProfileRegion&) = delete;

 private:
  uint64_t token_;
};

}  // namespace tg
