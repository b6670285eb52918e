"""Kill safety (issue 9, item 5): kill -9 the whole job (every rank, the proxy and mpiexec, ranks first,
as a scheduler does) at random moments, many times, and prove that every step up to the last flush
survives.

Each trial runs a job that flushes often (so that many kills land inside an HDF5 flush) and records
everything (per-layer statistics, samples, evaluations, fault events, initial parameters). After the
kill:
  * the .partial is opened with h5py; whether it opens is counted (HDF5 alone does not guarantee it);
  * divsim-recover (or `divsim recover`, every other trial) rebuilds the trajectory from the journal
    (replacing the .partial); the recovered file must open, every step-axis dataset must hold the same
    steps 0..n-1 with n a multiple of record.flush_every, and n must be at least what the .partial held
    whenever the .partial opened;
  * every value must equal, bit for bit, an uninterrupted reference run of the same configuration
    (run afterwards, as long as the longest trial): steps, losses, hashes, layer statistics, samples,
    evaluations, events, /faults, /init, and the root attributes.
A trial killed before the run had created its file has nothing to recover; that is counted, not failed.

    kill_job.py --divsim BUILD/divsim --recover BUILD/divsim-recover --mpiexec mpiexec --workdir DIR
                [--trials 16] [--ranks 2] [--seed S]
"""
import argparse
import os
import random
import shutil
import subprocess
import sys
import time

import h5py
import numpy as np

from reliability_lib import Job, kill_tree

# A constant schedule: a row does not depend on train.steps, so a shorter reference run reproduces it.
# Four logical ranks on two processes: recovery must also reassemble the processes' rank slices.
RUN = ["--quiet", "--data.source=synthetic", "--data.synthetic_train=2048", "--model.hidden=32,16",
       "--dist.world_size=4", "--batch.global=24", "--schedule.type=constant", "--record.layers_every=2",
       "--record.samples=true", "--train.eval_every=5", "--record.init_params=true",
       "--fault=bitflip:ranks=1,bit=3,every=4,stop=100000000"]


def datasets(f):
    out = {}
    f.visititems(lambda name, obj: out.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
    return out


def consistent_rows(path, flush_every):
    """Opens a trajectory; returns (steps n, datasets, root attributes) if every step-axis dataset holds
    steps 0..n-1 consistently, else raises AssertionError/OSError saying why."""
    with h5py.File(path, "r") as f:
        d, attrs = datasets(f), dict(f.attrs)
    n = len(d["train/step"])
    assert (d["train/step"] == np.arange(n)).all(), "train/step is not 0..n-1"
    for name, v in d.items():
        if name.startswith("train/"):
            assert len(v) == n, f"{name} has {len(v)} rows, train/step {n}"
    assert n % flush_every == 0, f"{n} steps is not a whole number of flushes of {flush_every}"
    for block in ("layers", "eval"):
        steps = d[f"{block}/step"]
        assert (steps < n).all(), f"{block}/step holds steps beyond {n}"
        for name, v in d.items():
            if name.startswith(block + "/") and name != "layers/names":
                assert len(v) == len(steps), f"{name} has {len(v)} rows, {block}/step {len(steps)}"
    return n, d, attrs


def same_prefix(rec, ref, n, name):
    """rec's rows equal ref's rows with step < n, bit for bit."""
    if name.startswith("train/"):
        want = ref[name][:n]
    elif name.split("/")[0] in ("layers", "eval") and name != "layers/names":
        want = ref[name][: int((ref[name.split("/")[0] + "/step"] < n).sum())]
    elif name == "events":
        # A flush also holds the events logged at the start of the next step: compare as a prefix.
        want = ref[name][: len(rec[name])]
        if (ref[name]["step"] < n).sum() > len(rec[name]):
            return False
    elif name == "schedule/lr":
        # Each run's schedule covers its own train.steps (the trials' 1000000, the reference's fewer);
        # the schedule is constant, so the shorter is a prefix of the longer.
        want, rec = ref[name], {name: rec[name][: len(ref[name])]}
    else:
        want = ref[name]
    return rec[name].shape == want.shape and rec[name].tobytes() == want.tobytes()


def trial(args, i, rng, flush_every):
    d = os.path.join(args.workdir, f"trial{i:02d}")
    os.makedirs(d)
    out = os.path.join(d, "run.h5")
    job = Job(args.mpiexec, args.ranks, [args.divsim, *RUN, "--train.steps=1000000",
                                         f"--record.flush_every={flush_every}", f"--run.out={out}"], d)
    if rng.random() < 0.15:  # now and then a kill during set-up, before the file exists
        time.sleep(rng.uniform(0.0, 0.5))
    else:
        deadline = time.monotonic() + 60
        while not os.path.exists(out + ".journal") and job.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, args.max_delay))
    kill_tree(job.pid)
    job.wait(timeout=30)
    if os.path.exists(out):
        sys.exit(f"NOT OK: trial {i}: the final file exists after a kill")

    partial_n = None
    try:
        partial_n, _, _ = consistent_rows(out + ".partial", flush_every)
    except (OSError, RuntimeError, AssertionError, KeyError) as e:  # h5py: RuntimeError for a torn B-tree
        partial_error = str(e).splitlines()[0][:120]
    # Both spellings of the tool, in turn: `divsim recover` and the standalone divsim-recover.
    recover = [args.divsim, "recover"] if i % 2 else [args.recover]
    rec = subprocess.run([*recover, out], capture_output=True, text=True)
    if rec.returncode != 0:
        return {"trial": i, "recovered": None, "partial": partial_n, "why": rec.stderr.strip()}
    n, data, attrs = consistent_rows(out + ".partial", flush_every)
    result = {"trial": i, "recovered": n, "partial": partial_n, "data": data, "attrs": attrs,
              "flush_every": flush_every, "note": rec.stdout.strip(), "out": out}
    if partial_n is None:
        result["partial_error"] = partial_error
    return result


