"""Detectors: what the trajectories of one run (and, optionally, its comparison with a reference) say,
as Findings keyed by the rows of evidence.WEIGHTS.

Within one run (seed 000 §1.2's checklist, seed 002 §3.2): replica consistency from
/train/param_hash, the gradient each replica applied, learning-rate and loss-scale agreement, the
learning rate against the configured schedule (/schedule/lr), shard overlap from /train/samples, BatchNorm running
statistics (eval results that differ between replicas with equal parameters), per-rank loss and
grad-norm outliers, spikes and non-finite values, the seed-002 sawtooth, and generic events. Against a
reference: the phase, layer and size of the first difference (compare.py) and a differing world size
(diagnose.py reports a reference of another configuration as such and scores none of these).

Every within-run check that compares ranks is exact: a healthy divsim run is bitwise consistent across
replicas, so equal values are the only healthy outcome and these checks cannot fire on a clean run.
The few statistical checks (outliers, spikes, sawtooth) use strict thresholds. Detectors read only
trajectories, the config and events: a blind Run has already removed what names a fault. What a
finding means for the causes is evidence.py's business, not this module's.
"""
import warnings
from dataclasses import dataclass, field

import numpy as np

from .catalog import FAULTS

SPLIT_LAST_BITS = 1e-7   # relative param-norm spread of replicas that differ only in the last bits
GRAD_LAST_BITS = 1e-5    # relative spread of applied gradient norms from summation order alone
SPIKE_RATIO = 10.0       # a gradient norm this many times its neighbours and the other ranks
OUTLIER_T = 6.0          # t statistic of a per-rank offset (clean runs: below 3 over 8 ranks)
OUTLIER_MIN_SHIFT = 0.02  # and a mean log-ratio of at least 2 %
NOISE = 1e-4             # relative loss difference below which divergence is numerical noise
EVAL_PATH_SPREAD = 1e-4  # relative eval-loss spread of equal replicas on different matmul precisions
# A vector whose every element is rounded to bf16 (or the finer fp16) moves by at most 2^-9 of its norm;
# a gradient norm's first difference from the reference within 2^-8 is a rounding, not a corruption.
BACKWARD_ROUNDING = 2.0 ** -8


@dataclass
class Finding:
    """One piece of evidence: `key` names a row of evidence.WEIGHTS."""
    key: str
    step: object            # first step where it shows (None for properties of the whole run)
    ranks: list
    text: str
    strength: float = 1.0   # in (0, 1]; multiplies the evidence weights
    data: dict = field(default_factory=dict)

    def to_dict(self):
        return {"key": self.key, "step": self.step, "ranks": self.ranks, "text": self.text,
                "strength": round(self.strength, 3), "data": self.data}


def rank_groups(row):
    """Ranks grouped by equal value (NaN equals NaN), the largest group first (ties: the group holding the
    lowest rank)."""
    groups = {}
    for rank, value in enumerate(row.tolist()):
        groups.setdefault("nan" if value != value else value, []).append(rank)
    return sorted(groups.values(), key=lambda g: (-len(g), g[0]))


def _disagree_rows(values):
    """Row indices where not every rank holds the same value (NaN equals NaN)."""
    first = values[:, :1]
    same = values == first
    if values.dtype.kind == "f":
        same |= np.isnan(values) & np.isnan(first)
    return np.flatnonzero(~same.all(axis=1))


def _odd_ranks(row):
    groups = rank_groups(row)
    return sorted(r for g in groups[1:] for r in g), groups


# --- within one run ------------------------------------------------------------------------------

