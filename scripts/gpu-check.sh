#!/usr/bin/env bash
# The CUDA checks on a real GPU, in two halves:
#
#   scripts/gpu-check.sh prepare   here, on a build machine with nvcc but no GPU: builds
#                                  build-gpu/ for sm_90 (H100/H200) and copies the shared
#                                  libraries it links (OpenBLAS, Boost.Program_options, libgomp,
#                                  ...) into build-gpu/lib, since the GPU machine has none of
#                                  Debian's -dev packages.
#   scripts/gpu-check.sh [run]     on the GPU machine, over a copy of the tree that carries
#                                  build-gpu/ (about 50 MB; cuBLAS and the driver are the
#                                  machine's own, CUDA 13 like the build): the CUDA tests (every kernel against the CPU, the
#                                  gradcheck registry on the GPU, 20 training steps of each model),
#                                  compute-sanitizer over the kernel tests, and the GPU benchmarks.
#                                  Every step has a timeout; together they stay under 8 minutes
#                                  (150 + 2 x 90 + 9 x 15 s). Results go to $OUT when it is set.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build-gpu

prepare() {
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DTAPEGRAD_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90
  cmake --build "$BUILD" -j "$(nproc)" --target tapegrad tapegrad_cuda_tests
  mkdir -p "$BUILD/lib"
  # Everything the binaries load except glibc and the GPU driver / CUDA libraries of the machine.
  for binary in "$BUILD/tapegrad" "$BUILD/tests/cuda/tapegrad_cuda_tests"; do
    ldd "$binary" | awk '/=> \// {print $3}' |
      grep -v -E '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*)\.so|libcuda\.so|libcublas' |
      xargs -r cp -L -t "$BUILD/lib/"
  done
  du -sh "$BUILD/tapegrad" "$BUILD/tests/cuda/tapegrad_cuda_tests" "$BUILD/lib"
}

run() {
  local out=${OUT:-$BUILD/gpu-check}
  mkdir -p "$out"
  export LD_LIBRARY_PATH="$PWD/$BUILD/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
  export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell}
  local tests="$BUILD/tests/cuda/tapegrad_cuda_tests"
  local status=0
  # cuBLAS comes from the machine's toolkit (its libraries are too large to carry): it must be the
  # major version this build linked, which ldd shows.
  if ldd "$BUILD/tapegrad" "$tests" | grep "not found"; then
    echo "gpu-check: libraries above are missing on this machine (LD_LIBRARY_PATH=$LD_LIBRARY_PATH)"
    return 1
  fi
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
  "$BUILD/tapegrad" info | tee "$out/info.txt"

  echo "== CUDA tests: kernels, seam, gradcheck registry, training (real GPU)"
  timeout 150 "$tests" --reporter compact --durations yes > "$out/tests.txt" 2>&1 || status=1
  tail -n 5 "$out/tests.txt"

  echo "== compute-sanitizer (memcheck, racecheck) over the kernel tests"
  local sanitizer=compute-sanitizer
  command -v "$sanitizer" > /dev/null || sanitizer=/usr/local/cuda/bin/compute-sanitizer
  for tool in memcheck racecheck; do  # at most 90 s each
    timeout 90 "$sanitizer" --tool "$tool" --error-exitcode 3 "$tests" "[cuda]~[gradcheck]~[training]" \
      > "$out/sanitizer-$tool.txt" 2>&1 || status=1
    tail -n 3 "$out/sanitizer-$tool.txt"
  done

  echo "== bench: ms per training step on the GPU (and on the CPU's 16 cores for scale)"
  for workload in textcls-small textcls-mid timeseries attn-long; do
    for device in cuda cpu; do
      timeout 15 "$BUILD/tapegrad" bench --workload "$workload" --device "$device" --steps 10 --json \
        | tee -a "$out/bench.jsonl" || status=1
    done
  done
  timeout 15 "$BUILD/tapegrad" bench --workload textcls-mid --device cuda --tf32 --steps 10 --json \
    | tee -a "$out/bench.jsonl" || status=1
  echo "gpu-check: $([ $status = 0 ] && echo passed || echo FAILED)"
  return $status
}

case "${1:-run}" in
  prepare) prepare ;;
  run) run ;;
  *) echo "usage: $0 [prepare|run]" >&2; exit 2 ;;
esac
