"""Helpers shared by the MPI integration tests: run the real binary under mpiexec, read its HDF5."""
import argparse
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np


def parse_args(commands):
    p = argparse.ArgumentParser()
    p.add_argument("command", choices=commands)
    p.add_argument("--divsim", required=True)
    p.add_argument("--mpiexec", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--procs", type=int, help="MPI processes for the --ranks logical ranks (dist.world_size); "
                                             "default: one process per rank")
    p.add_argument("--bn-dropout", action="store_true")
    p.add_argument("--preload", help="a shared library for LD_PRELOAD (mpi.step_allocations)")
    args = p.parse_args()
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    return args


def run(args, extra, ranks=None, check=True, timeout=600, mpiexec_options=()):
    """Runs divsim under mpiexec; returns the CompletedProcess (stdout/stderr as text). `ranks`, when
    given, is the process count and overrides the command line's --ranks and --procs (extra may then
    set dist.world_size itself)."""
    if ranks is not None:
        n, world = ranks, []
    elif args.procs:
        n, world = args.procs, [f"--dist.world_size={args.ranks}"]
    else:
        n, world = args.ranks, []
    cmd = [args.mpiexec, "-n", str(n), *mpiexec_options, args.divsim, "--quiet", *world, *extra]
    proc = subprocess.run(cmd, cwd=args.workdir, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        sys.exit(f"FAILED: {' '.join(cmd)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def datasets(path):
    """{name: numpy array} of every dataset in the file."""
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda n, o: out.__setitem__(n, o[()]) if isinstance(o, h5py.Dataset) else None)
    return out


def expect(cond, what):
    if not cond:
        sys.exit(f"NOT OK: {what}")
    print(f"OK: {what}")


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.tobytes() == b.tobytes()
