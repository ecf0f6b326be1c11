#!/usr/bin/env bash
# The library built for 64-bit ARM (aarch64) and its core tests run there, on an x86-64 Debian 12
# machine: Debian's cross compiler (g++-aarch64-linux-gnu), OpenBLAS for arm64 from the same
# archive (multiarch: libopenblas-dev:arm64), and qemu-user to run the tests. It proves that the
# portable paths compile and pass on a CPU without x86's instruction sets: runtime/features.cpp answers
# "no" to AVX2 and AVX-512 there, every kernel takes its plain loop (or OpenBLAS, the tiles' BLAS
# products, simd.h's vector-extension rows), and the x86-only files are compiled as the stubs of
# their #else branch. cpu/README.md ("On ARM") says what runs where.
#
# What is built (cmake/aarch64-linux-gnu.cmake; CMakeLists.txt's TAPEGRAD_BUILD_CLI and
# TAPEGRAD_TEST_SUBSET): the library in Release, without the command line, CUDA or MPI, and
# tapegrad_tests from the test folders below only (their sources at -O1, in unity batches as the
# main build), which is
#   tests/autograd/  the engine: tensors, tape, RNG, dtypes, checkpointing
#   tests/runtime/   its plumbing: the thread count and the pool, the allocator, autocast
#   tests/ops/       every op, with the gradient checks (tests/ops/test_gradcheck_cases.cpp)
#   tests/nn/        modules, attention, optimizers, models, with theirs (tests/nn/test_gradcheck_cases.cpp)
#   tests/cpu/       the plain kernels against their references, the CPU memory
#   tests/cpu/fast/  the fast kernels: the portable ones run, the AVX2 / AVX-512 cases print
#                    "[tapegrad: skipped]" (tests/support/skip.h) and CTest counts them as skipped
# Left out: io/, train/, analysis/, plot/, cli/, distributed/ and docs/ (the command line, files,
# plots: nothing there depends on the instruction set) and the CUDA tests.
#
# Then CTest runs each case under qemu-aarch64 (CMAKE_CROSSCOMPILING_EMULATOR: the arm64 loader and
# C and C++ runtimes from /usr/aarch64-linux-gnu, the toolchain file says why all three), OpenBLAS
# pinned to its generic ARMv8 kernels so that results do not depend on what the emulated CPU reports.
#
# Installs what is missing first (as `make setup` does: only missing packages, sudo when not root),
# so that it runs on a fresh Debian 12 machine. Uses ccache when installed, as every build here.
# The build folder: build-aarch64, or $BUILD_AARCH64.
set -euo pipefail
cd "$(dirname "$0")/.."

# OpenBLAS's kernel set for every run of the tests (the build lists them, CTest runs them): .ci/run
# and the Makefile name an x86 one, Haswell, which arm64's OpenBLAS does not know.
export OPENBLAS_CORETYPE=ARMV8

readonly BUILD=${BUILD_AARCH64:-build-aarch64}
readonly JOBS=${JOBS:-$(nproc)}
readonly TEST_FOLDERS="autograd;runtime;ops;nn;cpu;cpu/fast"
# The cross build's packages: the compiler, OpenBLAS for arm64, and the architecture-free ones
# (Catch2's headers and CMake files, nlohmann-json) that the x86-64 build uses too.
readonly PACKAGES=(cmake make ccache g++-aarch64-linux-gnu libopenblas-dev:arm64 catch2
                   nlohmann-json3-dev)

run_as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

installed() {
  dpkg-query -W -f='${Status}' "$1" 2> /dev/null | grep -q "ok installed"
}

# qemu-aarch64 from qemu-user, or qemu-aarch64-static from qemu-user-static: either will do.
has_qemu() {
  command -v qemu-aarch64 > /dev/null || command -v qemu-aarch64-static > /dev/null
}

install_missing() {
  local missing=()
  # (libopenblas-dev:arm64 is then missing, so the package lists are updated below)
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    echo "adding the arm64 architecture to dpkg (for libopenblas-dev:arm64)"
    run_as_root dpkg --add-architecture arm64
  fi
  for package in "${PACKAGES[@]}"; do
    installed "$package" || missing+=("$package")
  done
  has_qemu || missing+=(qemu-user)
  [ ${#missing[@]} -eq 0 ] && return
  echo "installing: ${missing[*]}"
  run_as_root apt-get update -qq
  run_as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
}

configure() {
  cmake -S . -B "$BUILD" -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
    -DCMAKE_BUILD_TYPE=Release -DTAPEGRAD_CUDA=OFF -DTAPEGRAD_BUILD_CLI=OFF \
    "-DTAPEGRAD_TEST_SUBSET=$TEST_FOLDERS" -DTAPEGRAD_TEST_COMPILE_OPTIONS=-O1
}

# The build lists the test cases by running the binary under qemu (catch_discover_tests), and a
# binary that hangs there would hang the build: both steps have a time limit, far above their time.
build() {
  timeout 45m cmake --build "$BUILD" -j "$JOBS" --target tapegrad_tests
}

run_tests() {
  (cd "$BUILD" && ctest --output-on-failure -j "$JOBS" --timeout 300)
}

install_missing
configure
build
run_tests
