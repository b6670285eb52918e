#!/usr/bin/env bash
# Builds divsim (Release, build/) if needed and runs the whole test suite with CTest.
# Extra arguments go to ctest, e.g. tools/run-tests.sh -L unit  or  -LE slow
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure -j"$(nproc)" "$@"
# The GPU variant is configured and built wherever the CUDA toolkit is (so it never rots); its GPU
# tests skip with a reason on machines without a GPU.
if [ -x /usr/local/cuda/bin/nvcc ] && [ "$#" -eq 0 ]; then
  cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DDIVSIM_CUDA=ON >/dev/null
  cmake --build build-cuda -j"$(nproc)" --target divsim divsim_gpu_tests
  ctest --test-dir build-cuda --output-on-failure -L gpu
fi
