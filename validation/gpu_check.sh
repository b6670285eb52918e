#!/usr/bin/env bash
# Device check of the GPU backend, for a machine with an NVIDIA GPU (issue 10). It
#   1. configures and builds the CUDA variant (-DDIVSIM_CUDA=ON) in build-gpu-check/;
#   2. runs the GPU unit tests (ctest -L gpu: kernels vs the CPU layers, device Philox, GPU engine vs CPU
#      engine, NCCL reducer);
#   3. trains one fault-free run several ways: CPU fp32, CPU tf32 emulation, GPU fp32 (cuBLAS pedantic,
#      twice), GPU tf32 (tensor cores), and 2 logical ranks on the GPU with dist.backend=mpi and =nccl;
#   4. compares their per-step global loss (/train/global_loss) and parameter hashes, and prints one table.
# Exit status 0 when every check passes, 1 when one fails, 2 when it cannot run here (no GPU, no tools).
# Takes 2-4 minutes on a 16-core node with one H100/H200, most of it the build.
#
# Tolerances, per step, relative difference of the global loss |a - b| / |b|:
#   GPU fp32 vs CPU fp32: the same arithmetic summed in another order (cuBLAS vs Eigen GEMM blocking,
#     fused multiply-adds): ~1e-7 at step 0, growing slowly as training amplifies it. Limits: step 0
#     <= 1e-6, every step <= 1e-4, and the median at least 10x below the TF32 effect.
#   GPU tf32 vs CPU fp32: real TF32 must move the loss by the same order as the CPU's precision.matmul=tf32
#     emulation does (median ratio within 0.1..10; both ~1e-3 after a few hundred steps). Hardware and
#     emulation round the same inputs but accumulate differently, so they are not expected to agree bitwise.
#   Two GPU fp32 runs, and dist.backend=nccl vs =mpi on one process: bitwise equal parameter hashes at
#     every step (one process: NCCL's sum over one rank is the identity, like MPI's).
# Not here: several GPUs or nodes (docs/gpu.md shows the Slurm commands); performance.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build-gpu-check}
OUT=${OUT_DIR:-$BUILD/gpu-check}
STEPS=${STEPS:-200}
PYTHON=${PYTHON:-/usr/bin/python3}
start=$SECONDS

die() { echo "gpu_check: $*" >&2; exit 2; }

command -v nvidia-smi >/dev/null ||
  die "nvidia-smi not found: this check needs a machine with an NVIDIA GPU and its driver; nothing was run"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >/dev/null 2>&1 ||
  die "nvidia-smi finds no usable GPU: $(nvidia-smi 2>&1 | head -1)"
MPIEXEC=${MPIEXEC:-$(command -v mpiexec.mpich || command -v mpiexec || true)}
[[ -n $MPIEXEC ]] || die "no mpiexec found (install MPICH, or set MPIEXEC)"
command -v cmake >/dev/null || die "cmake not found"
"$PYTHON" -c 'import h5py, numpy' 2>/dev/null || die "$PYTHON cannot import h5py and numpy (needed for the comparison)"

echo "gpu_check: GPU $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)"
echo "gpu_check: building the CUDA variant in $BUILD"
mkdir -p "$OUT"
cmake -S "$ROOT" -B "$BUILD" -DDIVSIM_CUDA=ON -DCMAKE_BUILD_TYPE=Release >"$OUT/configure.log" 2>&1 ||
  { tail -20 "$OUT/configure.log"; die "configuring failed (log: $OUT/configure.log)"; }
cmake --build "$BUILD" -j "$(nproc)" >"$OUT/build.log" 2>&1 ||
  { tail -30 "$OUT/build.log"; die "the build failed (log: $OUT/build.log)"; }
echo "gpu_check: built in $((SECONDS - start)) s"

echo "gpu_check: GPU unit tests"
tests_rc=0
ctest --test-dir "$BUILD" -L gpu --no-tests=error --output-on-failure --timeout 120 >"$OUT/gpu_tests.log" 2>&1 ||
  tests_rc=$?
grep -E "tests passed|tests failed|No tests" "$OUT/gpu_tests.log" || true
tests_summary=$(grep -E "tests passed" "$OUT/gpu_tests.log" | head -1 || true)
[[ -n $tests_summary ]] || tests_summary="no summary (see $OUT/gpu_tests.log)"
# The printed comparisons of the TF32 tests, for the record.
if [[ -x $BUILD/tests/divsim_gpu_tests ]]; then
  "$BUILD/tests/divsim_gpu_tests" --gtest_filter='*Tf32*' 2>&1 | grep -E "TF32|tf32|fp32|bf16" | sed 's/^/    /' || true
fi

# Fashion-MNIST where Debian's dataset package is installed, else the synthetic teacher data.
if [[ -d /usr/share/datasets/fashion-mnist ]]; then
  DATA=(--data.train_size=16384 --data.test_size=2000)
else
  echo "gpu_check: /usr/share/datasets/fashion-mnist is absent: using data.source=synthetic"
  DATA=(--data.source=synthetic)
fi
COMMON=(--quiet --train.steps="$STEPS" --record.layers_every=0 --run.overwrite=true "${DATA[@]}")

