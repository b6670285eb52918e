"""`build/divsim evaluate` (`python3 -m divsim evaluate`): how well diagnose works, measured on real
runs of the simulator.

It runs clean runs (several seeds and world sizes) and counts how often a blind diagnosis names any
cause (the false-positive rate; the target is zero), then generates single-fault scenarios from the
fault catalog (random fault, world size 2..8, rank and start step), runs each with its fault-free
baseline, diagnoses it blind with and without the baseline, and reports: how often the injected fault
is named first, how often the reported split step is within +-1 of the injection where replicas split,
and the detection matrix (fault x detector: median steps from injection to detection, and in what
fraction of that fault's scenarios the detector fired). Raw results go to results.json, the tables to
report.md and matrix.csv; docs/analysis.md quotes them. Runs already in the output folder are reused,
so the same command again re-scores the diagnosis after a change of the detectors or the cause table.

VARIANTS says how each fault is exercised (its parameters and the config it needs); it must follow
docs/faults.md. This module only drives runs and counts; judging is diagnose's.
"""
import hashlib
import json
import os
import random
import subprocess
import time

import pandas as pd

from .catalog import FAULTS
from .compare import Comparison
from .diagnose import diagnose

# The training set-up of every run (a few seconds per run on two cores): the catalog scenarios'
# (inputs/faults/*.ini) shortened, with a per-rank batch so that every world size divides it.
BASE_ARGS = ["--data.train_size=8192", "--data.test_size=1000", "--batch.per_rank=32", "--schedule.warmup_steps=10",
             "--train.eval_every=10", "--record.layers_every=5", "--record.samples=true"]
AMP = ["--precision.amp=fp16", "--precision.loss_scale_init=262144", "--precision.loss_scale_growth_interval=50"]
# fault -> [(fault parameters, config arguments it needs, fixed start step or None)]; "{other}" is replaced
# by a rank other than the faulty one. Parameters as in docs/faults.md and src/faults/*.cpp.
VARIANTS = {
    "unsynced_seed": [("stream=init", [], 0), ("stream=sampler", [], None),
                      ("stream=dropout", ["--model.dropout=0.1"], None),
                      ("stream=augment", ["--data.augment=true"], None)],
    "overlapping_shards": [("mode=duplicate_rank,of={other}", [], None), ("mode=wrong_num_replicas", [], None),
                           ("mode=local_shuffle", [], None)],
    "tf32_mismatch": [("format=tf32", [], None), ("format=bf16", [], None), ("format=fp16", [], None)],
    "bn_drift": [("", ["--model.batchnorm=true"], None)],
    "skip_rank": [("mode=own_grad", [], None), ("mode=stale", [], None)],
    "accum_misalign": [("offset=1", ["--batch.accum_steps=2"], None), ("offset=-1", ["--batch.accum_steps=2"], None),
                       ("scheduler_per_micro=true", ["--batch.accum_steps=2"], None)],
    "loss_skew": [("param=label_smoothing,value=0.1", [], None),
                  ("param=asl_margin,value=0.05", ["--loss.type=asl", "--loss.margin=0.1"], None)],
    "optimizer_state_reset": [("", [], None)],
    "loss_scaler_desync": [("", AMP, None)],
    "reduction_order": [("mode=bucket,cap_mb=0.1", ["--dist.reduce=ring"], None),
                        ("mode=shuffle", ["--dist.reduce=ring"], None)],
    "bitflip": [("bit=30", [], None), ("bit=28", [], None)],
    "stale_scheduler": [("", [], None)],
    "clip_mismatch": [("max_norm=0.5", [], None)],
    "reduce_dtype_mismatch": [("dtype=bf16", [], None), ("dtype=fp16", [], None)],
}


def add_arguments(parser):
    parser.add_argument("--divsim", required=True, help="the divsim binary")
    parser.add_argument("--mpiexec", default="mpiexec")
    parser.add_argument("--out", required=True, help="folder for the runs, results.json and report.md")
    parser.add_argument("--scenarios", type=int, default=40, help="fault scenarios to generate")
    parser.add_argument("--clean-seeds", type=int, default=3, help="seeds per world size for the clean runs")
    parser.add_argument("--world-sizes", default="1,2,3,4,5,6,7,8", help="world sizes of the clean runs")
    parser.add_argument("--faults", default=",".join(FAULTS), help="faults to draw scenarios from")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0, help="seed of the scenario generator")


