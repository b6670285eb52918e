"""A node whose /dev/shm is small (containers often mount 64 MB): `dist.reduce=deterministic` must not put
its gradients in a shared-memory window that the tmpfs cannot back (a write to a page it cannot back
is SIGBUS, which is what a 48 MB /dev/shm gave this job before the check), and falls back to messages
with the same bits. A job whose window fits still uses it, with the same bits as messages.

It runs itself in a private mount namespace (unshare -m, needs root) with a 48 MB tmpfs on /dev/shm, so
the machine's own /dev/shm is untouched; it exits 77 (skipped) where that is not allowed.

    small_shm.py --divsim BUILD/divsim --mpiexec mpiexec --workdir DIR
"""
import argparse
import os
import shutil
import subprocess
import sys

import h5py

SKIP = 77
JOB = ["--quiet", "--data.train_size=4096", "--data.test_size=500", "--train.steps=6", "--dist.world_size=8",
       "--dist.reduce=deterministic"]
# 1.86 M parameters: 4 ranks' gradients are 30 MB per process, 60 MB for both: more than /dev/shm holds.
LARGE = ["--model.hidden=1024,1024"]
SMALL = []  # the default model: 3.8 MB per process


def param_hash(path):
    with h5py.File(path, "r") as f:
        return f["train/param_hash"][()]


def inside(args):
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", "/dev/shm"], check=True)
    ok = True
    for name, model in [("large", LARGE), ("small", SMALL)]:
        hashes = {}
        for shared in ["true", "false"]:
            out = os.path.join(args.workdir, f"{name}_{shared}.h5")
            p = subprocess.run([args.mpiexec, "-n", "2", args.divsim, *JOB, *model, f"--dist.shared_memory={shared}",
                                f"--run.out={out}"], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                               timeout=240)
            good = p.returncode == 0
            print(f"{'OK' if good else 'NOT OK'}: {name} model, dist.shared_memory={shared}: exit {p.returncode}")
            if not good:
                print(p.stderr[-2000:])
                ok = False
                break
            hashes[shared] = param_hash(out)
        if len(hashes) == 2:
            same = (hashes["true"] == hashes["false"]).all()
            print(f"{'OK' if same else 'NOT OK'}: {name} model: shared memory and messages give the same bits")
            ok = ok and same
    return 0 if ok else 1


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--divsim", required=True)
    p.add_argument("--mpiexec", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.inside:
        sys.exit(inside(args))
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    # What the test does, in a namespace that is thrown away at once.
    try:
        probe = subprocess.run(["unshare", "-m", "mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", "/dev/shm"],
                               capture_output=True, text=True)
        why = probe.stderr.strip() if probe.returncode != 0 else ""
    except FileNotFoundError as e:
        why = str(e)
    if why:
        print(f"skipped: cannot mount a private /dev/shm here ({why})")
        sys.exit(SKIP)
    rc = subprocess.run(["unshare", "-m", sys.executable, os.path.abspath(__file__), "--inside",
                         "--divsim", args.divsim, "--mpiexec", args.mpiexec, "--workdir", args.workdir]).returncode
    sys.exit(rc)


if __name__ == "__main__":
    main()
