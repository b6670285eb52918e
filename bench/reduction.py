#!/usr/bin/python3
"""Cost of each gradient reduction mode (dist.reduce = mpi, ring, deterministic) at W = 2, 4, 8.

Milliseconds per step of the default job (784-256-128-10, global batch 256, default recording) in each
mode; the ratios to `mpi` are the cost of the mode. They include everything a mode changes: the
exchange itself (MPI_Allreduce; an explicit ring per DDP bucket; the deterministic chunk tree) and, for
`deterministic`, the gradient computed per canonical chunk of the batch (smaller products and one
partial gradient buffer per chunk). A last column runs `deterministic` with one chunk per rank
(dist.det_chunk = 256 / W): what the exchange costs by itself, when the bitwise agreement is asked only
of world sizes whose per-rank batch that chunk divides. W logical ranks run on min(W, --procs) MPI
processes (--procs 0: one process per logical rank). Every point is run --repeats times, interleaved;
the fastest counts.

usage: bench/reduction.py [--quick] [--write docs/performance.md] [--worlds 2,4,8] [--procs 2]
       [--steps 500] [--repeats 3] [--divsim build/divsim]
"""
import argparse
import os
import tempfile

import benchlib

SECTION = "reduction"
QUICK = ["--steps", "60", "--repeats", "1", "--worlds", "2,8"]
ONE_CHUNK = "deterministic, one chunk per rank"
MODES = ("mpi", "ring", "deterministic", ONE_CHUNK)
GLOBAL_BATCH = 256  # the default job's


def mode_options(mode, w):
    if mode == ONE_CHUNK:
        return ["--dist.reduce=deterministic", f"--dist.det_chunk={GLOBAL_BATCH // w}"]
    return [f"--dist.reduce={mode}"]


def table(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    benchlib.add_divsim_arguments(ap)
    ap.add_argument("--worlds", default="2,4,8")
    ap.add_argument("--procs", type=int, default=2, help="MPI processes at most (0: one per logical rank)")
    ap.add_argument("--steps", type=int, default=500)
    a = ap.parse_args(argv)
    worlds = [int(w) for w in a.worlds.split(",")]
    procs = benchlib.processes(worlds, a.procs)
    with tempfile.TemporaryDirectory(prefix="bench-reduction-") as tmp:
        runs = benchlib.repeated(a.repeats, [(w, m) for w in worlds for m in MODES], lambda p: benchlib.run_divsim(
            a, procs[p[0]], [f"--train.steps={a.steps}", f"--dist.world_size={p[0]}", *mode_options(p[1], p[0])],
            os.path.join(tmp, f"{MODES.index(p[1])}-{p[0]}.h5")))
    rows = ["| W | processes | mpi ms/step | ring ms/step | deterministic ms/step | ring / mpi | deterministic / mpi "
            f"| {ONE_CHUNK}: ms/step | / mpi |",
            "|---|---|---|---|---|---|---|---|---|"]
    for w in worlds:
        ms = {m: 1000.0 / benchlib.fastest(runs[(w, m)])["rate"] for m in MODES}
        rows.append(f"| {w} | {procs[w]} | {ms['mpi']:.2f} | {ms['ring']:.2f} | {ms['deterministic']:.2f} | "
                    f"{ms['ring'] / ms['mpi']:.2f} | {ms['deterministic'] / ms['mpi']:.2f} | "
                    f"{ms[ONE_CHUNK]:.2f} | {ms[ONE_CHUNK] / ms['mpi']:.2f} |")
    rows += ["", f"Settings: {a.steps} steps, best of {a.repeats}; {benchlib.machine()}."]
    return "\n".join(rows)


if __name__ == "__main__":
    benchlib.cli(table, SECTION, QUICK)
