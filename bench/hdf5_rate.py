#!/usr/bin/python3
"""HDF5 write rate of divsim's trajectory writer against a plain sequential write of the same bytes.

Runs bench/h5_write_rate.cpp (divsim_h5_rate: the real TrajectoryWriter, parallel HDF5 with collective
MPI-IO, fed synthetic rows, no training) for a few recording cases, and compares its rate (payload
bytes / time from creating the file to the final rename) with one process write()-ing the same bytes
sequentially, one write per flush, with and without an fsync after each (H5Fflush on the MPI-IO driver
syncs the file). Cases name W logical ranks on P processes, steps, samples per rank and step
(/train/samples; 0 = off), layers, layer-statistics interval (0 = off) and flush interval. Files go to
--dir (default: a temporary folder in /tmp): the filesystem is part of the figure. Every case is run
--repeats times, interleaved; the fastest counts.

usage: bench/hdf5_rate.py [--quick] [--write docs/performance.md] [--cases W:P:steps:samples:layers:every:flush,...]
       [--repeats 3] [--dir DIR] [--divsim build/divsim]
"""
import argparse
import shutil
import subprocess
import tempfile

import benchlib

SECTION = "hdf5_rate"
# Default recording (layer statistics every 10 steps, flush every 100) of W=4 on 1 and on 2 processes
# (the collectives between processes are part of the cost); everything every step with /train/samples;
# the same at W=64.
CASES = "4:1:10000:0:5:10:100,4:2:10000:0:5:10:100,4:2:10000:64:5:1:100,64:2:2000:4:5:1:100"
QUICK = ["--cases", "4:1:1000:0:5:10:100,4:2:1000:0:5:10:100", "--repeats", "1"]
FIELDS = ("W", "P", "steps", "samples", "layers", "every", "flush")


def parse_cases(text):
    cases = []
    for item in text.split(","):
        parts = item.split(":")
        if len(parts) != len(FIELDS) or not all(p.isdigit() for p in parts):
            raise benchlib.BenchError(f"--cases: '{item}' is not {':'.join(FIELDS)} (non-negative integers)")
        cases.append(dict(zip(FIELDS, map(int, parts))))
    return cases


def measure(a, exe, case):
    cmd = [a.mpiexec, "-n", str(case["P"]), exe, a.dir, *(str(case[f]) for f in FIELDS if f != "P")]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise benchlib.BenchError(f"{' '.join(cmd)} failed (exit {p.returncode}): {p.stderr.strip()}")
    lines = {line.split()[0]: line.split()[1:] for line in p.stdout.splitlines()}
    payload, file_bytes, h5_s = int(lines["hdf5"][0]), int(lines["hdf5"][1]), float(lines["hdf5"][2])
    return {"payload": payload, "file": file_bytes, "hdf5": payload / h5_s,
            "plain": payload / float(lines["plain"][1]), "plain_fsync": payload / float(lines["plain_fsync"][1])}


def table(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    benchlib.add_divsim_arguments(ap)
    ap.add_argument("--cases", default=CASES, help=":".join(FIELDS) + ",...")
    ap.add_argument("--dir", default="", help="folder to write in (default: a temporary one in /tmp)")
    a = ap.parse_args(argv)
    exe = benchlib.helper(a.divsim, "divsim_h5_rate")
    cases = parse_cases(a.cases)
    own_dir = not a.dir
    a.dir = a.dir or tempfile.mkdtemp(prefix="bench-hdf5-")
    try:
        runs = benchlib.repeated(a.repeats, range(len(cases)), lambda i: measure(a, exe, cases[i]))
    finally:
        if own_dir:
            shutil.rmtree(a.dir)
    mb = 2.0**20
    rows = ["| W | P | steps | samples/rank/step | layers | layer stats every | flush every | payload MB | file MB | "
            "HDF5 MB/s | plain write MB/s | plain + fsync per flush MB/s | HDF5 / plain | HDF5 / plain + fsync |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for i, c in enumerate(cases):
        best = {k: max(r[k] for r in runs[i]) for k in ("hdf5", "plain", "plain_fsync")}
        r = runs[i][0]
        rows.append(f"| {c['W']} | {c['P']} | {c['steps']} | {c['samples'] or '-'} | {c['layers']} | {c['every'] or '-'} | {c['flush']} | "
                    f"{r['payload'] / mb:.2f} | {r['file'] / mb:.2f} | {best['hdf5'] / mb:.3g} | {best['plain'] / mb:.3g} | "
                    f"{best['plain_fsync'] / mb:.3g} | {best['hdf5'] / best['plain']:.2g} | {best['hdf5'] / best['plain_fsync']:.2g} |")
    rows += ["", f"Settings: best of {a.repeats}, written to {'/tmp' if own_dir else a.dir}; "
                 f"{benchlib.machine()}."]
    return "\n".join(rows)


if __name__ == "__main__":
    benchlib.cli(table, SECTION, QUICK)
