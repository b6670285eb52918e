#!/usr/bin/python3
"""Seed claims (issue 5, part 3): the concrete, testable statements of the field reports in
../shared/seeds/ (cited as seed NNN §section), each as a reproducible divsim experiment with its
measured outcome and a verdict on whether divsim shows what the report says.

    validation/seed_claims.py [--claim ID ...] [--json OUT]

Each claim is a list of checks; the required ones are the mechanism divsim models, the optional ones a
quantitative shape the report saw in its own model. Verdict: holds / partly (an optional check fails) /
does not hold (a required one fails: exit status 1). Deliberately not here: claims about tools divsim
does not model (NCCL logs, torchrun, CUDA_VISIBLE_DEVICES, DataLoader workers) and claims that are
advice rather than observations.
"""
import argparse
import json
import os
import sys

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from validation.common import Divsim, ValidationError, read_run, rel_diff

# A short Fashion-MNIST scenario (the fault scenarios' settings, narrower and shorter).
BASE = ["--run.seed=1", "--optim.lr=0.05", "--schedule.warmup_steps=20", "--batch.global=256",
        "--record.layers_every=0"]


def run(d, name, args, world, steps, hidden="128,64"):
    """A divsim run at `world` logical ranks on up to 2 MPI processes -> its datasets."""
    path = d.run(f"seed-{name}", [*BASE, f"--model.hidden={hidden}", *args, f"--train.steps={steps}",
                                  f"--dist.world_size={world}"], ranks=min(world, 2))
    return read_run(path)[0]


def in_sync(data):
    """Per step: all ranks' parameter hashes equal."""
    h = data["train/param_hash"]
    return (h == h[:, :1]).all(axis=1)


def first(mask):
    hits = np.nonzero(mask)[0]
    return int(hits[0]) if len(hits) else None


def claim_001_world_size(d):
    """seed 001 §2-§5: with the global batch fixed, W=2/4/8 compute the same mathematics and differ
    only in the last bits (summation order), and not at all with a deterministic reduction; with the
    per-rank batch fixed the global batch grows with W and the runs genuinely differ."""
    steps, worlds = 60, (2, 4, 8)
    fixed = {w: run(d, f"001-global-w{w}", [], w, steps) for w in worlds}
    det = {w: run(d, f"001-det-w{w}", ["--dist.reduce=deterministic"], w, steps) for w in worlds}
    per_rank = {w: run(d, f"001-perrank-w{w}", ["--batch.per_rank=64"], w, steps) for w in worlds}

    def gap(runs, step):
        ref = runs[2]["train/global_loss"][step]
        return max(float(rel_diff(runs[w]["train/global_loss"][step], ref)) for w in worlds[1:])

    det_equal = all((det[w]["train/param_hash"][:, 0] == det[2]["train/param_hash"][:, 0]).all()
                    and (det[w]["train/global_loss"] == det[2]["train/global_loss"]).all() for w in worlds)
    measured = {
        "global fixed, mpi reduce: loss gap at step 0 / 1 / last": [gap(fixed, 0), gap(fixed, 1), gap(fixed, steps - 1)],
        "global fixed, deterministic reduce: bitwise equal at W=2,4,8": bool(det_equal),
        "per-rank fixed (64): loss gap at step 0 / 1 / last": [gap(per_rank, 0), gap(per_rank, 1), gap(per_rank, steps - 1)],
    }
    return measured, [("global batch fixed: W=2/4/8 equal up to rounding at step 0 (< 1e-6)", gap(fixed, 0) < 1e-6, True),
                      ("deterministic reduction: W=2/4/8 bitwise equal", det_equal, True),
                      ("per-rank batch fixed: W=2/4/8 differ (> 1e-3 at step 1)", gap(per_rank, 1) > 1e-3, True)]


