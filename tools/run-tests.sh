#!/usr/bin/env bash
# Builds divsim (Release, build/) if needed and runs the whole test suite with CTest.
# Extra arguments go to ctest, e.g. tools/run-tests.sh -L unit  or  -LE slow
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure -j"$(nproc)" "$@"
