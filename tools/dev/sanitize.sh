#!/bin/sh
# The test suite under AddressSanitizer and UBSan (CMake's RESCCL_SANITIZE):
#   tools/dev/sanitize.sh [DIR] [-- CTEST_ARGS...]   (default build-asan/)
# configures DIR so, builds every target there and runs every test (ctest
# -j JOBS, default the CPU count): the C tests, the Lua specs with the
# sanitizers' runtimes preloaded, the emitted C compiled with them too
# (tests/CMakeLists.txt). Exits with ctest's status.
#   tools/dev/sanitize.sh --quick DIR [CMAKE_ARGS...]
# configures DIR without the GPU parts and builds only the core, the Lua
# module and the C unit tests: what `make test` runs its asan_* tests on.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}
if [ "${1:-}" = --quick ]; then
  [ $# -ge 2 ] || { echo "usage: tools/dev/sanitize.sh --quick DIR [CMAKE_ARGS...]" >&2; exit 2; }
  dir=$2
  shift 2
  # An empty CMAKE_CUDA_COMPILER skips check_language(CUDA), which runs nvcc.
  cmake -S "$root" -B "$dir" -DRESCCL_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug \
    -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON -DCMAKE_CUDA_COMPILER= "$@" >/dev/null
  exec cmake --build "$dir" -j "$jobs" --target resccl_lua test_core test_sim test_group test_setting test_planfile test_bootstrap
fi
dir=build-asan
if [ $# -gt 0 ] && [ "$1" != -- ]; then dir=$1; shift; fi
[ "${1:-}" = -- ] && shift
cmake -S "$root" -B "$dir" -DRESCCL_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build "$dir" -j "$jobs"
cd "$dir" && exec ctest --output-on-failure -j "$jobs" "$@"
