"""A full disk at run time (issue 9: exit 3 for I/O at run time; never hang an allocation): the ranks of a
running job get a file-size limit (RLIMIT_FSIZE, with SIGXFSZ ignored, so a write beyond it fails with
EFBIG as on a full disk or an exhausted quota). Two moments:

  * set-up: the limit arrives while the ranks load data, before the trajectory file exists, so the
    very first HDF5 writes fail (a job started on a full quota);
  * training: the limit arrives after a few flushes.

Each time the job must end with exit 3 within 10 s, with an error message that names the file, and no
final output. After the failure in training, divsim-recover must rebuild a readable trajectory from the
journal (the steps flushed before the disk filled).

    io_error.py --divsim BUILD/divsim --recover BUILD/divsim-recover --mpiexec mpiexec --workdir DIR
"""
import argparse
import os
import resource
import shutil
import signal
import subprocess
import sys
import time

import h5py

from reliability_lib import Job, kill_tree, rank_pids

SETUP = ["--quiet", "--data.train_size=4096", "--model.hidden=32", "--batch.global=32", "--train.steps=200"]
TRAINING = ["--quiet", "--data.source=synthetic", "--model.hidden=32,16", "--batch.global=24", "--train.steps=1000000",
            "--record.flush_every=10", "--record.layers_every=1", "--record.samples=true"]


def ignore_sigxfsz():
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # inherited by mpiexec and the ranks


def threads(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0


def limit_ranks(job, nbytes):
    for pid in rank_pids(job.pid):
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (nbytes, nbytes))


def wait_until(predicate, timeout):
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            return False
        time.sleep(0.02)
    return True


def scenario(args, name, argv, when, attempt=0):
    d = os.path.join(args.workdir, f"{name}{attempt}")
    os.makedirs(d)
    out = os.path.join(d, "run.h5")
    job = Job(args.mpiexec, args.ranks, [args.divsim, *argv, f"--run.out={out}"], d, preexec_fn=ignore_sigxfsz)
    try:
        if not wait_until(lambda: len(rank_pids(job.pid)) == args.ranks, 30):
            sys.exit(f"NOT OK: {name}: the ranks did not start")
        if when == "set-up":
            # The limit must come after MPI_Init (which writes shared-memory files) and before the
            # trajectory file exists, while Fashion-MNIST loads. The ranks' second thread (UCX) appears
            # during MPI_Init; the delay after it is tried longer, then shorter, until both hold.
            if not wait_until(lambda: all(threads(p) > 1 for p in rank_pids(job.pid)), 30):
                sys.exit(f"NOT OK: {name}: MPI did not come up")
            time.sleep([0.3, 0.6, 0.15, 1.0, 0.05][attempt])
            limit_ranks(job, 4096)
            if os.path.exists(out + ".partial") or os.path.exists(out):
                kill_tree(job.pid)
                job.wait(timeout=30)
                return retry(args, name, argv, when, attempt, "the file existed before the limit")
        else:
            if not wait_until(lambda: os.path.exists(out + ".partial"), 60):
                sys.exit(f"NOT OK: {name}: no trajectory file appeared")
            time.sleep(0.5)
            sizes = [os.path.getsize(p) for p in (out + ".partial", out + ".journal") if os.path.exists(p)]
            limit_ranks(job, max(sizes) + 65536)
        limited_at = time.monotonic()
        rc, _, err = job.wait(timeout=60)
        took = time.monotonic() - limited_at
    finally:
        kill_tree(job.pid)
    if when == "set-up" and rc != 3 and "MPI_Init" in err:
        return retry(args, name, argv, when, attempt, "the limit came before MPI_Init had finished")
    messages = [line for line in err.splitlines() if line.startswith("divsim: error")]
    ok = rc == 3 and took < 10 and messages and all("run.h5" in m for m in messages) and not os.path.exists(out)
    print(f"{'OK' if ok else 'NOT OK'}: disk full during {when}: exit {rc} after {took:.2f} s, "
          f"{len(messages)} message(s): {messages[0][:160] if messages else err[-400:]}")
    return ok, out


def retry(args, name, argv, when, attempt, why):
    print(f"retry: disk full during {when}: {why}")
    if attempt == 4:
        sys.exit(f"NOT OK: {name}: no attempt hit the set-up window")
    return scenario(args, name, argv, when, attempt + 1)


def main():
    p = argparse.ArgumentParser()
    for a in ("--divsim", "--recover", "--mpiexec", "--workdir"):
        p.add_argument(a, required=True)
    p.add_argument("--ranks", type=int, default=2)
    args = p.parse_args()
    args.divsim, args.recover = os.path.abspath(args.divsim), os.path.abspath(args.recover)
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)

    ok_setup, _ = scenario(args, "setup", SETUP, "set-up")
    ok_train, out = scenario(args, "training", TRAINING, "training")
    rec = subprocess.run([args.recover, out], capture_output=True, text=True)
    ok_rec = rec.returncode == 0
    if ok_rec:
        with h5py.File(out + ".partial", "r") as f:
            steps = len(f["train/step"])
            ok_rec = steps > 0 and steps % 10 == 0 and len(f["train/loss"]) == steps
    said = rec.stdout.strip() or rec.stderr.strip()
    print(f"{'OK' if ok_rec else 'NOT OK'}: divsim-recover after the full disk: {said}")
    sys.exit(0 if ok_setup and ok_train and ok_rec else 1)


if __name__ == "__main__":
    main()