def replica_findings(run):
    """Replica consistency: where /train/param_hash first splits, which ranks, how far apart."""
    h, steps = run.values("train/param_hash"), run.steps
    if run.world_size < 2 or not len(steps):
        return []
    rows = _disagree_rows(h)
    out = []
    if len(rows):
        i = rows[0]
        s = int(steps[i])
        odd, groups = _odd_ranks(h[i])
        pn = run.values("train/param_norm")[i]
        spread = float((pn.max() - pn.min()) / max(np.median(np.abs(pn)), 1e-300))
        text = (f"replicas split at step {s}: parameter hashes form groups {groups}; "
                f"parameter norms differ by {spread:.1e} (relative)")
        out.append(Finding("replicas_split", s, odd, text, data={"groups": groups, "param_norm_spread": spread}))
        if s == 0:
            out.append(Finding("split_at_step0", s, odd, "replicas differ already after the first step"))
        if spread <= SPLIT_LAST_BITS:
            out.append(Finding("split_last_bits", s, odd,
                               f"the split is in the last bits only (parameter norms within {spread:.0e})"))
        size = _update_size_finding(run, i, odd, groups)
        if size:
            out.append(size)
        inputs = [run.values(n)[i] for n in ("train/grad_norm", "train/lr", "train/loss_scale") if run.has(n)]
        if all(len(rank_groups(v)) == 1 for v in inputs):
            out.append(Finding("split_same_update_inputs", s, odd,
                               f"at step {s} every replica applied the same gradient norm, learning rate and "
                               "loss scale, yet their parameters differ afterwards"))
    # A rank that did not update while the others did (a skipped step on that rank alone).
    unchanged = h[1:] == h[:-1]
    partial = np.flatnonzero(unchanged.any(axis=1) & ~unchanged.all(axis=1))
    if len(partial):
        i = partial[0] + 1
        ranks = np.flatnonzero(unchanged[partial[0]]).tolist()
        # With dynamic loss scaling a skipped step is an overflow decision; without it, a missed update.
        amp = run.config.get("precision.amp", "none") != "none"
        out.append(Finding("rank_skipped_update" if amp else "rank_missed_update", int(steps[i]), ranks,
                           f"at step {int(steps[i])} ranks {ranks} kept their parameters while the others "
                           f"updated ({len(partial)} such steps{'' if amp else '; no loss scaling in this run'})",
                           data={"steps": steps[partial + 1].tolist()}))
    return out


def _update_size_finding(run, i, odd, groups):
    """How big the split step's update was on the odd ranks against the others, measured by the change
    of the parameter norm: an extra update roughly doubles it, a lost momentum shrinks it 3x or more.
    With two ranks the odd one is unknown and only the ratio speaks."""
    if i == 0 or (run.has("train/lr") and len(rank_groups(run.values("train/lr")[i])) > 1):
        return None  # the first step has no "before"; different learning rates explain any size
    pn = run.values("train/param_norm")
    delta = np.abs(pn[i] - pn[i - 1])
    if len(groups) == 2 and len(groups[1]) == len(groups[0]) == 1:  # W=2: which one is odd is unknown
        lo, hi = sorted(delta)
        ratio = hi / lo if lo > 0 else np.inf
        larger = 1.5 <= ratio < 2.5
        smaller = ratio >= 2.5 and lo > 0
    else:
        major = np.median(delta[groups[0]])
        ratio = np.median(delta[odd]) / major if major > 0 else np.inf
        larger, smaller = ratio >= 1.5, 0 < ratio <= 0.5
    s = int(run.steps[i])
    if larger:
        return Finding("split_update_larger", s, odd, f"at step {s} the parting replicas' parameters moved "
                       f"{ratio:.2g}x as far as the others': an extra update")
    if smaller:
        return Finding("split_update_smaller", s, odd, f"at step {s} the parting replicas' update was much smaller "
                       f"than the others' ({ratio:.2g}x): as without momentum or at a restarted learning rate")
    return None


