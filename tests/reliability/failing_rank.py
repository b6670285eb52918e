"""A failing rank brings the whole job down (issue 9, item 3): one rank of a 4-rank job dies the way real
ranks die (SIGKILL from the OOM killer or a scheduler, SIGSEGV from a crash, SIGABRT from an uncaught
exception or a failed assertion, SIGTERM, SIGBUS from a vanished file mapping), at set-up or in the
middle of training. The job must end with a non-zero exit, and every rank process with it, within 10 seconds of the
failure; a rank that crashes in training must say which rank it was and what killed it.

The rank is found in the real process tree (mpiexec -> hydra_pmi_proxy -> divsim) and signalled from
outside: divsim has no test hooks.

    failing_rank.py --divsim BUILD/divsim --mpiexec mpiexec --workdir DIR [--ranks 4] [--limit 10]
"""
import argparse
import os
import random
import shutil
import signal
import sys
import time

from reliability_lib import Job, kill_tree, rank_pids

# A long synthetic run: it is always still training when the failure comes.
TRAIN = ["--quiet", "--data.source=synthetic", "--data.synthetic_train=4096", "--model.hidden=64,64",
         "--train.steps=1000000", "--record.flush_every=5"]
# Loading the full Fashion-MNIST training split takes a while: a failure during set-up.
SETUP = ["--quiet", "--train.steps=1000000", "--record.flush_every=5"]
# A rank that hangs without dying (SIGSTOP: stopped, or stuck in a driver) is invisible to MPI; the others
# wait for it in the next collective, and dist.timeout_s ends the job.
HANG_TIMEOUT = 4
# Signals a rank gets from a crash of its own, which it reports before dying of them.
CRASHES = (signal.SIGSEGV, signal.SIGBUS)


def alive(pid):
    """True while pid exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


def poll_until(predicate, deadline):
    """True as soon as predicate() holds, False once time.monotonic() passes deadline."""
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def wait_for(predicate, timeout, what):
    if not poll_until(predicate, time.monotonic() + timeout):
        sys.exit(f"NOT OK: gave up waiting for {what}")


def trial(args, name, sig, victim, phase, rng):
    d = os.path.join(args.workdir, name)
    os.makedirs(d)
    out = os.path.join(d, "run.h5")
    extra = [f"--dist.timeout_s={HANG_TIMEOUT}"] if sig == signal.SIGSTOP else []
    job = Job(args.mpiexec, args.ranks, [args.divsim, *(SETUP if phase == "setup" else TRAIN), *extra, f"--run.out={out}"], d)
    try:
        wait_for(lambda: len(rank_pids(job.pid)) == args.ranks, 30, f"{args.ranks} rank processes")
        ranks = rank_pids(job.pid)
        if phase == "training":
            wait_for(lambda: os.path.exists(out + ".partial"), 60, "the output file")
            time.sleep(rng.uniform(0.3, 1.5))
        else:
            time.sleep(rng.uniform(0.05, 0.3))
        if phase == "setup" and os.path.exists(out + ".partial"):
            sys.exit("NOT OK: set-up finished before the failure; this trial would not test set-up")
        os.kill(ranks[victim], sig)
        killed_at = time.monotonic()
        rc, _, err = job.wait(timeout=60)
        # mpiexec may return while the ranks it killed are still tearing down their memory (not yet
        # zombies); they count as survivors only if they outlive the limit.
        poll_until(lambda: not any(alive(p) for p in ranks), killed_at + args.limit)
        took = time.monotonic() - killed_at
    finally:
        kill_tree(job.pid)
    survivors = [p for p in ranks if alive(p)]
    for p in survivors:
        os.kill(p, signal.SIGKILL)
    ok = rc not in (None, 0) and took < args.limit and not survivors
    if sig == signal.SIGSTOP:  # ended by the timeout, which must say so
        ok = ok and "dist.timeout_s" in err
    if sig in CRASHES and phase == "training":
        # divsim's own report (src/comm/fatal_signals), not UCX's handler, which could deadlock in it.
        # At set-up the signal may come before main() has installed it.
        ok = ok and f"divsim: error on rank {victim} " in err and signal.Signals(sig).name in err
        ok = ok and "Caught signal" not in err
    print(f"{'OK' if ok else 'NOT OK'}: {signal.Signals(sig).name} to rank {victim} during {phase}: "
          f"job exited {rc}, its ranks gone after {took:.2f} s (limit {args.limit} s); rank processes left: {len(survivors)}")
    if not ok:
        print(err[-2000:])
    return ok, took


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--divsim", required=True)
    p.add_argument("--mpiexec", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--limit", type=float, default=10.0)
    p.add_argument("--seed", type=int, default=None)
    args = p.parse_args()
    args.divsim = os.path.abspath(args.divsim)
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    last = args.ranks - 1
    trials = [(signal.SIGKILL, 1, "training"), (signal.SIGKILL, 0, "training"), (signal.SIGSEGV, last, "training"),
              (signal.SIGABRT, 2 % args.ranks, "training"), (signal.SIGTERM, 1, "training"),
              (signal.SIGBUS, last, "training"), (signal.SIGKILL, last, "setup"), (signal.SIGSEGV, 0, "setup"),
              (signal.SIGSTOP, 1, "training")]
    results = [trial(args, f"t{i}_{signal.Signals(s).name}_r{v}_{ph}", s, v, ph, rng)
               for i, (s, v, ph) in enumerate(trials)]
    worst = max(t for _, t in results)
    print(f"{sum(ok for ok, _ in results)}/{len(results)} trials OK; slowest {worst:.2f} s")
    sys.exit(0 if all(ok for ok, _ in results) else 1)


if __name__ == "__main__":
    main()