def claim_001_seed_derivation(d):
    """seed 001 §3 (third layer): seeds derived from the rank shift the random streams when the world
    size changes; divsim keys dropout by (step, sample, layer), so with dropout on and a deterministic
    reduction W=2/4/8 stay bitwise identical, while seed = base + rank makes them differ."""
    steps, worlds = 30, (2, 4, 8)
    args = ["--model.dropout=0.2", "--dist.reduce=deterministic"]
    keyed = {w: run(d, f"001-dropout-w{w}", args, w, steps) for w in worlds}
    ranked = {w: run(d, f"001-dropout-rank-w{w}", [*args, "--fault", "unsynced_seed:stream=dropout,ranks=all"], w, steps)
              for w in worlds}
    same = all((keyed[w]["train/param_hash"][:, 0] == keyed[2]["train/param_hash"][:, 0]).all() for w in worlds)
    differ = [first(ranked[w]["train/param_hash"][:, 0] != ranked[2]["train/param_hash"][:, 0]) for w in worlds[1:]]
    measured = {"dropout keyed by sample: bitwise equal at W=2,4,8": bool(same),
                "seed = base + rank: first step W=4 / W=8 differ from W=2": differ}
    return measured, [("dropout keyed by sample: W=2/4/8 bitwise equal", same, True),
                      ("seed = base + rank: W=4/8 differ from W=2 from step 0", all(s == 0 for s in differ), True)]


def claim_000_bn_drift(d):
    """seed 000 §1.1 (second kind) and §4.3: BatchNorm without SyncBN or buffer broadcast: parameters
    stay in sync and training is unchanged, but each rank's running statistics come from its own shard,
    so the ranks' eval results (each with its own replica) part; broadcasting buffers keeps them equal."""
    steps = 200
    args = ["--model.batchnorm=true", "--train.eval_every=20"]
    base = run(d, "000-bn-base", args, 4, steps)
    drift = run(d, "000-bn-drift", [*args, "--fault", "bn_drift:ranks=all"], 4, steps)
    spread = np.ptp(drift["eval/loss"], axis=1)
    measured = {
        "parameters in sync at every step": bool(in_sync(drift).all()),
        "training loss identical to the broadcast run": bool((drift["train/loss"] == base["train/loss"]).all()),
        "eval loss spread over ranks, every 20 steps": [float(v) for v in spread],
        "eval accuracy spread at the end": float(np.ptp(drift["eval/accuracy"][-1])),
        "eval loss spread with buffer broadcast": float(np.ptp(base["eval/loss"], axis=1).max()),
    }
    return measured, [("parameters stay in sync", measured["parameters in sync at every step"], True),
                      ("training unchanged (BN uses batch statistics)", measured["training loss identical to the broadcast run"], True),
                      ("ranks' eval results differ", bool(spread.min() > 0), True),
                      ("buffer broadcast keeps them equal", measured["eval loss spread with buffer broadcast"] == 0, True),
                      ("equal for a while, then parting: the spread grows (last eval > first)", bool(spread[-1] > spread[0]), False)]


def claim_000_sampler_seed(d):
    """seed 000 §1.1 (first kind) and §4.1: per-rank sampler seeds: every rank shuffles the whole data
    set on its own, so the ranks' samples overlap instead of complementing each other, and the loss
    differs from the correct run from the very first step."""
    steps = 100
    base = run(d, "000-sampler-base", ["--record.samples=true"], 4, steps)
    bad = run(d, "000-sampler-seed", ["--record.samples=true", "--fault", "unsynced_seed:stream=sampler,ranks=all"], 4, steps)

    def distinct(data):
        s = data["train/samples"].reshape(-1)
        return float(len(np.unique(s)) / len(s))

    step0 = bad["train/samples"][0]
    overlap = len(step0.reshape(-1)) - len(np.unique(step0))
    measured = {"first step the loss differs from the correct run": first((bad["train/loss"] != base["train/loss"]).any(axis=1)),
                "distinct / consumed samples, correct run": distinct(base),
                "distinct / consumed samples, per-rank seeds": distinct(bad),
                "samples of step 0 read by two ranks": int(overlap)}
    return measured, [("loss differs from step 0", measured["first step the loss differs from the correct run"] == 0, True),
                      ("correct shards are disjoint", distinct(base) == 1.0, True),
                      ("per-rank seeds make the ranks' samples overlap", distinct(bad) < 1.0, True)]


