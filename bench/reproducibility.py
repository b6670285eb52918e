#!/usr/bin/python3
"""Measures what docs/reproducibility.md promises and rewrites its table in place.

For each reduction mode and world size pair it runs the same configuration (fixed global batch) and
reports max |global loss difference| over the first 1, 100 and 1000 steps against W=1, whether the
parameters are bitwise equal, and the step rate of deterministic against mpi. Not a test: a benchmark
whose figures are machine-dependent; the bitwise columns are also asserted by CTest.

usage: bench/reproducibility.py [--divsim build/divsim] [--steps 1000] [--write docs/reproducibility.md]
"""
import argparse
import os
import re
import subprocess
import tempfile
import time

import h5py
import numpy as np


def run(divsim, ranks, out, extra):
    cmd = ["mpiexec", "-n", str(ranks), divsim, "--quiet", "--run.overwrite=true", f"--run.out={out}", *extra]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stderr}")
    with h5py.File(out, "r") as f:
        return {"loss": f["train/global_loss"][()], "hash": f["train/param_hash"][:, 0],
                "eval": f["eval/loss"][-1, 0], "wall": time.time() - t0,
                "rate": float(re.search(r"([0-9.]+) steps/s", p.stdout).group(1))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--divsim", default="build/divsim")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--worlds", default="1,2,4,8")
    ap.add_argument("--write", default="")
    a = ap.parse_args()
    worlds = [int(w) for w in a.worlds.split(",")]
    base = [f"--train.steps={a.steps}", "--batch.global=240", "--sampler.mode=global_batch",
            "--model.dropout=0.1", "--record.layers_every=0"]
    tmp = tempfile.mkdtemp(prefix="divsim-repro-")
    rows, rates = [], {}
    for mode in ["mpi", "ring", "deterministic"]:
        ref = None
        for w in worlds:
            r = run(a.divsim, w, os.path.join(tmp, f"{mode}{w}.h5"), base + [f"--dist.reduce={mode}"])
            rates[(mode, w)] = r["rate"]
            if ref is None:
                ref = r
                continue
            d = np.abs(r["loss"] - ref["loss"])
            cols = [f"{d[:n].max():.1e}" if d[:n].max() > 0 else "0" for n in (1, min(100, a.steps), a.steps)]
            same = "yes" if (r["hash"] == ref["hash"]).all() else f"no (from step {int(np.argmax(r['hash'] != ref['hash']))})"
            rows.append(f"| {mode} | 1 vs {w} | {' | '.join(cols)} | {same} | {abs(r['eval'] - ref['eval']):.1e} |")
    table = ["| dist.reduce | W | max abs diff, step 0 | first 100 steps | first %d steps | parameters bitwise equal | final eval loss diff |" % a.steps,
             "|---|---|---|---|---|---|---|", *rows, "",
             "| W | mpi steps/s | deterministic steps/s | deterministic / mpi step time |", "|---|---|---|---|"]
    for w in worlds:
        table.append(f"| {w} | {rates[('mpi', w)]:.1f} | {rates[('deterministic', w)]:.1f} | "
                     f"{rates[('mpi', w)] / rates[('deterministic', w)]:.2f} |")
    text = "\n".join(table)
    print(text)
    if a.write:
        with open(a.write) as fh:
            doc = fh.read()
        doc = re.sub(r"(<!-- measured:begin -->\n).*?(\n<!-- measured:end -->)", lambda m: m.group(1) + text + m.group(2),
                     doc, flags=re.S)
        with open(a.write, "w") as fh:
            fh.write(doc)


if __name__ == "__main__":
    main()
