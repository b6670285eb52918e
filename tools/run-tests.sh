#!/usr/bin/env bash
# Runs divsim's tests with CTest. Three stages:
#   tools/run-tests.sh            the whole suite on a Release build (build/), then the GPU variant's
#                                 build and tests (build-cuda/) wherever the CUDA toolkit is
#   tools/run-tests.sh --asan     the unit and MPI tests on an ASan + UBSan + libstdc++ debug-mode build
#                                 (build-asan/, preset asan)
#   tools/run-tests.sh --fuzz     every libFuzzer target for DIVSIM_FUZZ_SECONDS (60) each (build-fuzz/)
# Extra arguments go to ctest, e.g. tools/run-tests.sh -L unit  or  tools/run-tests.sh --asan -R Journal
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

case "${1:-}" in
  --asan)
    shift
    cmake --preset asan >/dev/null
    cmake --build --preset asan -j"$jobs"
    # MPICH keeps its own allocations until exit: leak reports would be about the library, not divsim.
    export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    exec ctest --preset asan -j"$jobs" "$@"
    ;;
  --fuzz)
    shift
    CC=clang CXX=clang++ cmake -S fuzz -B build-fuzz >/dev/null
    cmake --build build-fuzz -j"$jobs"
    exec ctest --test-dir build-fuzz --output-on-failure -j"$jobs" "$@"
    ;;
esac

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs" "$@"
# The GPU variant is configured and built wherever the CUDA toolkit is (so it never rots); its GPU
# tests skip with a reason on machines without a GPU.
if [ -x /usr/local/cuda/bin/nvcc ] && [ "$#" -eq 0 ]; then
  cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DDIVSIM_CUDA=ON >/dev/null
  cmake --build build-cuda -j"$jobs" --target divsim divsim_gpu_tests
  ctest --test-dir build-cuda --output-on-failure -L gpu
fi
