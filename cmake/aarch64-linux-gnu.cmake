# A cross build for 64-bit ARM Linux on a Debian x86-64 machine (scripts/check-aarch64.sh):
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake ...
# Debian's cross compiler (g++-aarch64-linux-gnu) and its multiarch libraries (libopenblas-dev:arm64,
# under /usr/lib/aarch64-linux-gnu and /usr/include/aarch64-linux-gnu): no sysroot of its own, the
# compiler already searches those folders and /usr/include for the architecture-free headers
# (Catch2, nlohmann-json). The tests run under qemu-aarch64 (CMAKE_CROSSCOMPILING_EMULATOR), so that
# catch_discover_tests can list them and ctest run them from this machine.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# Where find_library and find_path look first (<prefix>/lib/aarch64-linux-gnu), as on an arm64
# Debian; CMake's compiler check sets the same, but only after the first find_package.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# GCC's note on every function that takes a std::pair<double, double> by value (GCC 10.1 changed
# how AArch64 passes it): it concerns linking with objects built by an older GCC, which this build
# never does.
set(CMAKE_CXX_FLAGS_INIT -Wno-psabi)

# qemu-user: qemu-aarch64 (Debian's qemu-user) or qemu-aarch64-static (qemu-user-static). -L makes
# /usr/aarch64-linux-gnu the programs' root where it has the file asked for: the dynamic loader, the
# C and C++ runtimes the cross compiler linked against. LD_LIBRARY_PATH (set for the emulated
# program only, -E) makes the loader take libc from there too, before the multiarch folder
# /lib/aarch64-linux-gnu: the libc6:arm64 that OpenBLAS's packages pull in is another build of
# glibc than the cross compiler's (2.36-9 and 2.36-8cross1 in Debian 12), and a loader and a libc of
# two builds hang in the first pthread_create. OpenBLAS and gfortran come from the multiarch folders.
find_program(TAPEGRAD_QEMU_AARCH64 NAMES qemu-aarch64 qemu-aarch64-static)
if(TAPEGRAD_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${TAPEGRAD_QEMU_AARCH64} -L /usr/aarch64-linux-gnu
      -E LD_LIBRARY_PATH=/usr/aarch64-linux-gnu/lib)
endif()