def claim_000_bucket_order(d):
    """seed 000 §4.2: a different DDP bucket size changes the summation order of the allreduce: the
    results differ in the last bits, and the difference grows over hundreds of steps into a visible
    divergence of the loss curves. (The 256,128 MLP: 25 MiB buckets hold it in one bucket, 0.1 MiB ones
    put fc1 in a bucket of its own; the 128,64 one would fit a single bucket either way.)"""
    steps = 300
    a = run(d, "000-ring-25", ["--dist.reduce=ring", "--dist.bucket_cap_mb=25"], 4, steps, hidden="256,128")
    b = run(d, "000-ring-0.1", ["--dist.reduce=ring", "--dist.bucket_cap_mb=0.1"], 4, steps, hidden="256,128")
    gap = rel_diff(a["train/global_loss"], b["train/global_loss"])
    windows = {f"steps {lo}-{hi - 1}": float(gap[lo:hi].max()) for lo, hi in ((0, 10), (10, 100), (100, 200), (200, 300))}
    measured = {"first step the parameters differ": first(a["train/param_hash"][:, 0] != b["train/param_hash"][:, 0]),
                "max relative loss gap": windows}
    split = measured["first step the parameters differ"]
    return measured, [("the bits differ from the first steps (step <= 1)", split is not None and split <= 1, True),
                      ("only in the last bits at first (< 1e-5 over steps 0-9)", windows["steps 0-9"] < 1e-5, True),
                      ("the gap grows 100-fold by steps 200-299", windows["steps 200-299"] > 100 * max(windows["steps 0-9"], 1e-9), True)]


def claim_000_rerun(d):
    """seed 000 §1.1 (fourth kind) and §2.2: a rerun differs only when something is seeded
    non-deterministically; a correct run is bitwise reproducible, a clock-seeded dropout stream is not."""
    steps = 30
    runs = [run(d, f"000-rerun-{i}", ["--model.dropout=0.1"], 2, steps) for i in range(2)]
    clock = [run(d, f"000-rerun-clock-{i}", ["--model.dropout=0.1", "--fault", "unsynced_seed:stream=dropout,mode=clock,ranks=all"],
                 2, steps) for i in range(2)]
    same = all((runs[0][k] == runs[1][k]).all() for k in ("train/loss", "train/param_hash", "train/grad_norm"))
    measured = {"two runs of one configuration bitwise equal": bool(same),
                "first step two clock-seeded runs differ": first((clock[0]["train/loss"] != clock[1]["train/loss"]).any(axis=1))}
    return measured, [("a rerun is bitwise equal", same, True),
                      ("clock-seeded dropout makes reruns differ from step 0", measured["first step two clock-seeded runs differ"] == 0, True)]


def claim_002_skipped_rank(d):
    """seed 002 §2.3/§3.4: a rank dropped from the allreduce (timeout, retry, marked unavailable) keeps
    updating alone: the replicas split at that step and stay apart, and that rank's loss jumps about
    (the saw-tooth) instead of following the others'."""
    steps, start = 150, 50
    data = run(d, "002-skip", ["--fault", f"skip_rank:mode=own_grad,ranks=3,start={start}"], 4, steps)
    loss = data["train/loss"]
    jumps = np.abs(np.diff(loss[start:], axis=0)).mean(axis=0)
    jumps_before = np.abs(np.diff(loss[:start], axis=0)).mean(axis=0)
    measured = {"first step the replicas differ": first(~in_sync(data)),
                "mean |loss step-to-step change| after the skip, ranks 0-2 / rank 3": [float(jumps[:3].mean()), float(jumps[3])],
                "same, before the skip": [float(jumps_before[:3].mean()), float(jumps_before[3])],
                "rank 3's mean loss minus the others' after the skip": float(loss[start:, 3].mean() - loss[start:, :3].mean())}
    excess_after = jumps[3] / jumps[:3].mean()
    excess_before = jumps_before[3] / jumps_before[:3].mean()
    return measured, [("replicas split exactly at the skipped step", measured["first step the replicas differ"] == start, True),
                      ("... and stay apart", bool((~in_sync(data))[start:].all()), True),
                      ("the skipped rank's loss saw-tooths: its step-to-step change, relative to the others', "
                       "grows by half after the skip", bool(excess_after > 1.5 * excess_before), False)]


