#pragma once
// Which CPU fast paths may run. A kernel with a vectorised fast path (AVX2 + FMA, in its own
// *_avx2.cpp file compiled for that instruction set) takes it only when fast_paths_enabled(): the
// CPU has AVX2 and FMA, and no FastPathsOff scope is open. Otherwise the kernel's plain loop runs.
// The tests open a FastPathsOff scope to compare both paths on one machine; `tapegrad bench
// --plain-kernels` does the same, to show what the fast paths pay.
namespace tg::cpu {

bool cpu_has_avx2_fma();    // what the CPU offers (asked once)
// AVX-512 with VNNI (vpdpbusd) and the byte / 256-bit forms (avx512f, bw, vl, vnni): the int8
// product's faster kernel (cpu/fast/quantize.h). Asked once; a kernel takes it only where
// fast_paths_enabled() too.
bool cpu_has_avx512_vnni();
// AVX-512 F: the attention tiles' 512-bit products (cpu/fast/attention_tiles.h) and GELU's
// sixteen lanes (cpu/fast/elementwise_avx512.cpp). Asked once.
bool cpu_has_avx512f();
// TAPEGRAD_MAX_CPU_ISA=avx2 hides AVX-512 from both questions above: every kernel then runs what a
// CPU with AVX2 alone runs (tiles, GELU, the int8 product), to measure such a CPU on this one.
// Unset, empty or avx512: what the CPU has. Any other value: tg::Error, at the first question.
inline constexpr const char* kMaxIsaVariable = "TAPEGRAD_MAX_CPU_ISA";
bool avx512_hidden();  // TAPEGRAD_MAX_CPU_ISA=avx2 is set (tg::Error for a bad value, as above)
// cpu_has_avx2_fma(), no FastPathsOff scope open and no tg::Textbook (autograd/textbook.h), which
// turns the fast paths off along with BLAS, the tiled attention and the threads.
bool fast_paths_enabled();

// While one exists (on any thread), every kernel takes its plain path.
class FastPathsOff {
 public:
  FastPathsOff();
  ~FastPathsOff();
  FastPathsOff(const FastPathsOff&) = delete;
  FastPathsOff& operator=(const FastPathsOff&) = delete;
};

}  // namespace tg::cpu