def main():
    p = argparse.ArgumentParser()
    for a in ("--divsim", "--recover", "--mpiexec", "--workdir"):
        p.add_argument(a, required=True)
    p.add_argument("--trials", type=int, default=16)
    p.add_argument("--ranks", type=int, default=2, help="MPI processes (a divisor of 4)")
    p.add_argument("--max-delay", type=float, default=3.0, help="longest wait between file creation and kill")
    p.add_argument("--seed", type=int, default=None)
    args = p.parse_args()
    args.divsim, args.recover = os.path.abspath(args.divsim), os.path.abspath(args.recover)
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)

    results = [trial(args, i, rng, 1 if i % 4 else 3) for i in range(args.trials)]
    done = [r for r in results if r["recovered"] is not None]
    for r in results:
        if r["recovered"] is None:
            print(f"trial {r['trial']:2d}: nothing to recover (killed during set-up): {r['why']}")
    if not done:
        sys.exit("NOT OK: no trial got far enough to recover anything; raise --max-delay")

    longest = max(r["recovered"] for r in done)
    ref_dir = os.path.join(args.workdir, "reference")
    os.makedirs(ref_dir)
    ref_out = os.path.join(ref_dir, "ref.h5")
    ref = subprocess.run([args.mpiexec, "-n", str(args.ranks), args.divsim, *RUN, f"--train.steps={longest + 1}",
                          f"--run.out={ref_out}"], capture_output=True, text=True, timeout=600)
    if ref.returncode != 0:
        sys.exit(f"NOT OK: reference run failed: {ref.stderr}")
    with h5py.File(ref_out, "r") as f:
        ref_data, ref_attrs = datasets(f), dict(f.attrs)

    failures = 0
    for r in done:
        n, data = r["recovered"], r["data"]
        # /init arrays are written one by one before the first step: a kill among them keeps the first few.
        missing_ok = lambda name: n == 0 and name.startswith("init/")
        problems = [name for name in ref_data if (name not in data and not missing_ok(name))
                    or (name in data and not same_prefix(data, ref_data, n, name))]
        problems += [name for name in data if name not in ref_data]
        skip = {"created", "config", "recovered"}
        problems += [f"attr {k}" for k in ref_attrs if k not in skip and str(ref_attrs[k]) != str(r["attrs"].get(k))]
        varying = ("steps =", "flush_every =", "out =")  # what the trials and the reference set differently
        strip = lambda cfg: [line for line in str(cfg).splitlines() if not line.startswith(varying)]
        if strip(ref_attrs["config"]) != strip(r["attrs"]["config"]):
            problems.append("attr config")
        if "recovered" not in r["attrs"]:
            problems.append("attr recovered missing")
        # The tool's last words name the file, say it is unfinished, and how to read it (issue 36).
        want = (f"wrote {r['out']}.partial: the first {n} steps of an unfinished run",
                f"divsim diagnose {r['out']} (which opens {r['out']}.partial)")
        if not all(w in r["note"] for w in want):
            problems.append(f"recover said {r['note']!r}")
        if r["partial"] is not None and r["partial"] > n:
            problems.append(f"the .partial held {r['partial']} steps, the recovery only {n}")
        state = (f".partial opened with {r['partial']} steps" if r["partial"] is not None
                 else f".partial unreadable ({r['partial_error']})")
        verdict = "OK" if not problems else "NOT OK"
        print(f"{verdict}: trial {r['trial']:2d} (flush_every {r['flush_every']}): recovered {n} steps, "
              f"identical to the reference; {state}" if not problems else
              f"{verdict}: trial {r['trial']:2d}: recovered {n} steps; differs: {problems}; {state}")
        failures += bool(problems)
    unreadable = sum(r["partial"] is None for r in done)
    print(f"\n{len(results)} kills: {len(done)} recovered ({min(r['recovered'] for r in done)}..{longest} steps), "
          f"{len(results) - len(done)} during set-up; the raw .partial did not open after {unreadable}; "
          f"{failures} recoveries wrong")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
