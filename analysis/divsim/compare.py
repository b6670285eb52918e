"""Comparing a run with a reference run, aligned by step: where, in which rank and layer, and in which
phase of the step they first differ (seed 000 §3: the first place where runs part, forward or backward).

Two criteria are reported. `first_difference` is bitwise: with a bitwise-reproducible baseline of the
same set-up (same config apart from faults and run.IDENTITY_KEYS, same world size) any difference is
caused by what changed, so the exact step and phase are found. `first_divergence` uses seed 000 §3.3's
precision-aware tolerances (the looser precision.matmul of the two runs): a value a differs from the
reference's b when |a - b| > atol * s + rtol * max(|b|, s), s being the quantity's typical magnitude
(the reference's median |value|; for layer statistics the layer's std, or its l2 for the l2
statistic). So a statistic that is near zero (a gradient's mean) is judged on the scale of its layer,
not on its own noise. Parameter hashes are bitwise by nature and count only for the first criterion.

Within one step the phases come in the order the step loop runs them (DESIGN.md "One optimizer step"):
data (samples), forward, loss, backward, reduce, optimizer (lr, loss scale), update (parameters), eval.
Quantities that depend on a rank's own samples are compared only between equal world sizes; replica
properties (applied gradient, lr, parameters, eval) are compared with the reference's rank 0 when the
world sizes differ. This module does not decide what a difference means (diagnose.py does).
"""
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .catalog import tolerance
from .labelled import Labelled
from .run import Run

PHASES = ("data", "forward", "loss", "backward", "reduce", "optimizer", "update", "eval")
# dataset, phase, how it is compared ("exact": equal or not under both criteria; "bits": only the
# bitwise criterion sees it; "float": tolerances), kind ("local": depends on the rank's samples;
# "replica": a property of the rank's replica; "global": one value per step).
QUANTITIES = (
    ("train/samples", "data", "exact", "local"),
    ("layers/forward", "forward", "float", "local"),
    ("train/loss", "loss", "float", "local"),
    ("train/global_loss", "loss", "float", "global"),
    ("layers/backward", "backward", "float", "local"),
    ("layers/grad_norm", "backward", "float", "local"),
    ("train/grad_norm_local", "backward", "float", "local"),
    ("train/grad_norm", "reduce", "float", "replica"),
    ("train/lr", "optimizer", "float", "replica"),
    ("train/loss_scale", "optimizer", "float", "replica"),
    ("train/param_norm", "update", "float", "replica"),
    ("train/param_hash", "update", "bits", "replica"),
    ("eval/loss", "eval", "float", "replica"),
    ("eval/accuracy", "eval", "float", "replica"),
)
_PHASE_DIRECTION = {"data": "forward", "forward": "forward", "loss": "loss", "backward": "backward",
                    "reduce": "backward", "optimizer": "update", "update": "update", "eval": "eval"}


@dataclass
class Divergence:
    """Where two runs first part."""
    step: int
    phase: str            # one of PHASES
    direction: str        # forward | loss (forward identical, the loss differs) | backward | update | eval
    ranks: list           # ranks of the run that differ ([] for a per-step global quantity)
    quantities: list      # datasets that differ at that step in that phase
    magnitude: float      # largest relative difference among those that are floats (else of any float
                          # quantity at that step; 0 when only bits differ)
    layer: str = None     # first differing layer (forward order forward, backward order backward)
    layer_recorded: bool = False  # layer statistics exist at this step in both runs
    bitwise: bool = False  # found with the bitwise criterion

    def to_dict(self):
        return {k: getattr(self, k) for k in ("step", "phase", "direction", "ranks", "quantities", "magnitude",
                                              "layer", "layer_recorded", "bitwise")}


