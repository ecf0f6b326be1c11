#pragma once
// OpenBLAS picks its kernel set once, when it loads: the one OPENBLAS_CORETYPE names, or the one
// made for the CPU model it recognises. A CPU newer than the OpenBLAS build (Debian 12's 0.3.21 on
// a recent Xeon) is not recognised, and OpenBLAS falls back to its generic SSE3 set, "Prescott":
// on such a Xeon its GEMMs ran at 32 GFLOP/s a core, against 79 with the AVX2 set (Haswell) and
// 148 with the AVX-512 one (SkylakeX). The executable therefore checks, first thing, whether that
// happened and, if so, runs itself again with the set the CPU's features allow.
#include <string>

namespace tg::cli {

// What the CPU offers that OpenBLAS's kernel sets use.
struct CpuSimd {
  bool avx2_fma = false;  // AVX2 and FMA: the Haswell set (AMD's Zen uses it too)
  bool avx512 = false;    // AVX-512 F, CD, BW, DQ and VL: the SkylakeX set
};
CpuSimd cpu_simd();  // this CPU's

// The kernel set to ask for when OpenBLAS chose `loaded` on a CPU offering `simd`, or "" to keep
// it: only a set without AVX2 on a CPU with AVX2 and FMA is replaced (a set OpenBLAS chose for a
// CPU it knows is never second-guessed). Names as openblas_get_corename spells them, any case.
std::string better_openblas_core(const std::string& loaded, CpuSimd simd);

// Called at the start of main: when OPENBLAS_CORETYPE is unset and better_openblas_core finds a
// better set, sets OPENBLAS_CORETYPE to it, TAPEGRAD_OPENBLAS_FALLBACK to "<the set OpenBLAS
// chose>@<this process id>", and replaces the process with /proc/self/exe and the same
// arguments. Returns only when nothing is to be done or the exec failed (the run goes on with
// the set OpenBLAS chose). TAPEGRAD_OPENBLAS_FALLBACK is that message alone: the second run reads
// it when it names its own process id (exec keeps it), and every run removes it from its
// environment, so a value set by a user or inherited from another process changes nothing.
void rerun_with_better_openblas_core(char** argv);

// For `tapegrad info`: which set OpenBLAS fell back to, when tapegrad chose another; or that the
// user's OPENBLAS_CORETYPE chose it; or "".
std::string openblas_core_note();

}  // namespace tg::cli