def applied_gradient_findings(run):
    """The gradient each replica applied (after reduction and clipping) must be the same everywhere."""
    if run.world_size < 2 or not run.has("train/grad_norm"):
        return []
    g, gl, steps = run.values("train/grad_norm"), run.values("train/grad_norm_local"), run.steps
    rows = _disagree_rows(g)
    if not len(rows):
        return []
    i = rows[0]
    s = int(steps[i])
    odd, groups = _odd_ranks(g[i])
    finite = g[i][np.isfinite(g[i])]
    spread = float((finite.max() - finite.min()) / max(np.median(np.abs(finite)), 1e-300)) if len(finite) else np.inf
    out = [Finding("applied_gradient_disagree", s, odd,
                   f"at step {s} the replicas applied gradients of different norms ({g[i].min():.6g}.."
                   f"{g[i].max():.6g}) on {len(rows)} steps", data={"steps": steps[rows].tolist()[:20]})]
    # A rank left out of the reduction applies its own gradient (possibly still divided by W), or the
    # last reduced gradient it received (the majority's norm of the step before).
    own, stale = set(), set()
    for j in rows:
        for r in range(run.world_size):
            if np.isclose(g[j, r], [gl[j, r], gl[j, r] / run.world_size], rtol=1e-6, atol=0).any():
                own.add(r)
            elif j > 0 and np.isclose(g[j, r], g[j - 1, rank_groups(g[j - 1])[0][0]], rtol=1e-12, atol=0):
                stale.add(r)
    if own or stale:
        what = (f"ranks {sorted(own)} applied their own local gradient (applied norm = local norm)" if own else
                f"ranks {sorted(stale)} applied the previous step's reduced gradient")
        out.append(Finding("applied_own_gradient", s, sorted(own | stale),
                           f"{what} instead of the all-reduced one: they were left out of the reduction"))
    if spread <= GRAD_LAST_BITS:
        out.append(Finding("applied_gradient_last_bits", s, odd,
                           f"the applied gradient norms differ only by {spread:.1e} (summation order)"))
    elif not np.isfinite(spread) or finite.max() > SPIKE_RATIO * max(finite.min(), 1e-300):
        out.append(Finding("applied_gradient_spike", s, odd,
                           f"at step {s} one applied gradient is {spread:.1e} times larger than another"))
    if len(rows) >= 2:
        values = g[rows]
        # Clipping rescales to the threshold, max_norm / (norm + 1e-6) as PyTorch, in float32.
        constant = np.isclose(values, values[:1], rtol=1e-4, atol=0).all(axis=0)
        if constant.any() and not constant.all():
            ranks = np.flatnonzero(constant).tolist()
            out.append(Finding("clip_threshold_mismatch", s, np.flatnonzero(~constant).tolist(),
                               f"ranks {ranks} applied the same gradient norm {values[0, ranks[0]]:.6g} at every step "
                               "where the replicas disagree, the others did not: they clip at different thresholds"))
    return out


def lr_findings(run):
    """Learning rates must agree across ranks and follow the configured schedule."""
    if not run.has("train/lr") or not len(run.steps):
        return []
    lr, steps, out = run.values("train/lr"), run.steps, []
    rows = _disagree_rows(lr)
    if len(rows) and run.world_size > 1:
        odd, groups = _odd_ranks(lr[rows[0]])
        s = int(steps[rows[0]])
        out.append(Finding("lr_disagree", s, odd, f"at step {s} the ranks used different learning rates "
                           f"({lr[rows[0]].min():.6g}..{lr[rows[0]].max():.6g}) on {len(rows)} steps"))
    # /schedule/lr is the configured schedule of every step, written by the code the optimizers use.
    table = run.values("schedule/lr") if run.has("schedule/lr") else np.empty(0)
    if not len(table) or steps.max() >= len(table):
        return out
    expected = table[steps]
    off = ~np.isclose(lr, expected[:, None], rtol=1e-9, atol=1e-15)
    if not off.any():
        return out
    cells = np.argwhere(off)
    i, s = cells[0][0], int(steps[cells[0][0]])
    ranks = np.flatnonzero(off[i]).tolist()
    value = lr[i, ranks[0]]
    # Which step of the schedule gives this lr? Earlier: it restarted; later: it is stepped too often.
    matches = np.flatnonzero(np.isclose(table, value, rtol=1e-9, atol=1e-15))
    detail = f"from step {s} ranks {ranks} used lr {value:.6g} where the schedule gives {expected[i]:.6g}"
    if len(matches):
        k = int(matches[np.argmin(np.abs(matches - s))])
        detail += f", its value at step {k}"
    if len(matches) and k > s:
        out.append(Finding("lr_ahead_of_schedule", s, ranks, detail + ": the schedule runs ahead (stepped too often)"))
    elif len(matches) and k < s:
        out.append(Finding("lr_behind_schedule", s, ranks, detail + ": the schedule jumped back (restarted)"))
    else:
        out.append(Finding("lr_off_schedule", s, ranks, detail))
    return out


def loss_scale_findings(run):
    if run.world_size < 2 or not run.has("train/loss_scale"):
        return []
    ls, rows = run.values("train/loss_scale"), _disagree_rows(run.values("train/loss_scale"))
    if not len(rows):
        return []
    s = int(run.steps[rows[0]])
    odd, _ = _odd_ranks(ls[rows[0]])
    return [Finding("loss_scale_disagree", s, odd, f"at step {s} the ranks used different loss scales "
                    f"({ls[rows[0]].min():g}..{ls[rows[0]].max():g}) on {len(rows)} steps")]


