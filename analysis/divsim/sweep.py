"""Sweep: the runs of one study (world sizes, faults, seeds) loaded from a folder, with one summary
row per run, concatenated tidy frames, step-aligned columns, and comparisons or diagnoses of every run
against a reference.

It reads what run.py gives and deliberately computes no new statistics of its own beyond the summary
columns; plots of a sweep are in plots.py.
"""
import glob
import os

import numpy as np
import pandas as pd

from .compare import Comparison, align
from .diagnose import describe_config_diff, diagnose
from .detectors import rank_groups
from .run import Run


def _fault_label(run):
    if run.blind:
        return "hidden"
    specs = run.fault_specs
    return "+".join(s.split(":", 1)[0] for s in specs) if specs else "none"


class Sweep:
    """A list of runs. `sweep.table()` summarises them; `sweep["name"]` or `sweep[i]` picks one."""

    def __init__(self, runs, skipped=()):
        self.runs = list(runs)
        self.skipped = list(skipped)  # (path, reason) of files that are not divsim runs

    def __len__(self):
        return len(self.runs)

    def __iter__(self):
        return iter(self.runs)

    def __getitem__(self, key):
        if isinstance(key, int):
            return self.runs[key]
        matches = [r for r in self.runs if r.name == key or os.path.basename(r.path) == key]
        if not matches:
            raise KeyError(f"no run named {key!r} (runs: {', '.join(r.name for r in self.runs)})")
        return matches[0]

    def __repr__(self):
        return f"<Sweep of {len(self.runs)} runs>"

    def table(self):
        """DataFrame, one row per run: identity (name, world size, fault, seed, reduce, precision) and
        outcome (final loss, final eval loss and its spread over ranks, accuracy, replica sync)."""
        rows = []
        for run in self.runs:
            h = run.values("train/param_hash")
            split = [i for i in range(len(h)) if len(rank_groups(h[i])) > 1]
            ev = run.values("eval/loss") if run.has("eval/loss") and len(run["eval/loss"]) else None
            acc = run.values("eval/accuracy") if ev is not None else None
            rows.append({
                "name": run.name, "path": run.path, "world_size": run.world_size, "fault": _fault_label(run),
                "seed": run.config.get("run.seed"), "reduce": run.config.get("dist.reduce"),
                "precision": run.config.get("precision.matmul"), "steps": len(run.steps),
                "final_loss": float(run.values("train/global_loss")[-1]) if len(run.steps) else np.nan,
                "final_eval_loss": float(ev[-1].mean()) if ev is not None else np.nan,
                "eval_loss_spread": float(ev[-1].max() - ev[-1].min()) if ev is not None else np.nan,
                "final_eval_accuracy": float(acc[-1].mean()) if acc is not None else np.nan,
                "replicas_in_sync": not split,
                "first_split_step": int(run.steps[split[0]]) if split else None,
            })
        return pd.DataFrame(rows)

    def frame(self, name):
        """Every run's tidy frame of a dataset, with columns run, world_size and fault added in front."""
        frames = []
        for run in self.runs:
            f = run.frame(name)
            f.insert(0, "fault", _fault_label(run))
            f.insert(0, "world_size", run.world_size)
            f.insert(0, "run", run.name)
            frames.append(f)
        return pd.concat(frames, ignore_index=True)

    def align(self, name, rank=None):
        """DataFrame indexed by step, one column per run (mean over ranks, or one rank)."""
        return align(self.runs, name, rank)

    def compare(self, reference):
        """DataFrame, one row per run: where it first differs from `reference` (bitwise and beyond tolerance)."""
        reference = reference if isinstance(reference, Run) else Run(reference)
        rows = []
        for run in self.runs:
            c = Comparison(run, reference)
            row = {"run": run.name, "world_size": run.world_size, "fault": _fault_label(run)}
            for label, d in (("difference", c.first_difference), ("divergence", c.first_divergence)):
                row[f"first_{label}"] = d.step if d else None
                row[f"{label}_phase"] = d.phase if d else None
            d = c.first_difference or c.first_divergence
            row["ranks"] = d.ranks if d else []
            row["layer"] = d.layer if d else None
            rows.append(row)
        return pd.DataFrame(rows)

    def diagnose(self, reference=None):
        """DataFrame, one row per run: how its configuration differs from the reference's ("" when it does
        not; differences from a reference of another configuration name no cause), the top cause, its
        score, the symptom and the first divergent step."""
        if reference is not None and not isinstance(reference, Run):
            reference = Run(reference)
        rows = []
        for run in self.runs:
            d = diagnose(run, reference)
            rows.append({"run": run.name, "world_size": run.world_size, "fault": _fault_label(run),
                         "config_diff": "; ".join(describe_config_diff(d.config_diff)),
                         "cause": d.causes[0]["fault"] if d.causes else None,
                         "score": d.causes[0]["score"] if d.causes else 0.0, "symptom": d.symptom,
                         "first_divergent_step": d.first_divergent_step})
        return pd.DataFrame(rows)


def load_sweep(folder, pattern="**/*.h5", blind=False):
    """Loads every divsim run under `folder` matching `pattern` (finished runs only: *.partial files
    are not matched); other HDF5 files are listed in `.skipped`."""
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"no such sweep folder: {folder}")
    runs, skipped = [], []
    for path in sorted(glob.glob(os.path.join(folder, pattern), recursive=True)):
        try:
            runs.append(Run(path, blind=blind))
        except ValueError as e:
            skipped.append((path, str(e)))
    if not runs:
        raise ValueError(f"no divsim runs matching {pattern!r} in {folder}")
    runs.sort(key=lambda r: (r.world_size, r.name, r.path))
    return Sweep(runs, skipped)