run() {  # run NAME ARGS...: one process, output $OUT/NAME.h5, log $OUT/NAME.log
  local name=$1
  shift
  "$MPIEXEC" -n 1 "$BUILD/divsim" "${COMMON[@]}" --run.out="$OUT/$name.h5" "$@" >"$OUT/$name.log" 2>&1 ||
    { cat "$OUT/$name.log"; echo "gpu_check: run $name failed" >&2; exit 1; }
  echo "  $name: $(grep -o '[0-9.]* steps/s' "$OUT/$name.log")"
}
echo "gpu_check: training runs ($STEPS steps each)"
run cpu_fp32 --run.device=cpu --precision.matmul=fp32
run cpu_tf32 --run.device=cpu --precision.matmul=tf32
run gpu_fp32 --run.device=cuda --precision.matmul=fp32
run gpu_fp32_rerun --run.device=cuda --precision.matmul=fp32
run gpu_tf32 --run.device=cuda --precision.matmul=tf32
run gpu_w2_mpi --run.device=cuda --dist.world_size=2 --dist.backend=mpi
nccl_linked=0
if ldd "$BUILD/divsim" | grep -q libnccl; then
  nccl_linked=1
  run gpu_w2_nccl --run.device=cuda --dist.world_size=2 --dist.backend=nccl
fi

status=0
TESTS_RC=$tests_rc TESTS_SUMMARY=$tests_summary NCCL_LINKED=$nccl_linked "$PYTHON" - "$OUT" <<'EOF' || status=$?
import os, sys
import h5py, numpy as np

out = sys.argv[1]
def load(name):
    with h5py.File(f"{out}/{name}.h5", "r") as f:
        return f["/train/global_loss"][:], f["/train/param_hash"][:], f["/eval/loss"][-1].mean()

runs = {n: load(n) for n in ["cpu_fp32", "cpu_tf32", "gpu_fp32", "gpu_fp32_rerun", "gpu_tf32", "gpu_w2_mpi"]}
if os.environ["NCCL_LINKED"] == "1":
    runs["gpu_w2_nccl"] = load("gpu_w2_nccl")

def rel(a, b):
    la, lb = runs[a][0], runs[b][0]
    return np.abs(la - lb) / np.abs(lb)

rows, failed = [], False
def row(check, detail, ok):
    global failed
    failed |= ok is False
    rows.append((check, detail, {True: "PASS", False: "FAIL", None: "INFO"}[ok]))

row("GPU unit tests (ctest -L gpu)", os.environ["TESTS_SUMMARY"], os.environ["TESTS_RC"] == "0")
fp32, emu, hw = rel("gpu_fp32", "cpu_fp32"), rel("cpu_tf32", "cpu_fp32"), rel("gpu_tf32", "cpu_fp32")
fmt = lambda r: f"step0 {r[0]:.1e} median {np.median(r):.1e} max {r.max():.1e}"
row("GPU fp32 vs CPU fp32", fmt(fp32) + "  (limits 1e-6, 1e-4, 10x below TF32)",
    bool(fp32[0] <= 1e-6 and fp32.max() <= 1e-4 and np.median(fp32) * 10 <= np.median(emu)))
row("CPU tf32 emulation vs CPU fp32", fmt(emu), None)
ratio = np.median(hw) / np.median(emu)
row("GPU tf32 vs CPU fp32", fmt(hw) + f"  (median / emulation's: {ratio:.2f}, limits 0.1..10)",
    bool(0.1 <= ratio <= 10))
row("GPU tf32 vs CPU tf32 emulation", fmt(rel("gpu_tf32", "cpu_tf32")), None)
row("GPU tf32 vs GPU fp32", fmt(rel("gpu_tf32", "gpu_fp32")), None)
same = lambda a, b: int((runs[a][1] == runs[b][1]).all(axis=-1).sum())
steps = len(runs["gpu_fp32"][1])
n = same("gpu_fp32", "gpu_fp32_rerun")
row("GPU fp32 rerun, bitwise", f"param_hash equal at {n}/{steps} steps", n == steps)
if "gpu_w2_nccl" in runs:
    n = same("gpu_w2_nccl", "gpu_w2_mpi")
    row("W=2 on 1 GPU: nccl vs mpi, bitwise", f"param_hash equal at {n}/{steps} steps", n == steps)
else:
    row("W=2 on 1 GPU: nccl vs mpi", "not run: divsim does not link NCCL (dist.backend=nccl not wired)", None)
row("final eval loss", "  ".join(f"{k} {v[2]:.4f}" for k, v in runs.items()), None)

width = max(len(r[0]) for r in rows)
print(f"\n{'check':<{width}}  result  details")
print("-" * (width + 60))
for check, detail, result in rows:
    print(f"{check:<{width}}  {result:<6}  {detail}")
sys.exit(1 if failed else 0)
EOF
verdict=$([[ $status == 0 ]] && echo "all checks passed" || echo "SOME CHECKS FAILED")
echo "gpu_check: $verdict in $((SECONDS - start)) s (outputs in $OUT)"
exit $status
