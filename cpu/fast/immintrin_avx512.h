#pragma once
// <immintrin.h> for the files compiled with -mavx512f (cpu/fast/*_avx512.cpp, quantize_vnni.cpp),
// and nothing else, so that those files keep to their rule: no code shared with the baseline build.
//
// GCC 12's AVX-512 max, min, shift and conversion intrinsics start from a self-initialised
// "undefined" vector, which -Wuninitialized reports wherever they are inlined (GCC bug 105593):
// silenced for the header's own lines only.
#if defined(__clang__)
#include <immintrin.h>
#else
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif
