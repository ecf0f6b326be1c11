#pragma once
// Fibers for the emulated CUDA device (TEST HARNESS, see emulated_cuda.h): stacks of their own,
// switched in user space. A switch saves the callee-saved registers on the current stack and
// loads another stack pointer: about 25 ns, where handing over between OS threads costs
// microseconds of system calls — too much for the tens of thousands of switches a reduction
// kernel makes per launch. x86-64 (System V ABI) only. AddressSanitizer is told about every
// switch, as it must be to follow a program across stacks.
#include <cstddef>

namespace emulation::detail {

// A place to resume: a stack pointer saved by switch_context, and the stack it points into.
struct ExecutionContext {
  void* stack_pointer = nullptr;
  // Needed by AddressSanitizer only. An OS thread's own stack is learned on the first switch away.
  const void* stack_bottom = nullptr;
  size_t stack_size = 0;
  void* sanitizer_fake_stack = nullptr;
};

// Saves the running context in `from` and resumes `to`; returns once something resumes `from`.
// `from_is_done`: `from` will never be resumed (lets AddressSanitizer release its state).
void switch_context(ExecutionContext& from, ExecutionContext& to, bool from_is_done = false);

// What a fiber's entry function must call first: it arrives there by a switch that has not
// returned anywhere.
void fiber_started(ExecutionContext& self);

// A stack with a guard page below it (an overflow faults instead of corrupting memory).
class FiberStack {
 public:
  static constexpr size_t kBytes = 256 * 1024;
  FiberStack();
  ~FiberStack();
  FiberStack(const FiberStack&) = delete;
  FiberStack& operator=(const FiberStack&) = delete;

  // Makes `context` start entry() on this stack, from the top, when switched to. entry never
  // returns: it ends by switching away for good. The floating-point control state (rounding,
  // flush-to-zero) is the caller's.
  void prepare(ExecutionContext& context, void (*entry)());

  // For a stack abandoned with frames on it: clears AddressSanitizer's marks of those frames, which
  // would otherwise flag the next frames put there.
  void forget_frames();

 private:
  char* mapping_ = nullptr;  // guard page, then kBytes of stack
};

}  // namespace emulation::detail
