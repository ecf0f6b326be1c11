#!/usr/bin/env bash
# The CUDA checks on a real GPU, in two halves:
#
#   scripts/gpu-check.sh prepare   here, on a build machine with nvcc but no GPU: builds
#                                  build-gpu/ for sm_90 (H100/H200) without MPI, and copies the
#                                  shared libraries it links (OpenBLAS, Boost.Program_options,
#                                  libgfortran, ...) into build-gpu/lib, since the GPU machine has none
#                                  of Debian's -dev packages. When NCCL and MPI are here, also
#                                  build-gpu/nccl/tapegrad: the same program with MPI and NCCL, its
#                                  extra libraries (libmpi and what it loads) in build-gpu/lib too.
#   scripts/gpu-check.sh [run]     on the GPU machine, over a copy of the tree that carries
#                                  build-gpu/ (about 50 MB; cuBLAS and the driver are the
#                                  machine's own, CUDA 13 like the build): the CUDA tests (every kernel against the CPU, the
#                                  gradcheck registry on the GPU, 20 training steps of each model),
#                                  compute-sanitizer over the kernel tests, the GPU benchmarks, and
#                                  gradients reduced by NCCL under `mpirun -np 1` when the machine
#                                  has mpirun and libnccl. Every step has a timeout; together they
#                                  stay under 9.5 minutes (150 + 2 x 90 + 9 x 15 + 30 + 60 s).
#                                  Results go to $OUT when it is set.
#
# libnccl (about 200 MB) is not carried, like cuBLAS: the NCCL step uses the machine's own
# (/usr/local/cuda/lib64, or the nvidia-nccl wheel next to PyTorch) and is skipped without one.
# The main build has no MPI, so that the other steps never depend on libmpi or libnccl.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build-gpu

prepare() {
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DTAPEGRAD_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DTAPEGRAD_MPI=OFF
  cmake --build "$BUILD" -j "$(nproc)" --target tapegrad tapegrad_cuda_tests
  local binaries=("$BUILD/tapegrad" "$BUILD/tests/cuda/tapegrad_cuda_tests")
  # The NCCL build: only the tapegrad target, in a build tree of its own outside the carried copy
  # (build-gpu-nccl/); its binary goes to build-gpu/nccl/.
  rm -rf "$BUILD/nccl"
  cmake -S . -B "$BUILD-nccl" -DCMAKE_BUILD_TYPE=Release -DTAPEGRAD_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DTAPEGRAD_MPI=AUTO -DTAPEGRAD_BUILD_TESTS=OFF
  cmake --build "$BUILD-nccl" -j "$(nproc)" --target tapegrad
  if ldd "$BUILD-nccl/tapegrad" | grep -q libnccl; then
    mkdir -p "$BUILD/nccl"
    cp "$BUILD-nccl/tapegrad" "$BUILD/nccl/tapegrad"
    binaries+=("$BUILD/nccl/tapegrad")
  else
    echo "gpu-check prepare: no NCCL or no MPI here: the NCCL step will be skipped"
  fi
  mkdir -p "$BUILD/lib"
  # Everything the binaries load except glibc and the GPU driver / CUDA libraries of the machine
  # (cuBLAS and NCCL: too large to carry, see above).
  for binary in "${binaries[@]}"; do
    ldd "$binary" | awk '/=> \// {print $3}' |
      grep -v -E '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*)\.so|libcuda\.so|libcublas|libnccl' |
      xargs -r cp -L -t "$BUILD/lib/"
  done
  du -sh "${binaries[@]}" "$BUILD/lib"
}

# The gradients of `tapegrad train --device cuda` reduced by NCCL: `mpirun -np 1` (a job of one
# process still reduces, an identity), compared with the same run without mpirun. One rank only:
# the machine has one GPU, and NCCL refuses two ranks on the same GPU. At most 60 s.
nccl_step() {
  local out=$1 binary="$BUILD/nccl/tapegrad"
  echo "== NCCL: gradients of a CUDA run reduced by NCCL under mpirun -np 1"
  if [ ! -x "$binary" ]; then echo "skipped: no build-gpu/nccl/tapegrad (prepare found no NCCL)"; return 0; fi
  if ! command -v mpirun > /dev/null; then echo "skipped: no mpirun on this machine"; return 0; fi
  local wheel
  wheel=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' \
    2> /dev/null || true)
  local path="$LD_LIBRARY_PATH${wheel:+:$wheel}"
  if LD_LIBRARY_PATH="$path" ldd "$binary" | grep "not found"; then
    echo "skipped: the libraries above are missing (libnccl: /usr/local/cuda/lib64 or the nvidia-nccl wheel)"
    return 0
  fi
  local data="$out/nccl-text.txt"
  for _ in $(seq 40); do echo "the quick brown fox jumps over the lazy dog."; done > "$data"
  local args=(train --device cuda --task charlm --data "$data" --context 16 --layers 1 --dim 32
              --heads 4 --batch 8 --steps 5 --optimizer sgd --lr 0.5 --json)
  LD_LIBRARY_PATH="$path" timeout 20 "$binary" "${args[@]}" > "$out/nccl-plain.txt" 2>&1 || return 1
  LD_LIBRARY_PATH="$path" timeout 40 mpirun -np 1 --allow-run-as-root -x LD_LIBRARY_PATH -x OPENBLAS_CORETYPE \
    "$binary" "${args[@]}" > "$out/nccl-mpirun.txt" 2>&1 || { tail -n 20 "$out/nccl-mpirun.txt"; return 1; }
  grep "data parallel" "$out/nccl-mpirun.txt"
  grep -q "(gradients: nccl)" "$out/nccl-mpirun.txt" || { echo "the run did not reduce through NCCL"; return 1; }
  python3 - "$out/nccl-plain.txt" "$out/nccl-mpirun.txt" <<'PY'
import json, sys
loss = [json.loads([l for l in open(p) if l.startswith("{")][-1])["train_loss"] for p in sys.argv[1:]]
print(f"train loss without mpirun {loss[0]:.6g}, with NCCL {loss[1]:.6g}")
sys.exit(0 if abs(loss[0] - loss[1]) <= 1e-5 * abs(loss[0]) else 1)
PY
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
  echo "== generate: tokens per second with and without the KV cache on the GPU"
  timeout 30 "$BUILD/tapegrad" bench --workload generate --device cuda --max-seq 512 --steps 2 \
    --json | tee -a "$out/bench.jsonl" || status=1
  nccl_step "$out" || status=1
  echo "gpu-check: $([ $status = 0 ] && echo passed || echo FAILED)"
  return $status
}

case "${1:-run}" in
  prepare) prepare ;;
  run) run ;;
  *) echo "usage: $0 [prepare|run]" >&2; exit 2 ;;
esac
