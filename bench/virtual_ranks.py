#!/usr/bin/python3
"""Virtual-rank scaling: the default job at W = 1, 2, 4, ..., 256 logical ranks on 2 MPI processes.

For each W: steps/s of the step loop, wall time of the whole run (start-up, data loading and the HDF5
file included: what a sweep costs), and the peak RSS of each process (/usr/bin/time -v's maximum
resident set size). W=1 runs on one process (W must be a multiple of the process count). The global
batch stays 256, so the per-rank batch shrinks to 1 at W=256 and the work per step is the same batch
spread over more replicas: what grows is per-replica bookkeeping (optimizer step, norms, hashes,
trajectory columns) and the state each process holds, one replica per local logical rank. The last
column divides the RSS growth over the W=2 run by the replicas added per process; the settings line
gives one replica's parameters + gradient + momentum for comparison. Default: one pass (the total is
the time a user's sweep takes).

usage: bench/virtual_ranks.py [--quick] [--write docs/performance.md] [--worlds 1,2,4,...,256]
       [--procs 2] [--steps 500] [--repeats 1] [--divsim build/divsim]
"""
import argparse
import os
import tempfile

import benchlib

SECTION = "virtual_ranks"
QUICK = ["--steps", "20", "--worlds", "1,2,8,32"]
HIDDEN, IN_FEATURES, CLASSES = (256, 128), 784, 10  # divsim's default model


def table(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    benchlib.add_divsim_arguments(ap)
    ap.set_defaults(repeats=1)
    ap.add_argument("--worlds", default=",".join(str(2**k) for k in range(9)))
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--steps", type=int, default=500)
    a = ap.parse_args(argv)
    worlds = [int(w) for w in a.worlds.split(",")]
    procs = benchlib.processes(worlds, a.procs)
    with tempfile.TemporaryDirectory(prefix="bench-virtual-") as tmp:
        runs = benchlib.repeated(a.repeats, worlds, lambda w: benchlib.run_divsim(
            a, procs[w], [f"--train.steps={a.steps}", f"--dist.world_size={w}"], os.path.join(tmp, f"w{w}.h5"), rss=True))
    best = {w: benchlib.fastest(runs[w]) for w in worlds}
    base = next((w for w in worlds if w == a.procs), None)
    rows = ["| W | processes | replicas per process | steps/s | wall s | peak RSS per process, MB (max) | "
            f"RSS growth per added replica vs W={base}, MB |", "|---|---|---|---|---|---|---|"]
    for w in worlds:
        rss = max(best[w]["rss_mb"])
        local = w // procs[w]
        growth = (f"{(rss - max(best[base]['rss_mb'])) / (local - 1):.2f}" if base and w > base else "")
        rows.append(f"| {w} | {procs[w]} | {local} | {best[w]['rate']:.1f} | {best[w]['wall']:.1f} | {rss:.0f} | {growth} |")
    widths = [IN_FEATURES, *HIDDEN, CLASSES]
    params = sum(i * o + o for i, o in zip(widths[:-1], widths[1:]))
    total = sum(best[w]["wall"] for w in worlds)
    rows += ["", f"Settings: {a.steps} steps per run, best of {a.repeats}; the sweep took {total:.0f} s ({total / 60:.1f} min) "
                 f"of wall time in total; one replica's parameters + gradient + momentum: 3 x 4 B x {params} = "
                 f"{12 * params / 2**20:.2f} MB; {benchlib.machine()}."]
    return "\n".join(rows)


if __name__ == "__main__":
    benchlib.cli(table, SECTION, QUICK)