def sample_findings(run):
    """Shard checks on /train/samples (seed 000 §2.3, §4.1): within a step and within an epoch every
    sample is consumed once; with shuffling, a rank's shard changes from epoch to epoch."""
    if not run.has("train/samples") or not len(run.steps):
        return []
    x, steps, w = run.values("train/samples"), run.steps, run.world_size
    out = []
    flat = np.sort(x.reshape(len(x), -1), axis=1)
    repeats = (flat[:, 1:] == flat[:, :-1]).sum(axis=1)
    rows = np.flatnonzero(repeats)
    if len(rows):
        i = rows[0]
        counts = {}
        for r in range(w):
            for v in x[i, r]:
                counts.setdefault(int(v), set()).add(r)
        ranks = sorted({r for owners in counts.values() if len(owners) > 1 for r in owners})
        if not ranks:  # repeats inside one rank's own batch
            ranks = [r for r in range(w) if len(np.unique(x[i, r])) < x.shape[2]]
        frac = float(repeats.sum() / flat.size)
        out.append(Finding("sample_overlap", int(steps[i]), ranks,
                           f"at step {int(steps[i])} ranks {ranks} consumed the same samples; {len(rows)} of "
                           f"{len(steps)} steps hold a sample twice ({frac:.1%} of all draws)",
                           data={"steps_with_overlap": len(rows), "fraction": frac}))
    if w > 1:
        ordered = np.sort(x, axis=2)
        for i in range(len(x)):
            same = [(a, b) for a in range(w) for b in range(a + 1, w) if np.array_equal(ordered[i, a], ordered[i, b])]
            if same:
                ranks = sorted({r for pair in same for r in pair})
                out.append(Finding("duplicate_batch", int(steps[i]), ranks,
                                   f"at step {int(steps[i])} ranks {same[0]} consumed identical batches"))
                break
    if w > 1 and run.config.get("sampler.shuffle", True):
        # A shuffled sampler hands a rank random indices; a shard cut before shuffling is the rank's
        # residue class (rank, rank + W, ...). By chance a batch is one with probability W^-B: ask for
        # consecutive such batches worth 40 bits.
        need = int(np.ceil(40 / (x.shape[2] * np.log2(w))))
        strided = (x % w == np.arange(w)[None, :, None]).all(axis=2)  # [step, rank]
        hits = []
        for r in range(w):
            runs_ = np.convolve(strided[:, r], np.ones(need, dtype=int), mode="valid") if len(x) >= need else []
            start = np.flatnonzero(np.asarray(runs_) == need)
            if len(start):
                hits.append((int(steps[start[0]]), r))
        if hits:
            s, ranks = min(hits)[0], sorted(r for _, r in hits)
            out.append(Finding("strided_shard", s, ranks,
                               f"from step {s} ranks {ranks} read only indices rank + k*{w}: their shard was cut "
                               "before shuffling (shuffle after shard)"))
    epoch = run.steps_per_epoch
    if epoch and run.config.get("batch.drop_last", True):
        out.extend(_epoch_findings(run, x, steps, epoch))
    return out