def claim_002_asl_margin(d):
    """seed 002 §3.5: two ranks run ASL with margin 0.05, the others 0.1: the allreduce is normal and the
    replicas stay in sync, but the ranks' gradient norms differ systematically."""
    steps = 60
    args = ["--loss.type=asl", "--loss.margin=0.1"]
    base = run(d, "002-asl", args, 4, steps)
    skew = run(d, "002-asl-skew", [*args, "--fault", "loss_skew:param=asl_margin,value=0.05,ranks=0-1"], 4, steps)

    def ratio(data):
        g = data["train/grad_norm_local"]
        return float((g[:, :2].mean(axis=1) / g[:, 2:].mean(axis=1)).mean())

    measured = {"parameters in sync at every step": bool(in_sync(skew).all()),
                "grad norm ratio ranks 0-1 / 2-3, same margin": ratio(base),
                "grad norm ratio ranks 0-1 / 2-3, margins 0.05 vs 0.1": ratio(skew)}
    return measured, [("replicas stay in sync", measured["parameters in sync at every step"], True),
                      ("grad norms differ systematically (ratio 5x farther from 1 than with one margin)",
                       abs(ratio(skew) - 1) > 5 * abs(ratio(base) - 1), True)]


CLAIMS = {
    "001_world_size": claim_001_world_size,
    "001_seed_derivation": claim_001_seed_derivation,
    "000_bn_drift": claim_000_bn_drift,
    "000_sampler_seed": claim_000_sampler_seed,
    "000_bucket_order": claim_000_bucket_order,
    "000_rerun": claim_000_rerun,
    "002_skipped_rank": claim_002_skipped_rank,
    "002_asl_margin": claim_002_asl_margin,
}


def check(d, names):
    """{name: {"claim", "measured", "checks": [[statement, ok, required]], "verdict"}}. A claim holds when
    all its checks do, partly when only optional ones (a quantitative shape the report describes for
    its own model) fail, and does not hold when a required one (the mechanism) fails."""
    out = {}
    for name in names:
        fn = CLAIMS[name]
        measured, checks = fn(d)
        required_ok = all(ok for _, ok, req in checks if req)
        verdict = "holds" if all(ok for _, ok, _ in checks) else "partly" if required_ok else "does not hold"
        out[name] = {"claim": " ".join(fn.__doc__.split()), "measured": measured,
                     "checks": [[t, bool(ok), req] for t, ok, req in checks], "verdict": verdict}
    return out


def fmt(v):
    if isinstance(v, float):
        return f"{v:.3g}"
    if isinstance(v, list):
        return "[" + ", ".join(fmt(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {fmt(x)}" for k, x in v.items()) + "}"
    return str(v)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--claim", action="append", choices=sorted(CLAIMS))
    p.add_argument("--divsim")
    p.add_argument("--mpiexec")
    p.add_argument("--workdir")
    p.add_argument("--json")
    a = p.parse_args(argv)
    try:
        results = check(Divsim(a.divsim, a.mpiexec, a.workdir), a.claim or list(CLAIMS))
    except ValidationError as e:
        print(f"seed_claims: {e}", file=sys.stderr)
        return 2
    for name, r in results.items():
        print(f"== {name}: {r['claim']}")
        for k, v in r["measured"].items():
            print(f"   {k}: {fmt(v)}")
        for text, ok, required in r["checks"]:
            note = "" if required else " (a shape seen in the report's own model; not required)"
            print(f"   [{'yes' if ok else 'no '}] {text}{note}")
        print(f"-> {r['verdict']}" + (" NOT OK" if r["verdict"] == "does not hold" else ""))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 1 if any(r["verdict"] == "does not hold" for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