@dataclass
class _Quantity:
    name: str
    phase: str
    how: str
    steps: np.ndarray          # aligned steps
    differs: np.ndarray        # [step, rank] bool, bitwise
    exceeds: np.ndarray        # [step, rank] bool, beyond tolerance
    rel: np.ndarray            # [step, rank] float, largest relative difference
    per_layer: dict = field(default_factory=dict)  # layers only: differs/exceeds/rel as [step, rank, layer]


def _equal(a, b):
    same = a == b
    if a.dtype.kind == "f":
        same |= np.isnan(a) & np.isnan(b)
    return same


def _scale(ref, name, stat_names):
    """Typical magnitude of each element's series (broadcastable to ref): the median |value| over steps
    and ranks, per layer for layer data, and from the layer's std (its l2 for l2) for layer statistics."""
    mag = np.abs(ref)
    if not name.startswith("layers/"):
        return np.full(mag.shape, max(float(np.median(mag)), np.finfo(float).tiny))
    s = np.median(mag, axis=(0, 1), keepdims=True)
    if name in ("layers/forward", "layers/backward") and "std" in stat_names and "l2" in stat_names:
        std, l2 = stat_names.index("std"), stat_names.index("l2")
        s = np.repeat(s[..., std:std + 1], mag.shape[-1], axis=-1)
        s[..., l2] = np.median(mag[..., l2], axis=(0, 1))
    return np.where(s > 0, s, 1.0) * np.ones(mag.shape)


