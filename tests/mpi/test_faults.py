"""One test per fault (issue: the fault catalog): run inputs/faults/<name>.ini at W=4 next to the same
scenario without its fault line (the baseline) and assert the fault's signature from the trajectories."""
import fcntl
import glob
import hashlib
import os
import re
import sys

import h5py
import numpy as np

from divsim_testlib import expect, run

STEPS = 120
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Run:
    def __init__(self, path):
        with h5py.File(path, "r") as f:
            self.d = {k: f[k][()] for k in ["train/loss", "train/global_loss", "train/param_hash", "train/grad_norm",
                                             "train/grad_norm_local", "train/param_norm", "train/lr", "train/loss_scale",
                                             "train/samples", "eval/loss", "eval/accuracy", "layers/forward"]}
            self.events = [(int(e["step"]), int(e["rank"]), e["kind"].decode(), e["detail"].decode()) for e in f["events"][()]]

    def __getitem__(self, k):
        return self.d[k]

    def split_steps(self):
        """Steps at which some rank's parameter hash differs from rank 0's."""
        h = self.d["train/param_hash"]
        return np.nonzero((h != h[:, :1]).any(axis=1))[0]


def shared_baseline(args, base_text, options):
    """The baseline trajectory for this binary, rank count, configuration and options, run once and
    shared by every fault test that needs it (most scenarios differ only in their fault line). The
    cache key covers the binary's bytes, so a rebuild reruns it; a lock makes concurrent tests wait for
    the one that runs it instead of running it twice."""
    key = hashlib.sha256()
    with open(args.divsim, "rb") as fh:
        key.update(fh.read())
    key.update(repr((args.ranks, args.procs, base_text, options)).encode())
    cache = os.path.join(os.path.dirname(os.path.abspath(args.workdir)), "fault-baselines")
    os.makedirs(cache, exist_ok=True)
    out = os.path.join(cache, key.hexdigest()[:24] + ".h5")
    with open(out + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(out):
            base_ini = os.path.join(args.workdir, "baseline.ini")
            with open(base_ini, "w") as fh:
                fh.write(base_text)
            run(args, ["--config", base_ini, f"--run.out={out}", *options])
    return out


def scenario(args, name, extra=()):
    """Runs the scenario next to its baseline (the same file without its fault and name lines); returns
    (faulty, baseline)."""
    ini = os.path.join(ROOT, "inputs", "faults", f"{name}.ini")
    with open(ini) as fh:
        text = fh.read()
    common = [*([] if any(e.startswith("--train.steps") for e in extra) else [f"--train.steps={STEPS}"]), *extra]
    run(args, ["--config", ini, "--run.out=fault.h5", *common])
    base = shared_baseline(args, re.sub(r"(?m)^(fault\s*=|name\s*=|#).*$", "", text), common)
    return Run(os.path.join(args.workdir, "fault.h5")), Run(base)


def in_sync(r, ranks=None):
    h = r["train/param_hash"] if ranks is None else r["train/param_hash"][:, ranks]
    return bool((h == h[:, :1]).all())


def rel(a, b):
    return np.abs(a - b) / np.maximum(np.abs(b), 1e-30)


def events_of(r, kind):
    return [e for e in r.events if e[2] == kind]


def check_baseline(b):
    expect(in_sync(b), "baseline: replicas in sync at every step")


def unsynced_seed(args):
    f, b = scenario(args, "unsynced_seed")
    check_baseline(b)
    h = f["train/param_hash"]
    expect(h[0, 3] != h[0, 0] and in_sync(f, [0, 1, 2]), "rank 3's replica differs from step 0, ranks 0-2 agree")
    expect(f["train/loss"][0, 3] != b["train/loss"][0, 3] and f["train/loss"][0, 0] == b["train/loss"][0, 0],
           "step 0: rank 3's loss differs from the baseline, rank 0's is identical")
    expect(len(events_of(f, "unsynced_seed")) == 1, "one /events row (set-up, rank 3)")


def overlapping_shards(args):
    f, b = scenario(args, "overlapping_shards")
    s = f["train/samples"]
    expect((s[:, 1] == s[:, 0]).all(), "rank 1 reads exactly rank 0's samples at every step")
    expect(not (b["train/samples"][:, 1] == b["train/samples"][:, 0]).any(), "baseline shards do not overlap")
    expect(in_sync(f), "replicas stay in sync (the gradient is still averaged)")
    expect(f["train/global_loss"][0] != b["train/global_loss"][0], "global loss leaves the baseline at step 0")
    expect(len(np.unique(s)) < len(np.unique(b["train/samples"])), "fewer distinct samples seen than the baseline")


def tf32_mismatch(args):
    f, b = scenario(args, "tf32_mismatch")
    expect(in_sync(f), "replicas stay in sync (the reduced gradient is shared)")
    r2 = rel(f["train/loss"][0, 2], b["train/loss"][0, 2])
    r0 = rel(f["train/loss"][0, 0], b["train/loss"][0, 0])
    expect(r0 == 0 and 1e-7 < r2 < 1e-5, f"step 0: rank 2's loss differs by {r2:.2e} (faults.md: 1.2e-6), rank 0's not at all")
    m = np.median(rel(f["train/loss"][:20, 2], b["train/loss"][:20, 2]))
    expect(1e-6 < m < 1e-4, f"rank 2's median over steps 0-19: {m:.2e} (faults.md: 2.2e-5)")
    g = rel(f["train/global_loss"][1:], b["train/global_loss"][1:])
    expect(g[0] > 0 and g.max() < 0.05, f"global loss leaves the FP32 baseline at step 1 ({g[0]:.1e}) and stays close (max {g.max():.1e})")


def reduce_dtype_mismatch(args):
    f, b = scenario(args, "reduce_dtype_mismatch")
    expect(in_sync(f), "replicas stay in sync (every rank applies the one reduced gradient)")
    expect((f["layers/forward"][0] == b["layers/forward"][0]).all() and (f["train/loss"][0] == b["train/loss"][0]).all(),
           "step 0: forward statistics and losses identical to the baseline")
    g = rel(f["train/grad_norm_local"][0], b["train/grad_norm_local"][0])
    expect(g[0] == g[1] == g[3] == 0 and 1e-7 < g[2] < 2.0 ** -9,
           f"step 0: rank 2's own gradient norm differs by {g[2]:.2e} (faults.md: 5.1e-6; bf16 bounds it by 2^-9), "
           "the others' not at all")
    r = rel(f["train/grad_norm"][0, 0], b["train/grad_norm"][0, 0])
    expect(0 < r < g[2], f"step 0: the reduced gradient norm differs by less ({r:.2e}; faults.md: 5.7e-7)")
    m = np.median(rel(f["train/global_loss"][:20], b["train/global_loss"][:20]))
    expect(1e-8 < m < 1e-5, f"global loss: median relative difference over steps 0-19 {m:.1e} (faults.md: 4.7e-7)")
    expect([e[:2] for e in events_of(f, "reduce_dtype_mismatch")] == [(0, 2)], "one /events row (step 0, rank 2)")


def bn_drift(args, model=()):
    f, b = scenario(args, "bn_drift", model)
    expect(in_sync(f), "parameters stay in sync")
    e, eb = f["eval/loss"][-1], b["eval/loss"][-1]
    expect(len(set(eb)) == 1, "baseline: every rank evaluates the same replica")
    expect(len(set(e)) > 1 and e[1] != e[0], f"eval loss differs across ranks at the end: {e}")
    expect(e[0] == eb[0], "rank 0 (still broadcasting) evaluates exactly like the baseline")


def skip_rank(args):
    f, b = scenario(args, "skip_rank")
    check_baseline(b)
    splits = f.split_steps()
    expect(len(splits) and splits[0] == 50, f"param_hash splits exactly at the first skipped step (50): {splits[:3]}")
    h = f["train/param_hash"]
    expect((h[50:, 3] != h[50:, 0]).all() and in_sync(f, [0, 1, 2]), "rank 3 stays apart, ranks 0-2 agree")
    expect(len(events_of(f, "skip_rank")) == STEPS - 50, "one event per skipped step")
    gap = np.abs(f["train/loss"][50:, 3] - f["train/loss"][50:, :3].mean(axis=1))
    gap_b = np.abs(b["train/loss"][50:, 3] - b["train/loss"][50:, :3].mean(axis=1))
    expect(gap.mean() > gap_b.mean(), f"rank 3's loss departs from the others' ({gap.mean():.3f} vs {gap_b.mean():.3f})")


def accum_misalign(args):
    f, b = scenario(args, "accum_misalign")
    check_baseline(b)
    splits = f.split_steps()
    expect(len(splits) and splits[0] == 50, f"replicas split at the misaligned step 50: {splits[:3]}")
    expect((f["train/param_hash"][50:, 2] != f["train/param_hash"][50:, 0]).all(), "rank 2 stays apart afterwards")
    expect([e[:2] for e in events_of(f, "accum_misalign")] == [(50, 2)], "one event at (50, rank 2)")


def loss_skew(args):
    f, b = scenario(args, "loss_skew")
    expect(in_sync(f), "replicas stay in sync")
    expect(f["train/loss"][0, 0] != b["train/loss"][0, 0] and f["train/loss"][0, 2] == b["train/loss"][0, 2],
           "step 0: ranks 0-1 compute another loss, ranks 2-3 the same as the baseline")
    ratio = f["train/grad_norm_local"][:, :2].mean() / f["train/grad_norm_local"][:, 2:].mean()
    ratio_b = b["train/grad_norm_local"][:, :2].mean() / b["train/grad_norm_local"][:, 2:].mean()
    expect(abs(ratio - 1) > 2 * abs(ratio_b - 1), f"grad norms differ between the two groups ({ratio:.3f} vs baseline {ratio_b:.3f})")
    expect(f["train/global_loss"][-1] != b["train/global_loss"][-1], "the run drifts from the baseline")


def optimizer_state_reset(args):
    f, b = scenario(args, "optimizer_state_reset")
    splits = f.split_steps()
    expect(len(splits) and splits[0] == 100 and in_sync(f, [0, 2, 3]), f"rank 1 splits at step 100 (reset): {splits[:3]}")
    expect([e[:2] for e in events_of(f, "optimizer_state_reset")] == [(100, 1)], "one event at (100, rank 1)")


def loss_scaler_desync(args):
    f, b = scenario(args, "loss_scaler_desync")
    check_baseline(b)
    skips = events_of(f, "overflow_skip")
    lone = [s for s in skips if s[1] == 1 and not any(o[0] == s[0] and o[1] != 1 for o in skips)]
    expect(len(lone) > 0, f"rank 1 skips steps the others take ({len(lone)} lone skips)")
    first = lone[0][0]
    splits = f.split_steps()
    expect(len(splits) and splits[0] == first, f"replicas split at rank 1's first lone skip ({first}): {splits[:3]}")
    expect((f["train/loss_scale"][-1, 1] != f["train/loss_scale"][-1, 0]), "rank 1's loss scale differs at the end")
    bs = events_of(b, "overflow_skip")
    expect(all(sum(1 for o in bs if o[0] == s[0]) == 4 for s in bs), "baseline: every overflow is skipped by all 4 ranks")


def reduction_order(args):
    f, b = scenario(args, "reduction_order")
    check_baseline(b)
    h = f["train/param_hash"]
    expect(h[0, 1] != h[0, 0] and in_sync(f, [0, 2, 3]), "rank 1's parameters differ in their bits from step 0")
    d0 = rel(f["train/param_norm"][0, 1], f["train/param_norm"][0, 0])
    dN = rel(f["train/param_norm"][-1, 1], f["train/param_norm"][-1, 0])
    expect(d0 < 1e-6, f"step 0 difference is last-bit noise ({d0:.1e})")
    expect(dN > d0, f"and it grows with steps ({dN:.1e})")


def reduction_order_shuffle(args):
    extra = ["--fault=reduction_order:mode=shuffle", "--dist.reduce=ring"]
    base = os.path.join(ROOT, "inputs", "baseline.ini")
    run(args, ["--config", base, f"--train.steps={STEPS}", "--run.out=a.h5", *extra])
    run(args, ["--config", base, f"--train.steps={STEPS}", "--run.out=b.h5", *extra])
    a, c = Run(os.path.join(args.workdir, "a.h5")), Run(os.path.join(args.workdir, "b.h5"))
    expect(in_sync(a) and in_sync(c), "replicas stay in sync within each run")
    expect(a["train/global_loss"][0] == c["train/global_loss"][0], "step 0 is identical (no reduction yet)")
    expect((a["train/param_hash"][:, 0] != c["train/param_hash"][:, 0]).any(), "two reruns differ (summation order changes)")


def bitflip(args):
    f, b = scenario(args, "bitflip")
    g = f["train/grad_norm_local"]
    expect(g[100, 2] > 1e20 and (g[100, [0, 1, 3]] < 100).all(), f"rank 2's local grad norm explodes at step 100 ({g[100, 2]:.3g}), only there")
    expect((g[:100] == b["train/grad_norm_local"][:100]).all(), "identical to the baseline before step 100")
    expect((f["train/grad_norm"][100] > 1e20).all(), "the reduced gradient of every rank spikes at step 100")
    loss = f["train/global_loss"]
    expect(np.isfinite(loss[:101]).all() and loss[:101].max() < 10, "the loss is normal up to step 100")
    expect(np.isfinite(loss[101]) and loss[101] > 1e10 and np.isnan(loss[102:]).all(),
           f"it explodes at step 101 ({loss[101]:.2g}, faults.md: 9.8e30) and is NaN from step 102")
    expect(in_sync(f), "replicas stay in sync (the corrupt value reaches everyone through the allreduce)")
    expect([e[:2] for e in events_of(f, "bitflip")] == [(100, 2)], "one event at (100, rank 2)")


def stale_scheduler(args):
    extra = ["--train.steps=200"]
    f, b = scenario(args, "stale_scheduler", extra)
    lr, lrb = f["train/lr"], b["train/lr"]
    expect((lr[:150] == lrb[:150]).all(), "LR identical before step 150")
    expect(lr[150, 1] == lrb[0, 1] and lr[160, 1] == lrb[10, 1], "rank 1's LR restarts from the schedule's step 0 at 150")
    expect((lr[150:, 0] == lrb[150:, 0]).all(), "the other ranks keep the schedule")
    splits = f.split_steps()
    expect(len(splits) and splits[0] == 150, f"replicas split at 150: {splits[:3]}")


def clip_mismatch(args):
    f, b = scenario(args, "clip_mismatch")
    applied = f["train/grad_norm"]
    expect((applied[:, 0] <= 0.5 + 1e-4).all(), "rank 0 applies gradients of norm <= 0.5")
    over = np.nonzero(b["train/grad_norm"][:, 0] > 0.5)[0]
    splits = f.split_steps()
    expect(len(over) and len(splits) and splits[0] == over[0], f"replicas split at the first step whose norm exceeds 0.5 ({over[:1]})")
    expect(in_sync(f, [1, 2, 3]), "ranks 1-3 stay together")


# Every fault of the catalog in one short run of a small model that has what each needs (BatchNorm, ASL,
# accumulation, ring, fp16 loss scaling): the faults compose, and each acts on the ranks and at the steps
# its spec names. Short enough for the sanitizer stage, where it stands in for the per-fault signature
# tests above (label long) that take minutes each there.
ALL_AT_ONCE = {
    "unsynced_seed:stream=init,ranks=3": [(0, 3)],
    "overlapping_shards:mode=duplicate_rank,of=0,ranks=1": [(0, 1)],
    "tf32_mismatch:format=tf32,ranks=2": [(0, 2)],
    "bn_drift:ranks=1-3": [(0, 1), (0, 2), (0, 3)],
    "skip_rank:mode=own_grad,ranks=3,start=10,stop=12": [(10, 3), (11, 3)],
    "accum_misalign:offset=+1,ranks=2,start=5,stop=6": [(5, 2)],
    "loss_skew:param=asl_margin,value=0.05,ranks=0-1": [(0, 0), (0, 1)],
    "optimizer_state_reset:ranks=1,start=8": [(8, 1)],
    "loss_scaler_desync:ranks=1": [(0, 1)],
    "reduction_order:mode=bucket,cap_mb=0.1,ranks=1": [(0, 1)],
    "bitflip:bit=30,ranks=2,start=20": [(20, 2)],
    "stale_scheduler:ranks=1,start=12": [(12, 1)],
    "clip_mismatch:max_norm=0.5,ranks=0": [(0, 0)],
    "reduce_dtype_mismatch:dtype=bf16,ranks=1": [(0, 1)],
}


# The other models (the mlp's settings above are ignored by them): a small ResNet.
def resnet(channels="8,16"):
    return ["--model.type=resnet", f"--model.channels={channels}", "--data.train_size=4096", "--data.test_size=500"]


VIT = ["--model.type=vit", "--model.dim=32", "--model.depth=2", "--model.heads=2", "--model.dropout=0.1",
       "--data.train_size=4096", "--data.test_size=500"]
# A character GPT on Debian's fortunes (causal attention, tied head, padded sequences).
GPT = ["--model.type=gpt", "--data.source=fortunes", "--model.block_size=32", "--model.dim=32", "--model.depth=2",
       "--model.heads=2", "--model.dropout=0.1", "--data.train_size=4096", "--data.test_size=256"]


def unsynced_dropout(args, model):
    """Dropout masks drawn from another seed on rank 3 of a transformer (dropout after attention and MLP):
    rank 3's loss leaves the baseline at step 0 while ranks 0-2 keep the baseline's bits; the gradient is
    still averaged, so the replicas stay in sync, on other values than the baseline's from step 1."""
    common = [*model, "--batch.global=64", "--train.steps=10", "--train.eval_every=5", "--record.samples=true"]
    run(args, [*common, "--run.out=base.h5"])
    run(args, [*common, "--run.out=fault.h5", "--fault=unsynced_seed:stream=dropout,ranks=3"])
    f, b = (Run(os.path.join(args.workdir, n)) for n in ("fault.h5", "base.h5"))
    check_baseline(b)
    expect(in_sync(f), "replicas stay in sync (the reduced gradient is shared)")
    loss, base = f["train/loss"], b["train/loss"]
    expect(loss[0, 3] != base[0, 3] and (loss[0, :3] == base[0, :3]).all(),
           "step 0: rank 3's loss differs from the baseline, ranks 0-2 are identical")
    expect((f["train/param_hash"][1:, 0] != b["train/param_hash"][1:, 0]).all(), "parameters leave the baseline from step 1")


def all_at_once(args, model=(), without=()):
    """`without`: faults whose mechanism the model lacks; each must be refused with an error naming it."""
    catalog = sorted(n[:-4] for n in os.listdir(os.path.join(ROOT, "inputs", "faults")) if n.endswith(".ini"))
    names = sorted(spec.split(":")[0] for spec in ALL_AT_ONCE)
    expect(names == catalog, f"one spec for each fault of inputs/faults/ ({len(catalog)})")
    options = ["--model.hidden=64,32", "--model.batchnorm=true", "--loss.type=asl", "--loss.margin=0.1",
               "--batch.global=64", "--batch.accum_steps=2", "--dist.reduce=ring", "--precision.amp=fp16",
               "--train.steps=24", "--train.eval_every=8", "--record.layers_every=2", "--record.samples=true",
               "--run.out=all.h5", *model]
    specs = {spec: where for spec, where in ALL_AT_ONCE.items() if spec.split(":")[0] not in without}
    for spec in ALL_AT_ONCE:
        if spec.split(":")[0] in without:
            refused = run(args, [*options, f"--fault={spec}"], check=False)
            expect(refused.returncode == 2 and "needs a model with" in refused.stderr,
                   f"{spec} refused with the missing layer named: {refused.stderr.strip()[-200:]}")
    run(args, [*options, *(f"--fault={spec}" for spec in specs)])
    r = Run(os.path.join(args.workdir, "all.h5"))
    with h5py.File(os.path.join(args.workdir, "all.h5"), "r") as f:
        listed = sorted(f["faults"]["spec"].astype(str))
    expect(listed == sorted(specs), "/faults lists every spec")
    for spec, where in specs.items():
        kind = spec.split(":")[0]
        got = [e[:2] for e in events_of(r, kind)]
        expect(got == where, f"{kind}: events at (step, rank) {where}")
    h = r["train/param_hash"]
    expect(h[0, 3] != h[0, 1] and h[0, 0] != h[0, 1], "unsynced_seed and clip_mismatch part ranks 3 and 0 from step 0")


# Every fault alone (every_fault: the first spec of each; every_mode: all of them), for a few steps at
# whatever world size the test runs, on the model and settings every fault needs. A fault acting on the
# last rank of a wide world must run to the end and write its file: the crash of issue 32 (every rank
# SIGSEGV at W=8 on 8 processes with most faults) ran at W=4 and on virtual ranks. Options after a spec
# adjust the settings for it alone.
EVERY_MODE = [
    "unsynced_seed:stream=init,ranks=7", "unsynced_seed:stream=sampler,ranks=7",
    "unsynced_seed:stream=dropout,ranks=7", "unsynced_seed:stream=augment,mode=clock,ranks=7",
    "overlapping_shards:mode=duplicate_rank,of=0,ranks=7", "overlapping_shards:mode=wrong_num_replicas,ranks=7",
    "overlapping_shards:mode=local_shuffle,ranks=7",
    "tf32_mismatch:format=tf32,ranks=7", "tf32_mismatch:format=bf16,ranks=7", "tf32_mismatch:format=fp16,ranks=7",
    "bn_drift:ranks=1-7",
    "skip_rank:mode=own_grad,ranks=7,start=2", "skip_rank:mode=stale,ranks=3-7,start=2",
    "accum_misalign:offset=+1,ranks=7,start=2", "accum_misalign:scheduler_per_micro=true,ranks=7,start=2",
    ("loss_skew:param=label_smoothing,value=0.1,ranks=7", "--loss.type=cross_entropy"), "loss_skew:param=asl_margin,value=0.05,ranks=6-7",
    "optimizer_state_reset:ranks=7,start=3",
    "loss_scaler_desync:ranks=7",
    "reduction_order:mode=bucket,cap_mb=0.1,ranks=7", "reduction_order:mode=shuffle,ranks=7",
    "bitflip:bit=30,ranks=7,start=2", "bitflip:bit=12,index=5,ranks=7,start=2",
    "stale_scheduler:ranks=3,start=3",
    "clip_mismatch:max_norm=0.5,ranks=7",
    "reduce_dtype_mismatch:dtype=bf16,ranks=7", "reduce_dtype_mismatch:dtype=fp16,ranks=7",
]
EVERY_MODE_STEPS = 6


def every_mode(args, specs=EVERY_MODE):
    catalog = sorted(n[:-4] for n in os.listdir(os.path.join(ROOT, "inputs", "faults")) if n.endswith(".ini"))
    specs = [(s,) if isinstance(s, str) else s for s in specs]
    expect(sorted({s[0].split(":")[0] for s in specs}) == catalog, f"every fault of inputs/faults/ ({len(catalog)})")
    base = ["--model.hidden=32,16", "--model.batchnorm=true", "--model.dropout=0.1", "--data.augment=true", "--loss.type=asl",
            "--loss.margin=0.1", "--batch.global=64", "--batch.accum_steps=2", "--precision.amp=fp16",
            "--schedule.type=cosine", "--schedule.warmup_steps=2", f"--train.steps={EVERY_MODE_STEPS}",
            "--train.eval_every=3", "--record.samples=true", "--record.layers_every=1"]
    for i, (spec, *extra) in enumerate(specs):
        out = f"f{i}.h5"
        keys = {e.split("=")[0] for e in extra}
        options = [b for b in base if b.split("=")[0] not in keys] + list(extra)
        proc = run(args, [*options, f"--run.out={out}", f"--fault={spec}"], check=False, timeout=300)
        if proc.returncode != 0:
            sys.exit(f"NOT OK: W={args.ranks}: {spec} exited {proc.returncode}\n{proc.stderr.strip()[-2000:]}")
        print(f"OK: W={args.ranks}: {spec} exits 0")
        with h5py.File(os.path.join(args.workdir, out), "r") as f:
            loss = f["train/loss"][()]
            kinds = {e["kind"].decode() for e in f["events"][()]}
        expect(loss.shape == (EVERY_MODE_STEPS, args.ranks), f"  and writes {EVERY_MODE_STEPS} steps x {args.ranks} ranks")
        expect(spec.split(":")[0] in kinds, "  and logs the fault in /events")


def every_fault(args):
    first = {}
    for s in EVERY_MODE:
        first.setdefault((s if isinstance(s, str) else s[0]).split(":")[0], s)
    every_mode(args, list(first.values()))


def baseline_comments(args):
    """Each scenario's comment names its baseline command; that command's effective configuration must be
    the scenario's without its fault (and run name), so diagnosing against it shows the fault alone."""
    import shlex
    import subprocess

    def effective(argv):
        out = subprocess.run([args.divsim, *argv, "--print-config"], capture_output=True, text=True, check=True).stdout
        return [line for line in out.splitlines() if not re.match(r"(fault|name|#)\s*", line.strip())]
    for ini in sorted(glob.glob(os.path.join(ROOT, "inputs", "faults", "*.ini"))):
        with open(ini) as fh:
            line = next(l for l in fh if l.startswith("#   baseline"))
        argv = shlex.split(line.split(":", 1)[1])
        expect(argv[:4] == ["mpiexec", "-n", "4", "build/divsim"], f"{os.path.basename(ini)}: a baseline command")
        argv = [a.replace("inputs/", ROOT + "/inputs/") for a in argv[4:]]
        expect(effective(argv) == effective(["--config", ini]), f"  {' '.join(argv)}: the scenario's settings")


if __name__ == "__main__":
    from divsim_testlib import parse_args
    commands = {"all_at_once_resnet": lambda a: all_at_once(a, resnet()),
                "bn_drift_resnet": lambda a: bn_drift(a, [*resnet("4,8"), "--batch.global=64",
                                                                "--train.steps=30", "--train.eval_every=15"]),
                "all_at_once_vit": lambda a: all_at_once(a, VIT, without=("bn_drift",)),
                "unsynced_dropout_vit": lambda a: unsynced_dropout(a, VIT),
                "all_at_once_gpt": lambda a: all_at_once(a, GPT, without=("bn_drift",)),
                "unsynced_dropout_gpt": lambda a: unsynced_dropout(a, GPT)}
    commands |= {n: globals()[n] for n in ["unsynced_seed", "overlapping_shards", "tf32_mismatch", "bn_drift", "skip_rank",
                                          "accum_misalign", "loss_skew", "optimizer_state_reset", "loss_scaler_desync",
                                          "reduction_order", "reduction_order_shuffle", "bitflip", "stale_scheduler",
                                          "clip_mismatch", "reduce_dtype_mismatch", "all_at_once", "every_fault", "every_mode", "baseline_comments"]}
    a = parse_args(list(commands))
    commands[a.command](a)
