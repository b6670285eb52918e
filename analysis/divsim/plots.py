"""Plots of runs, comparisons and sweeps with matplotlib; each function returns its Figure.

Per-rank loss and gradient-norm curves with the fault windows shaded, the replica-divergence heat map
(step x rank), the relative difference over steps and per layer at the first divergent step (seed 000
§3.4), the sample-overlap matrix between ranks, and a sweep view (a metric against world size, one
line per fault). They use whatever matplotlib backend is active (set MPLBACKEND=Agg for files only)
and compute nothing a Run, Comparison or Sweep does not already give.
"""
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import LogNorm

from .detectors import rank_groups

_FLOOR = 1e-17  # shown for replicas that differ in the last bits only (hash differs, norms equal)


def _axes(ax, **fig_kw):
    if ax is None:
        fig, ax = plt.subplots(**fig_kw)
        return fig, ax
    return ax.figure, ax


def fault_windows(run):
    """[(name, start, stop, every)] of the run's configured faults ([] when loaded blind)."""
    if run.blind or not len(run.steps):
        return []
    table = run.faults
    last = int(run.steps[-1]) + 1
    return [(str(f["name"]), int(f["start"]), int(f["stop"]) if f["stop"] >= 0 else last, max(1, int(f["every"])))
            for _, f in table.iterrows()]


def shade_faults(ax, run):
    """Shades each fault's active steps on a step axis and marks the steps of its events."""
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, (name, start, stop, every) in enumerate(fault_windows(run)):
        color = colors[(k + 3) % len(colors)]
        if every == 1:
            ax.axvspan(start - 0.5, stop - 0.5, color=color, alpha=0.15, label=f"fault {name}")
        else:
            for j, s in enumerate(range(start, stop, every)):
                ax.axvspan(s - 0.5, s + 0.5, color=color, alpha=0.25, label=f"fault {name}" if j == 0 else None)
    events = run.events
    for s in sorted(set(events["step"])) if len(events) else []:
        ax.axvline(s, color="0.3", lw=0.6, ls=":")


def plot_curves(run, name="train/loss", ax=None, logy=False, shade=True):
    """One line per rank of a step x rank dataset (or one line for a per-step dataset)."""
    fig, ax = _axes(ax, figsize=(8, 3.5))
    lab = run[name]
    steps = lab.coords["step"]
    if lab.ndim == 1:
        ax.plot(steps, lab.values, color="k", lw=1.2, label=lab.name)
    else:
        for r in range(lab.shape[1]):
            ax.plot(steps, lab.values[:, r], lw=1, label=f"rank {r}")
    if shade:
        shade_faults(ax, run)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel(lab.name)
    ax.set_title(f"{run.name}: {name}")
    if lab.ndim == 1 or lab.shape[1] <= 8:
        ax.legend(fontsize="small", ncol=2)
    return fig