def _epoch_findings(run, x, steps, epoch):
    """Within an epoch no sample comes twice. A rank re-reading its own samples has a shard of the wrong
    size (num_replicas); one reading another rank's has its own permutation or shard."""
    out, w = [], run.world_size
    first = {}  # key -> (step, rank, epoch, earlier rank) of the first repeat of each kind
    for e in np.unique(steps // epoch):
        seen = {}
        for i in np.flatnonzero(steps // epoch == e):
            for r in range(w):
                for v in x[i, r].tolist():
                    if v in seen and seen[v][0] != i:
                        key = "epoch_repeats_own" if seen[v][1] == r else "epoch_repeats_other"
                        first.setdefault(key, (int(steps[i]), r, int(e), seen[v][1]))
                    seen.setdefault(v, (i, r))
    if "epoch_repeats_other" in first:  # a rank reading foreign samples re-reads its own ones too
        first.pop("epoch_repeats_own", None)
    for key, (s, r, e, earlier) in sorted(first.items(), key=lambda kv: kv[1][0]):
        what = "a sample it had read before" if key == "epoch_repeats_own" else f"a sample rank {earlier} had read"
        out.append(Finding(key, s, [r], f"at step {s} rank {r} consumed {what} in epoch {e} (an epoch is {epoch} "
                           "steps): the shards do not partition the dataset"))
    if w > 1 and run.config.get("sampler.shuffle", True):
        e0, e1 = steps < epoch, (steps >= epoch) & (steps < 2 * epoch)
        if e0.any() and e1.any():
            kept = []
            for r in range(w):
                later = x[e1, r].reshape(-1)
                if len(later) >= 32 and np.isin(later, x[e0, r].reshape(-1)).mean() >= 0.9:
                    kept.append(r)
            if kept:
                s = int(steps[e1][0])
                out.append(Finding("shard_not_reshuffled", s, kept,
                                   f"in epoch 1 ranks {kept} drew (almost) only samples of their own epoch-0 shard: "
                                   "the data were sharded before shuffling"))
    return out


def identical_loss_findings(run):
    """Two ranks with bitwise-equal losses while in sync computed the same batch (duplicate shards)."""
    if run.world_size < 2 or not run.has("train/loss"):
        return []
    loss, h, steps = run.values("train/loss"), run.values("train/param_hash"), run.steps
    for i in range(len(loss)):
        if i > 0 and len(rank_groups(h[i - 1])) > 1:
            break
        groups = [g for g in rank_groups(loss[i]) if len(g) > 1 and np.isfinite(loss[i, g[0]])]
        if groups:
            return [Finding("identical_rank_losses", int(steps[i]), groups[0],
                            f"at step {int(steps[i])} ranks {groups[0]} report bitwise-identical losses: they "
                            "trained on the same samples")]
    return []


def eval_findings(run):
    """Replicas with equal parameters but different eval results: either their buffers differ (BN
    running statistics; large spread) or they evaluate on another numeric path (tiny spread, or a model
    without BatchNorm)."""
    if run.world_size < 2 or not run.has("eval/loss"):
        return []
    ev, ev_steps = run.values("eval/loss"), run["eval/loss"].coords["step"]
    h, steps = run.values("train/param_hash"), run.steps
    for e, s in enumerate(ev_steps.tolist()):
        i = np.flatnonzero(steps == s)
        if not len(i) or len(rank_groups(h[i[0]])) > 1 or len(rank_groups(ev[e])) == 1:
            continue
        odd, _ = _odd_ranks(ev[e])
        spread = float((ev[e].max() - ev[e].min()) / max(np.median(np.abs(ev[e])), 1e-300))
        if run.config.get("model.batchnorm", False) and spread > EVAL_PATH_SPREAD:
            return [Finding("eval_spread_in_sync", int(s), odd,
                            f"after step {s} the replicas have identical parameters but eval losses spread by "
                            f"{spread:.2g} (relative): their BatchNorm running statistics differ",
                            data={"spread": spread})]
        return [Finding("eval_spread_numeric", int(s), odd,
                        f"after step {s} the replicas have identical parameters but eval losses spread by "
                        f"{spread:.2g} (relative)" + ("" if run.config.get("model.batchnorm", False) else
                                                      ", and the model has no BatchNorm") +
                        ": ranks compute on different numeric paths", data={"spread": spread})]
    return []


def _sync_prefix(run):
    """Number of leading steps whose replicas entered the step in sync."""
    h = run.values("train/param_hash")
    split = _disagree_rows(h)
    return len(h) if not len(split) else int(split[0]) + 1


def outlier_findings(run):
    """Seed 002 §3.2: a rank whose loss or gradient norm is systematically off the others' while the
    replicas are in sync (so only its data or its loss can explain it): a t-test of its log-ratio to
    the other ranks' median over the steps."""
    w = run.world_size
    if w < 2:
        return []
    n = _sync_prefix(run)
    out = []
    for name, key in (("train/loss", "rank_loss_offset"), ("train/grad_norm_local", "rank_grad_norm_offset")):
        if not run.has(name):
            continue
        x = run.values(name)[:n].astype(float)
        with np.errstate(divide="ignore", invalid="ignore"):
            logx = np.log(x)
        if w == 2:
            candidates = {0: logx[:, 0] - logx[:, 1]}
        else:
            candidates = {r: logx[:, r] - np.median(np.delete(logx, r, axis=1), axis=1) for r in range(w)}
        hits = []
        for r, d in candidates.items():
            d = d[np.isfinite(d)]
            if len(d) < 8 or d.std(ddof=1) == 0:
                continue
            shift = float(d.mean())
            t = shift / (d.std(ddof=1) / np.sqrt(len(d)))
            if abs(t) >= OUTLIER_T and abs(shift) >= OUTLIER_MIN_SHIFT:
                hits.append((r, t, shift))
        if hits:
            ranks = [0, 1] if w == 2 else [r for r, _, _ in hits]
            r, t, shift = max(hits, key=lambda h: abs(h[1]))
            what = "ranks 0 and 1 differ" if w == 2 else f"rank {r} is"
            out.append(Finding(key, None, ranks,
                               f"{name}: {what} systematically ({np.exp(shift):.3g}x the others, t = {t:.1f} "
                               f"over {n} steps in sync)", data={"ratio": float(np.exp(shift)), "t": t}))
    return out


def spike_findings(run):
    """Non-finite values, and gradient norms far above both the other ranks and the rank's own past."""
    out = []
    for name in ("train/loss", "train/grad_norm_local", "train/grad_norm", "train/param_norm"):
        if not run.has(name):
            continue
        bad = np.argwhere(~np.isfinite(run.values(name)))
        if len(bad):
            s = int(run.steps[bad[0][0]])
            ranks = sorted({int(r) for i, r in bad if i == bad[0][0]})
            out.append(Finding("nonfinite", s, ranks, f"{name} is NaN/Inf from step {s} on ranks {ranks}"))
            break
    if not run.has("train/grad_norm_local") or len(run.steps) < 4:
        return out
    g = run.values("train/grad_norm_local").astype(float)
    for i in range(len(g)):
        lo, hi = max(0, i - 3), min(len(g), i + 4)
        near = np.delete(g[lo:hi], i - lo, axis=0)
        near = np.where(np.isfinite(near), near, np.nan)  # a corrupted value may turn later steps NaN
        w = run.world_size
        with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN neighbourhoods: no verdict
            temporal = g[i] / np.nanmedian(near, axis=0)
            others = np.array([g[i, r] / np.median(np.delete(g[i], r)) for r in range(w)]) if w > 1 else temporal
        spike = np.isfinite(g[i]) & (temporal > SPIKE_RATIO) & (others > SPIKE_RATIO)
        if spike.any():
            ranks = np.flatnonzero(spike).tolist()
            s = int(run.steps[i])
            out.append(Finding("grad_norm_spike", s, ranks,
                               f"at step {s} ranks {ranks} computed a gradient {temporal[ranks[0]]:.3g}x their "
                               "recent norm: a corrupted value"))
            break
    return out


def sawtooth_finding(run):
    """Seed 002 §1.1: the loss jumps up and back repeatedly, far beyond its step-to-step noise."""
    if not run.has("train/global_loss") or len(run.steps) < 12:
        return []
    y = run.values("train/global_loss").astype(float)
    pad = np.pad(y, 2, mode="edge")
    med = np.median(np.lib.stride_tricks.sliding_window_view(pad, 5), axis=1)
    resid = y - med
    mad = np.median(np.abs(resid)) or 1e-12
    # A jump to at least twice the local level (seed 002: 0.25 -> 1.56), far outside the noise.
    spikes = np.flatnonzero((resid > 8 * mad) & (resid > np.abs(med)))
    if len(spikes) < 3:
        return []
    gaps = np.diff(spikes)
    period = int(np.median(gaps))
    regular = np.abs(gaps - period).max() <= 1
    steps = run.steps[spikes].tolist()
    text = f"the loss jumps up and back at steps {steps[:8]}" + (f" (every {period} steps)" if regular else "")
    return [Finding("sawtooth", steps[0], [], text, strength=1.0 if regular else 0.5,
                    data={"spike_steps": steps, "period": period if regular else None})]


def event_findings(run):
    """Events the run logged (on a blind run those naming a fault were removed when it was loaded).
    Overflow skips count only where some ranks skipped and others did not: healthy dynamic loss
    scaling decides on the reduced gradient, so every rank skips together."""
    events = run.events
    out = []
    for kind, rows in events.groupby("kind", sort=False) if len(events) else []:
        s, ranks = int(rows["step"].min()), sorted(set(int(r) for r in rows["rank"]))
        named = [f for f in FAULTS if f in kind.lower()]
        text = f"/events: {len(rows)} '{kind}' events from step {s} (ranks {ranks}): {rows['detail'].iloc[0]}"
        if named:
            out.append(Finding("event_names_fault", s, ranks, text, data={"fault": named[0]}))
        elif "overflow" in kind.lower():
            lone = [(int(st), sorted(set(g["rank"]))) for st, g in rows.groupby("step")
                    if -1 not in set(g["rank"]) and len(set(g["rank"])) < run.world_size]
            if lone:
                out.append(Finding("event_overflow_partial", lone[0][0], lone[0][1],
                                   f"/events: at step {lone[0][0]} only ranks {lone[0][1]} skipped for an overflow "
                                   f"({len(lone)} such steps): the ranks disagree on overflows"))
        elif "nonfinite" in kind.lower() or "nan" in kind.lower():
            out.append(Finding("event_nonfinite", s, ranks, text))
    return out


WITHIN_RUN = (replica_findings, applied_gradient_findings, lr_findings, loss_scale_findings, sample_findings,
              identical_loss_findings, eval_findings, outlier_findings, spike_findings, sawtooth_finding,
              event_findings)


def within_run_findings(run):
    """Every within-run detector's findings, in detector order."""
    return [f for detector in WITHIN_RUN for f in detector(run)]


# --- against a reference -------------------------------------------------------------------------

def loss_onset_magnitude(comparison, step):
    """Largest relative loss difference at `step` and the step after (per rank when comparable)."""
    for name in ("train/loss", "train/global_loss"):
        if name in comparison.skipped:
            continue
        rel = comparison.relative(name)
        sel = (rel.coords["step"] >= step) & (rel.coords["step"] <= step + 1)
        if sel.any():
            return float(rel.values[sel].max())
    return None


def reference_findings(comparison):
    """What the first difference from a reference says: its phase, layer and size; a differing world size."""
    d = comparison.first_difference or comparison.first_divergence
    if d is None:
        return []
    out = []
    how = "bitwise" if d.bitwise else f"beyond {comparison.precision} tolerance"
    where = f"step {d.step}, {d.phase} phase ({d.direction} first), ranks {d.ranks or 'all'}" + (
        f", layer {d.layer}" if d.layer else "")
    text = f"against {comparison.reference.name!r} the run first differs ({how}) at {where}: {', '.join(d.quantities)}"
    loss_mag = loss_onset_magnitude(comparison, d.step)
    first_linear = comparison.run.layer_names[0] if comparison.run.layer_names else None
    cfg = comparison.run.config
    key = {"data": "ref_data_differs", "backward": "ref_backward_first", "reduce": "ref_reduce_first",
           "optimizer": "ref_optimizer_first", "update": "ref_update_first", "eval": "ref_eval_only"}.get(d.phase)
    if d.phase == "backward" and not d.bitwise:  # forward differences may hide below the tolerance
        key = "ref_backward_tolerance"
    elif d.phase == "backward" and d.magnitude is not None and 0 < d.magnitude <= BACKWARD_ROUNDING:
        key = "ref_backward_rounding"
    if d.phase in ("forward", "loss"):
        if d.direction == "loss":
            key = "ref_loss_first"
        elif (loss_mag if loss_mag is not None else d.magnitude) <= 1e-3:
            key = "ref_forward_small"
        elif d.layer is not None and d.layer != first_linear:
            key = "ref_forward_later_layer"
        elif not d.layer_recorded and not (cfg.get("model.dropout", 0) or cfg.get("data.augment", False)):
            key = "ref_loss_changed"  # no random mask or augmentation that could change the forward
        else:
            key = "ref_forward_large"
    out.append(Finding(key, d.step, d.ranks, text, data=d.to_dict()))
    if loss_mag and loss_mag <= SPLIT_LAST_BITS and d.phase not in ("data", "eval"):
        out.append(Finding("ref_onset_last_bits", d.step, d.ranks,
                           f"the losses differ only in the last bits ({loss_mag:.1e}) where the runs part"))
    if not comparison.same_world_size and cfg.get("dist.reduce") != "deterministic":
        out.append(Finding("ref_world_size_differs", None, [],
                           f"world sizes differ ({comparison.run.world_size} vs {comparison.reference.world_size}) "
                           f"with dist.reduce = {comparison.run.config.get('dist.reduce')}: the summation order "
                           "of the gradient changes with the world size"))
    return out
