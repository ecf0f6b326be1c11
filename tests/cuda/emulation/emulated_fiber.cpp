// Fibers for the emulated CUDA device (TEST HARNESS, see emulated_fiber.h).
#include "emulated_fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <new>

#if !defined(__x86_64__)
#error "the emulated CUDA device switches fibers with x86-64 code; port tg_switch_stack to this CPU"
#endif

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

// tg_switch_stack(save, load): pushes the registers the System V ABI makes callee-saved (rbp,
// rbx, r12-r15, and the SSE and x87 control words) on the current stack, stores the stack
// pointer in *save, switches to `load` and pops the same from there, then returns into whatever
// called tg_switch_stack on that stack — or, on a fresh stack, into the entry function that
// FiberStack::prepare left as the return address.
asm(R"(
  .pushsection .text
  .globl tg_switch_stack
  .hidden tg_switch_stack
  .type tg_switch_stack, @function
tg_switch_stack:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size tg_switch_stack, .-tg_switch_stack
  .popsection
)");

extern "C" void tg_switch_stack(void** save, void* load);

namespace emulation::detail {

namespace {
// The context being switched away from, so that the one arriving can record its stack.
thread_local ExecutionContext* switching_from = nullptr;

size_t page_bytes() {
  static const size_t bytes = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return bytes;
}

void arrived(ExecutionContext& self) {
#if defined(__SANITIZE_ADDRESS__)
  const void* from_bottom = nullptr;
  size_t from_size = 0;
  __sanitizer_finish_switch_fiber(self.sanitizer_fake_stack, &from_bottom, &from_size);
  if (switching_from != nullptr) {
    switching_from->stack_bottom = from_bottom;
    switching_from->stack_size = from_size;
  }
#else
  (void)self;
#endif
}
}  // namespace

void switch_context(ExecutionContext& from, ExecutionContext& to, bool from_is_done) {
  switching_from = &from;
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_start_switch_fiber(from_is_done ? nullptr : &from.sanitizer_fake_stack, to.stack_bottom, to.stack_size);
#else
  (void)from_is_done;
#endif
  tg_switch_stack(&from.stack_pointer, to.stack_pointer);
  arrived(from);
}

void fiber_started(ExecutionContext& self) { arrived(self); }

FiberStack::FiberStack() {
  void* mapping = mmap(nullptr, page_bytes() + kBytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mapping == MAP_FAILED) throw std::bad_alloc();
  mapping_ = static_cast<char*>(mapping);
  if (mprotect(mapping_, page_bytes(), PROT_NONE) != 0) {
    munmap(mapping_, page_bytes() + kBytes);
    throw std::bad_alloc();
  }
}

FiberStack::~FiberStack() { munmap(mapping_, page_bytes() + kBytes); }

void FiberStack::prepare(ExecutionContext& context, void (*entry)()) {
  char* const top = mapping_ + page_bytes() + kBytes;  // page-aligned
  // What tg_switch_stack pops, lowest address first: control words, r15, r14, r13, r12, rbx, rbp,
  // then the return address (entry) and a null return address for entry itself, so that stack
  // walks stop there. 88 bytes below a 16-aligned top leave the stack pointer at entry's first
  // instruction 8 past a multiple of 16, as after a call.
  auto* frame = reinterpret_cast<uint64_t*>(top - 88);
  const uint32_t sse_control = __builtin_ia32_stmxcsr();
  uint16_t x87_control = 0;
  asm volatile("fnstcw %0" : "=m"(x87_control));
  frame[0] = sse_control | static_cast<uint64_t>(x87_control) << 32;
  for (int slot = 1; slot <= 6; ++slot) frame[slot] = 0;
  frame[7] = reinterpret_cast<uint64_t>(entry);
  frame[8] = 0;
  context.stack_pointer = frame;
  context.stack_bottom = top - kBytes;
  context.stack_size = kBytes;
  context.sanitizer_fake_stack = nullptr;
}

void FiberStack::forget_frames() {
#if defined(__SANITIZE_ADDRESS__)
  __asan_unpoison_memory_region(mapping_ + page_bytes(), kBytes);
#endif
}

}  // namespace emulation::detail