def plot_training(run, shade=True):
    """Per-rank loss and local gradient norm, stacked, fault windows shaded."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    plot_curves(run, "train/loss", ax=top, shade=shade)
    plot_curves(run, "train/grad_norm_local", ax=bottom, shade=shade, logy=True)
    top.set_xlabel("")
    bottom.set_title("")
    if bottom.get_legend():
        bottom.get_legend().remove()
    fig.tight_layout()
    return fig


def replica_distance(run):
    """[step, rank] relative distance of each replica's parameter norm from rank 0's; NaN where the
    replica is bitwise equal to rank 0, _FLOOR where only the hash shows it differs."""
    h = run.values("train/param_hash")
    pn = run.values("train/param_norm").astype(float)
    dist = np.abs(pn - pn[:, :1]) / np.maximum(np.abs(pn[:, :1]), 1e-300)
    dist = np.where(h == h[:, :1], np.nan, np.maximum(dist, _FLOOR))
    return dist


def plot_replica_divergence(run, ax=None):
    """Heat map step x rank: how far each replica's parameters are from rank 0's (blank = bitwise equal)."""
    fig, ax = _axes(ax, figsize=(8, 0.6 * run.world_size + 1.6))
    dist = replica_distance(run)
    steps = run.steps
    extent = (steps[0] - 0.5, steps[-1] + 0.5, run.world_size - 0.5, -0.5) if len(steps) else None
    ax.set_facecolor("0.93")
    if np.isfinite(dist).any():
        vmax = max(np.nanmax(dist), _FLOOR * 10)
        image = ax.imshow(dist.T, aspect="auto", interpolation="nearest", extent=extent, cmap="magma_r",
                          norm=LogNorm(vmin=_FLOOR, vmax=vmax))
        fig.colorbar(image, ax=ax, label="|param norm - rank 0's| / rank 0's")
        split = next((i for i in range(len(steps)) if len(rank_groups(run.values("train/param_hash")[i])) > 1), None)
        if split is not None:
            ax.axvline(steps[split] - 0.5, color="tab:blue", lw=1, ls="--", label=f"split at step {steps[split]}")
            ax.legend(loc="upper left", fontsize="small")
        ax.set_title(f"{run.name}: replica divergence from rank 0")
    else:
        ax.imshow(np.zeros((run.world_size, max(len(steps), 1))), aspect="auto", extent=extent, cmap="Greys",
                  vmin=0, vmax=10)
        ax.set_title(f"{run.name}: all replicas bitwise in sync")
    ax.set_xlabel("step")
    ax.set_ylabel("rank")
    ax.set_yticks(range(run.world_size))
    return fig


def plot_relative_difference(comparison, names=("train/global_loss", "train/grad_norm", "train/param_norm"),
                             ax=None):
    """Largest relative difference from the reference over steps, log scale, tolerance marked."""
    fig, ax = _axes(ax, figsize=(8, 3.5))
    for name in names:
        if name in comparison.skipped:
            continue
        rel = comparison.relative(name)
        values = np.where(rel.values.max(axis=1) > 0, rel.values.max(axis=1), np.nan)
        ax.plot(rel.coords["step"], values, marker=".", lw=1, label=name)
    ax.axhline(comparison.rtol, color="0.4", ls="--", lw=1, label=f"{comparison.precision} rtol")
    d = comparison.first_difference or comparison.first_divergence
    if d is not None:
        ax.axvline(d.step, color="tab:red", lw=1, ls=":", label=f"first difference (step {d.step})")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("relative difference")
    ax.set_title(f"{comparison.run.name} vs {comparison.reference.name}")
    ax.legend(fontsize="small")
    return fig


def plot_layer_divergence(comparison, step=None, ax=None):
    """Per-layer relative difference of forward and backward statistics at one step (seed 000 §3.4):
    by default the first layer-statistics step where the runs differ."""
    profile = comparison.layer_profile(step)
    if profile.empty:
        raise ValueError("layer statistics were not compared (not recorded in both runs, or world sizes differ)")
    fig, ax = _axes(ax, figsize=(8, 3.5))
    x = np.arange(len(profile))
    for offset, column, color in ((-0.2, "forward", "tab:blue"), (0.2, "backward", "tab:orange")):
        values = np.maximum(profile[column].to_numpy(), _FLOOR)
        ax.bar(x + offset, values, width=0.4, color=color, label=column)
    ax.axhline(comparison.rtol, color="0.4", ls="--", lw=1, label=f"{comparison.precision} rtol")
    ax.set_yscale("log")
    ax.set_ylim(bottom=_FLOOR)
    ax.set_xticks(x, profile["layer"])
    ax.set_ylabel("relative difference")
    ax.set_title(f"per-layer difference at step {profile.attrs['step']}: "
                 f"{comparison.run.name} vs {comparison.reference.name}")
    ax.legend(fontsize="small")
    return fig


def sample_overlap(run, steps=None):
    """[rank, rank] number of samples both ranks consumed over `steps` (default: the first epoch, or
    all recorded steps); the diagonal counts each rank's distinct samples."""
    if not run.has("train/samples"):
        raise ValueError(f"{run.path} has no /train/samples (record them with record.samples=true)")
    x = run.values("train/samples")
    all_steps = run.steps
    if steps is None:
        epoch = run.steps_per_epoch
        steps = all_steps[all_steps < epoch] if epoch else all_steps
    chosen = np.isin(all_steps, steps)
    sets = [np.unique(x[chosen, r]) for r in range(run.world_size)]
    w = run.world_size
    return np.array([[len(np.intersect1d(sets[a], sets[b], assume_unique=True)) for b in range(w)] for a in range(w)])


def plot_sample_overlap(run, steps=None, ax=None):
    """Matrix of samples shared between ranks (off-diagonal must be 0 within an epoch)."""
    m = sample_overlap(run, steps)
    fig, ax = _axes(ax, figsize=(1.0 * len(m) + 2.5, 0.9 * len(m) + 1.8))
    off = m.astype(float)
    np.fill_diagonal(off, np.nan)
    vmax = max(1, np.nanmax(off) if len(m) > 1 else 1)
    ax.imshow(off, cmap="Reds", vmin=0, vmax=vmax)
    for a in range(len(m)):
        for b in range(len(m)):
            color = "0.5" if a == b else ("w" if m[a, b] > vmax / 2 else "k")
            ax.text(b, a, str(m[a, b]), ha="center", va="center", fontsize="small", color=color)
    ax.set_xticks(range(len(m)))
    ax.set_yticks(range(len(m)))
    ax.set_xlabel("rank")
    ax.set_ylabel("rank")
    epoch = run.steps_per_epoch
    ax.set_title(f"{run.name}: shared samples" + (f"\n(first epoch, {epoch} steps)" if steps is None and epoch else ""))
    fig.tight_layout()
    return fig


def plot_sweep(sweep, metric="final_eval_loss", x="world_size", hue="fault", ax=None):
    """A sweep's summary metric against `x`, one line per `hue` value (columns of Sweep.table(); a
    Sweep or such a table). A non-numeric `x` (run name, fault) gives grouped bars instead."""
    table = sweep.table() if hasattr(sweep, "table") else sweep
    for column in (metric, x, hue):
        if column not in table:
            raise KeyError(f"no column {column!r} in the sweep table (columns: {', '.join(table.columns)})")
    fig, ax = _axes(ax, figsize=(7, 4))
    groups = list(table.groupby(hue, sort=True))
    if table[x].dtype.kind in "iuf":
        for label, group in groups:
            series = group.groupby(x, sort=True)[metric].mean()
            ax.plot(series.index, series.values, marker="o", label=f"{hue} {label}")
    else:
        categories = list(dict.fromkeys(table[x]))
        width = 0.8 / len(groups)
        for k, (label, group) in enumerate(groups):
            series = group.groupby(x)[metric].mean().reindex(categories)
            ax.bar(np.arange(len(categories)) + (k - (len(groups) - 1) / 2) * width, series.values, width=width,
                   label=f"{hue} {label}")
        ax.set_xticks(range(len(categories)), categories, rotation=30, ha="right")
    ax.set_xlabel(x)
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} by {x}")
    ax.legend(fontsize="small")
    fig.tight_layout()
    return fig
