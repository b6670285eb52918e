#!/usr/bin/python3
"""Runs every bench/ script and prints (or, with --write DOC, rewrites in DOC) each one's table, plus a
section describing the build and machine they were measured on.

Full settings take about 8 minutes on 2 cores (the virtual-rank sweep is a third of it); --quick
passes every script its reduced settings (a few minutes in all: for checking that the scripts work,
not for figures). Run it on an otherwise idle machine: every figure is a rate.

usage: bench/run_all.py [--quick] [--only vs_ddp,gemm,...] [--write docs/performance.md]
       [--divsim build/divsim] [--mpiexec PATH]
"""
import argparse
import datetime
import os
import subprocess
import sys

import benchlib
import gemm
import hdf5_rate
import recording
import reduction
import virtual_ranks
import vs_ddp

SCRIPTS = {m.SECTION: m for m in (vs_ddp, gemm, recording, reduction, virtual_ranks, hdf5_rate)}


def cache_value(build, key):
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            return next((line.split("=", 1)[1].strip() for line in f if line.startswith(key + ":")), "unknown")
    except OSError:
        return "unknown"


def build_section(divsim, quick):
    """Which binary, built how, on which machine, when, and which BLAS torch gets."""
    build = os.path.dirname(os.path.abspath(divsim))
    sha = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=benchlib.REPO, capture_output=True, text=True).stdout.strip()
    blas = subprocess.run(["update-alternatives", "--query", "libblas.so.3-x86_64-linux-gnu"], capture_output=True, text=True).stdout
    blas = next((line.split(":", 1)[1].strip() for line in blas.splitlines() if line.startswith("Value:")), "unknown")
    return "\n".join([
        f"- measured {datetime.date.today().isoformat()} at git {sha or 'unknown'}"
        + (" with **--quick** settings (checks that the scripts run; not figures to quote)" if quick else ""),
        f"- build {build}: CMAKE_BUILD_TYPE={cache_value(build, 'CMAKE_BUILD_TYPE')}, "
        f"DIVSIM_NATIVE={cache_value(build, 'DIVSIM_NATIVE')}, compiler {cache_value(build, 'CMAKE_CXX_COMPILER')}",
        f"- machine: {benchlib.machine()}",
        f"- libblas.so.3 (torch's BLAS) -> {blas}",
    ])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default=",".join(SCRIPTS), help="sections to run: " + ",".join(SCRIPTS))
    ap.add_argument("--write", default="")
    ap.add_argument("--divsim", default=os.path.join(benchlib.REPO, "build", "divsim"))
    ap.add_argument("--mpiexec", default="")
    a = ap.parse_args()
    common = ["--divsim", a.divsim] + (["--mpiexec", a.mpiexec] if a.mpiexec else [])
    benchlib.pin_openblas_core()  # before anything is measured, as every script's own command line does
    try:
        sections = {"build": build_section(benchlib.check_divsim(a.divsim), a.quick)}
        print(sections["build"], flush=True)
        for name in a.only.split(","):
            if name not in SCRIPTS:
                raise benchlib.BenchError(f"--only: no section '{name}' (known: {', '.join(SCRIPTS)})")
            module = SCRIPTS[name]
            sections[name] = module.table((module.QUICK if a.quick else []) + common)
            print(f"\n## {name}\n\n{sections[name]}", flush=True)
        if a.write:
            for name, text in sections.items():
                benchlib.write_section(a.write, name, text)
    except benchlib.BenchError as e:
        sys.exit(f"run_all.py: {e}")


if __name__ == "__main__":
    main()
