#pragma once
// The pool behind the CPU kernels' parallel loops: parallel_for. The thread policy it carries out
// (how many threads, the work thresholds, why BLAS stays on one thread) is written down once, in
// runtime/threads.h; this file says how a loop is run.
//
// parallel_for(count, grain, body) calls body(begin, end) on disjoint ranges that together cover
// [0, count) exactly once:
//   - Inline, as one call body(0, count) on the calling thread, when the loop holds at most one
//     grain (count <= grain: the kernel's work threshold, see grain_for), when num_threads() is 1,
//     while a tg::Textbook is open (autograd/textbook.h: one thread, as the tutorial runs), when
//     called from inside a body (a nested loop), or while another user thread has the pool.
//   - Otherwise in chunks: [0, count) is cut into min(ceil(count / grain), kChunksPerThread *
//     num_threads()) ranges of equal size (the last may be shorter), so each holds more than half
//     a grain; the ranges depend on (count, grain, num_threads()) alone. The caller and the
//     workers claim them one at a time from an atomic counter, so a worker that the OS has not
//     run yet (the machine is busy) claims nothing and the others take its share; the caller
//     waits only for chunks another thread has already claimed. A body must therefore not care
//     which thread runs a chunk, nor in what order chunks run: a reduction splits its sums into
//     fixed pieces (indices of the loop) and combines them afterwards in index order.
//   - A worker spins for kSpinMicroseconds after its last chunk, looking for the next loop, then
//     sleeps (a futex: no CPU) until a caller publishes one.
//   - An exception thrown by a body reaches the caller (the first one, when several throw); the
//     chunks not started yet are skipped, and the pool stays usable.
// The pool's threads are started on the first loop that needs them and live until the process
// exits. Two user threads may call parallel_for at once: one gets the pool, the other runs its
// loop inline (correct either way, since every range is covered once).
#include <cstdint>
#include <type_traits>

namespace tg::cpu {

// Chunks a loop is cut into, per thread: enough that a thread which starts late, or is slowed by
// another process, leaves its share to the others in small pieces.
inline constexpr int64_t kChunksPerThread = 4;
// How long an idle worker looks for the next loop before it sleeps: long enough to catch the next
// op's loop in a run of large ops, short enough that an idle pool takes no core from anyone.
inline constexpr int64_t kSpinMicroseconds = 50;

// The grain of a loop whose indices each cost `work_per_index` (elements, bytes, flops: any unit)
// and which runs inline up to `inline_work` of that unit in all: the most indices one call may
// hold without paying for another thread. At least 1.
int64_t grain_for(double work_per_index, double inline_work);

// Whether the calling thread is running a body of parallel_for (a nested loop runs inline).
bool in_parallel_region();

namespace detail {

// A loop body with its type erased: call(context, begin, end).
struct LoopBody {
  void (*call)(void* context, int64_t begin, int64_t end);
  void* context;
};

// Whether a loop of `count` indices of this grain runs inline on the caller.
bool runs_inline(int64_t count, int64_t grain);

// Runs the loop on the pool (the caller takes chunks too); rethrows a body's exception.
void run_on_pool(int64_t count, int64_t grain, LoopBody body);

}  // namespace detail

// Calls body(begin, end) over ranges covering [0, count) once each (see the top of this file).
template <typename Body>
void parallel_for(int64_t count, int64_t grain, Body&& body) {
  if (count <= 0) return;
  if (detail::runs_inline(count, grain)) return body(int64_t{0}, count);
  using BodyType = std::remove_reference_t<Body>;
  detail::run_on_pool(count, grain,
                      {[](void* context, int64_t begin, int64_t end) {
                         (*static_cast<BodyType*>(context))(begin, end);
                       },
                       const_cast<void*>(static_cast<const void*>(&body))});
}

}  // namespace tg::cpu