class Runner:
    """Runs divsim under mpiexec: the logical ranks on two processes when the world size is even, else on
    one (small machines)."""

    def __init__(self, divsim, mpiexec, out, steps):
        self.divsim, self.mpiexec, self.out, self.steps = divsim, mpiexec, out, steps
        self.runs = 0

    def __call__(self, folder, world_size, extra):
        """The run of these arguments in `folder`, made unless a previous call made it (the file name is
        a digest of the arguments, so a re-run of the study re-uses exactly the runs it needs)."""
        digest = hashlib.sha1(repr((world_size, self.steps, BASE_ARGS, extra)).encode()).hexdigest()[:12]
        path = os.path.join(self.out, folder, f"w{world_size}_{digest}.h5")
        if os.path.exists(path):
            return path
        os.makedirs(os.path.dirname(path), exist_ok=True)
        procs = 2 if world_size % 2 == 0 else 1
        cmd = [self.mpiexec, "-n", str(procs), self.divsim, "--quiet", f"--dist.world_size={world_size}",
               f"--train.steps={self.steps}", f"--run.out={path}", *BASE_ARGS, *extra]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        self.runs += 1
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()}")
        return path


def clean_study(runner, world_sizes, seeds):
    rows = []
    for w in world_sizes:
        for seed in range(seeds):
            path = runner("clean", w, [f"--run.seed={seed}"])
            d = diagnose(path, blind=True)
            rows.append({"world_size": w, "seed": seed, "causes": [c["fault"] for c in d.causes],
                         "symptom": d.symptom})
    return rows