class Comparison:
    """A run against a reference, aligned by step. See the module docstring."""

    def __init__(self, run, reference, rtol=None, atol=None):
        self.run = run if isinstance(run, Run) else Run(run)
        self.reference = reference if isinstance(reference, Run) else Run(reference)
        p_rtol, p_atol, self.precision = tolerance(self.run.config.get("precision.matmul"),
                                                   self.reference.config.get("precision.matmul"))
        self.rtol = p_rtol if rtol is None else rtol
        self.atol = p_atol if atol is None else atol
        self.config_diff = self.run.config.diff(self.reference.config)
        self.same_world_size = self.run.world_size == self.reference.world_size
        if not self.same_world_size:  # dist.world_size = 0 (one rank per process) hides the world size
            self.config_diff = dict(sorted({**self.config_diff, "dist.world_size": (
                self.run.world_size, self.reference.world_size)}.items()))
        # Same set-up: a bitwise-reproducible baseline must then match bit for bit.
        self.same_setup = self.same_world_size and not self.config_diff
        self._quantities = {}
        self.skipped = {}  # dataset -> why it was not compared
        for name, phase, how, kind in QUANTITIES:
            why = self._comparable(name, kind)
            if why:
                self.skipped[name] = why
            else:
                self._quantities[name] = self._compare(name, phase, how, kind)
        self.first_difference = self._first(bitwise=True) if self.same_setup else None
        self.first_divergence = self._first(bitwise=False)

    def __repr__(self):
        return (f"<Comparison {self.run.name!r} vs {self.reference.name!r}: "
                f"first difference {self.first_difference and self.first_difference.step}, "
                f"first divergence {self.first_divergence and self.first_divergence.step} "
                f"(rtol {self.rtol:g}, atol {self.atol:g})>")

    def _comparable(self, name, kind):
        if not (self.run.has(name) and self.reference.has(name)):
            return "not recorded in both runs"
        if kind == "local" and not self.same_world_size:
            return "depends on each rank's samples; world sizes differ"
        if name.startswith("layers/") and self.run.layer_names != self.reference.layer_names:
            return "the models have different layers"
        if self.run[name].shape[2:] != self.reference[name].shape[2:]:
            return f"shapes differ ({self.run[name].shape} vs {self.reference[name].shape})"
        return None

    def _compare(self, name, phase, how, kind):
        a_lab, b_lab = self.run[name], self.reference[name]
        steps, ia, ib = np.intersect1d(a_lab.coords["step"], b_lab.coords["step"], return_indices=True)
        a, b = a_lab.values[ia], b_lab.values[ib]
        if kind == "replica" and not self.same_world_size:
            b = np.repeat(b[:, :1], a.shape[1], axis=1)
        if kind == "global":
            a, b = a[:, None], b[:, None]
        same = _equal(a, b)
        if how == "float":
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            s = _scale(b64, name, self.run.stat_names)
            size = np.maximum(np.abs(b64), s)
            delta = np.abs(a64 - b64)
            with np.errstate(invalid="ignore"):
                exceeds = ~same & ~(delta <= self.atol * s + self.rtol * size)
                rel = np.where(same, 0.0, np.nan_to_num(delta / size, nan=np.inf))
        else:
            exceeds = ~same if how == "exact" else np.zeros_like(same)
            rel = np.where(same, 0.0, 1.0)
        reduce_axes = tuple(range(2, a.ndim))
        q = _Quantity(name, phase, how, steps, (~same).any(axis=reduce_axes), exceeds.any(axis=reduce_axes),
                      rel.max(axis=reduce_axes) if reduce_axes else rel)
        if name.startswith("layers/") and a.ndim >= 3:
            layer_axes = tuple(range(3, a.ndim))
            q.per_layer = {"differs": (~same).any(axis=layer_axes), "exceeds": exceeds.any(axis=layer_axes),
                           "rel": rel.max(axis=layer_axes) if layer_axes else rel}
        return q

    def _mask(self, q, bitwise):
        return q.differs if bitwise else q.exceeds

    def _first(self, bitwise):
        onset = None
        for q in self._quantities.values():
            hit = np.flatnonzero(self._mask(q, bitwise).any(axis=1))
            if len(hit):
                key = (int(q.steps[hit[0]]), PHASES.index(q.phase))
                onset = key if onset is None or key < onset else onset
        if onset is None:
            return None
        step, phase_index = onset
        phase = PHASES[phase_index]
        names, ranks, in_phase, at_step = [], set(), 0.0, 0.0
        for q in self._quantities.values():
            if step not in q.steps:
                continue
            i = int(np.searchsorted(q.steps, step))
            row = self._mask(q, bitwise)[i]
            if q.how == "float":
                at_step = max(at_step, float(q.rel[i].max()))
            if q.phase != phase or not row.any():
                continue
            names.append(q.name)
            if q.name != "train/global_loss":
                ranks.update(np.flatnonzero(row).tolist())
            if q.how == "float":
                in_phase = max(in_phase, float(q.rel[i][row].max()))
        magnitude = in_phase or at_step
        d = Divergence(step, phase, _PHASE_DIRECTION[phase], sorted(ranks), names, magnitude, bitwise=bitwise)
        self._locate_layer(d, bitwise)
        return d

    def _layer_row(self, name, step):
        q = self._quantities.get(name)
        if q is None or not q.per_layer or step not in q.steps:
            return None
        return q, int(np.searchsorted(q.steps, step))

    def _locate_layer(self, d, bitwise):
        """Names the first differing layer at the onset step, if layer statistics exist there."""
        key = "differs" if bitwise else "exceeds"
        fwd = self._layer_row("layers/forward", d.step)
        bwd = [r for r in (self._layer_row("layers/backward", d.step), self._layer_row("layers/grad_norm", d.step))
               if r is not None]
        d.layer_recorded = fwd is not None
        if d.phase == "loss":  # "loss" only when the forward statistics show the layers agree
            d.direction = "loss" if fwd is not None and not fwd[0].per_layer[key][fwd[1]].any() else "forward"
        if d.phase in ("data", "forward", "loss") and fwd is not None:
            hit = np.flatnonzero(fwd[0].per_layer[key][fwd[1]].any(axis=0))
            if len(hit):
                d.layer = self.run.layer_names[hit[0]]
                return
        if d.phase in ("loss", "backward") and bwd:
            hit = np.flatnonzero(np.any([q.per_layer[key][i].any(axis=0) for q, i in bwd], axis=0))
            if len(hit):
                d.layer = self.run.layer_names[hit[-1]]

    def table(self):
        """DataFrame, one row per quantity: phase, first differing step (bitwise, tolerance), the ranks
        at the latter, the largest relative difference, or why it was not compared."""
        rows = []
        for name, phase, _, _ in QUANTITIES:
            q = self._quantities.get(name)
            if q is None:
                rows.append({"dataset": name, "phase": phase, "compared": False, "note": self.skipped[name]})
                continue
            row = {"dataset": name, "phase": phase, "compared": True, "note": ""}
            for label, mask in (("first_difference", q.differs), ("first_divergence", q.exceeds)):
                hit = np.flatnonzero(mask.any(axis=1))
                row[label] = int(q.steps[hit[0]]) if len(hit) else None
            hit = np.flatnonzero(q.exceeds.any(axis=1))
            row["ranks"] = np.flatnonzero(q.exceeds[hit[0]]).tolist() if len(hit) else []
            row["max_rel"] = float(q.rel.max()) if q.rel.size else 0.0
            rows.append(row)
        return pd.DataFrame(rows, columns=["dataset", "phase", "compared", "first_difference", "first_divergence",
                                           "ranks", "max_rel", "note"])

    def relative(self, name):
        """Labelled [step, rank] of the largest relative difference of a dataset (0 where bitwise equal)."""
        q = self._quantities.get(name.strip("/"))
        if q is None:
            raise KeyError(f"{name} was not compared: {self.skipped.get(name.strip('/'), 'unknown dataset')}")
        return Labelled(q.rel, ("step", "rank"), {"step": q.steps}, name=f"rel_{q.name.rsplit('/', 1)[-1]}")

    def layer_profile(self, step=None):
        """DataFrame, one row per layer: the largest relative difference of its forward and backward
        statistics (over ranks and statistics) at `step`; by default the first layer-statistics step at
        or after the first divergence (or difference) where a layer differs. The chosen step is in
        `.attrs['step']`; empty when layer statistics were not compared."""
        fwd, bwd = self._quantities.get("layers/forward"), self._quantities.get("layers/backward")
        if fwd is None or bwd is None:
            return pd.DataFrame(columns=["layer", "forward", "backward"])
        if step is None:
            onset = self.first_divergence or self.first_difference
            later = np.flatnonzero((fwd.differs.any(axis=1) | bwd.differs.any(axis=1))
                                   & (fwd.steps >= (onset.step if onset else 0)))
            step = int(fwd.steps[later[0]]) if len(later) else int(fwd.steps[-1])
        i = int(np.searchsorted(fwd.steps, step))
        if i >= len(fwd.steps) or fwd.steps[i] != step:
            raise KeyError(f"no layer statistics at step {step} in both runs (have {fwd.steps.tolist()})")
        frame = pd.DataFrame({"layer": self.run.layer_names,
                              "forward": fwd.per_layer["rel"][i].max(axis=0),
                              "backward": bwd.per_layer["rel"][i].max(axis=0)})
        frame.attrs["step"] = step
        return frame


def compare(run, reference, rtol=None, atol=None):
    """Compares `run` with `reference` (Run objects or paths); tolerances default to the precision's."""
    return Comparison(run, reference, rtol, atol)


def align(runs, name, rank=None):
    """DataFrame indexed by step, one column per run: a dataset's value (mean over ranks, or one rank)."""
    columns = {}
    for run in runs:
        lab = run[name]
        values = lab.values.astype(np.float64)
        if values.ndim > 1:
            values = values[:, rank] if rank is not None else values.reshape(len(values), -1).mean(axis=1)
        label, k = run.name, 2
        while label in columns:
            label, k = f"{run.name} ({k})", k + 1
        columns[label] = pd.Series(values, index=lab.coords["step"])
    frame = pd.DataFrame(columns)
    frame.index.name = "step"
    return frame