def make_scenarios(rng, n, faults, steps):
    """n scenarios, the faults in turns (shuffled once) so that each gets its share."""
    out, order = [], rng.sample(faults, len(faults))
    for i in range(n):
        fault = order[i % len(order)]
        params, setup, start = rng.choice(VARIANTS[fault])
        w = rng.randint(2, 8)
        start = rng.randint(1, steps // 2) if start is None else start
        rank = rng.randrange(1, w) if fault == "unsynced_seed" else rng.randrange(w)  # base + 0 is the base seed
        params = params.replace("{other}", str(rng.choice([r for r in range(w) if r != rank])))
        spec = f"{fault}:ranks={rank},start={start}" + (f",{params}" if params else "")
        out.append({"id": i, "fault": fault, "spec": spec, "world_size": w, "rank": rank, "start": start,
                    "setup": setup, "seed": rng.randrange(1000)})
    return out


def scenario_study(runner, scenarios):
    rows = []
    for sc in scenarios:
        common = [f"--run.seed={sc['seed']}", *sc["setup"]]
        row = dict(sc)
        try:
            base = runner("baselines", sc["world_size"], common)
            faulty = runner("scenarios", sc["world_size"], common + [f"--fault={sc['spec']}"])
            row.update(run=faulty, baseline=base)
        except RuntimeError as e:
            row["error"] = str(e)
            rows.append(row)
            continue
        # Where the fault first changed anything: a fault that left no trace (it never triggered, or it
        # is a no-op on that rank) cannot be diagnosed.
        effect = Comparison(faulty, base).first_difference
        row["no_effect"] = effect is None
        row["effect_step"] = effect.step if effect else None
        for label, reference in (("ref", base), ("alone", None)):
            d = diagnose(faulty, reference=reference, blind=True)
            names = [c["fault"] for c in d.causes]
            row[f"{label}_causes"] = names
            row[f"{label}_rank_of_truth"] = names.index(sc["fault"]) + 1 if sc["fault"] in names else None
            row[f"{label}_split_step"] = d.replicas["first_split_step"]
            row[f"{label}_first_step"] = d.first_divergent_step
            row[f"{label}_findings"] = {f.key: f.step for f in reversed(d.findings)}
        rows.append(row)
    return rows


def detection_matrix(rows):
    """DataFrame fault x detector: 'median delay (fired/scenarios)' of the blind diagnosis with reference,
    the delay counted from the configured injection step (- for findings about the whole run)."""
    cells, counts = {}, {}
    for r in rows:
        counts[r["fault"]] = counts.get(r["fault"], 0) + 1
        for key, step in r["ref_findings"].items():
            cells.setdefault((r["fault"], key), []).append(None if step is None else step - r["start"])
    table = {}
    for (fault, key), delays in cells.items():
        known = sorted(d for d in delays if d is not None)
        median = known[len(known) // 2] if known else None
        table.setdefault(key, {})[fault] = f"{'-' if median is None else median} ({len(delays)}/{counts[fault]})"
    return pd.DataFrame(table).reindex([f for f in FAULTS if f in counts]).fillna("")


def summarise(clean, rows):
    """report.md: the headline rates, then one row per fault with the detectors that fired."""
    ok = [r for r in rows if "error" not in r and not r["no_effect"]]
    lines = ["# diagnose evaluation", ""]
    fp = sum(1 for r in clean if r["causes"])
    lines.append(f"- Clean runs: {len(clean)} (world sizes {sorted({r['world_size'] for r in clean})}); blind "
                 f"diagnoses naming a cause: {fp} ({fp / max(len(clean), 1):.1%}).")
    for label, what in (("ref", "with the baseline as reference"), ("alone", "without a reference")):
        first = sum(1 for r in ok if r[f"{label}_rank_of_truth"] == 1)
        lines.append(f"- Fault scenarios, blind, {what}: injected fault named first in {first}/{len(ok)} "
                     f"({first / max(len(ok), 1):.0%}).")
    split = [r for r in ok if r["ref_split_step"] is not None]
    near = sum(1 for r in split if abs(r["ref_split_step"] - r["effect_step"]) <= 1)
    lines.append(f"- Replicas split in {len(split)} scenarios; the reported split step is within +-1 of the "
                 f"fault's first effect (first bitwise difference from the baseline) in {near}.")
    idle = [r["spec"] for r in rows if r.get("no_effect")]
    if idle:
        lines.append(f"- {len(idle)} scenarios left the run bitwise equal to its baseline and are not counted: "
                     f"{', '.join(idle)}.")
    errors = [r for r in rows if "error" in r]
    if errors:
        lines.append(f"- {len(errors)} scenarios could not run, e.g.: {errors[0]['error'][:300]}")
    if ok:
        matrix = detection_matrix(ok)
        lines += ["", "| fault | scenarios | named first (with reference) | named first (alone) | detectors: median "
                  "steps from injection (fired/scenarios) |", "|---|---|---|---|---|"]
        for fault in matrix.index:
            mine = [r for r in ok if r["fault"] == fault]
            fired = sorted(((c, k) for k, c in matrix.loc[fault].items() if c),
                           key=lambda ck: -int(ck[0].split("(")[1].split("/")[0]))
            lines.append(f"| {fault} | {len(mine)} | {sum(r['ref_rank_of_truth'] == 1 for r in mine)} | "
                         f"{sum(r['alone_rank_of_truth'] == 1 for r in mine)} | "
                         + ", ".join(f"{k} {c}" for c, k in fired) + " |")
    return "\n".join(lines) + "\n"


def main(args):
    faults = [f for f in args.faults.split(",") if f]
    unknown = [f for f in faults if f not in VARIANTS]
    if unknown:
        raise SystemExit(f"divsim evaluate: error: unknown faults {unknown} (catalog: {', '.join(FAULTS)})")
    os.makedirs(args.out, exist_ok=True)
    runner = Runner(args.divsim, args.mpiexec, args.out, args.steps)
    t0 = time.time()
    clean = clean_study(runner, [int(w) for w in args.world_sizes.split(",")], args.clean_seeds)
    rows = scenario_study(runner, make_scenarios(random.Random(args.seed), args.scenarios, faults, args.steps))
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"clean": clean, "scenarios": rows}, f, indent=1)
    report = summarise(clean, rows)
    with open(os.path.join(args.out, "report.md"), "w") as f:
        f.write(report)
    done = [r for r in rows if "error" not in r and not r["no_effect"]]
    if done:
        detection_matrix(done).to_csv(os.path.join(args.out, "matrix.csv"))
    print(report + f"\n{runner.runs} runs in {time.time() - t0:.0f} s; results in {args.out}")
    return 0
