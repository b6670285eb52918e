#!/usr/bin/python3
"""Runs every fault scenario of inputs/faults/ at W=4 next to the same scenario without its fault line,
and draws one PNG per fault for docs/faults.md: per-rank loss, per-rank local gradient norm, replica
agreement (param_hash vs rank 0) and per-rank eval loss, with the baseline dashed and the fault window
shaded.

usage: tools/make-fault-figures.py [--divsim build/divsim] [--out docs/figures] [--only NAME ...] [--runs DIR]
--runs DIR keeps the runs in DIR and, where DIR already holds them, only redraws.
"""
import argparse
import glob
import os
import re
import subprocess
import tempfile

import h5py
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def run(divsim, ini, out, ranks=4):
    if not os.path.exists(out):
        cmd = ["mpiexec", "-n", str(ranks), divsim, "--quiet", "--config", ini, f"--run.out={out}", "--run.overwrite=true"]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stderr}")
    with h5py.File(out, "r") as f:
        d = {k: f[k][()] for k in ["train/loss", "train/global_loss", "train/grad_norm_local", "train/param_hash",
                                    "eval/step", "eval/loss"]}
        d["faults"] = f["faults"][()]
    return d


def window(fault_row, steps):
    start, stop = int(fault_row["start"]), int(fault_row["stop"])
    return start, steps if stop < 0 else min(stop, steps)


def figure(name, f, b, path):
    steps = len(f["train/loss"])
    W = f["train/loss"].shape[1]
    colors = plt.cm.tab10(np.arange(W))
    fig, axes = plt.subplots(2, 3, figsize=(15, 6.5), constrained_layout=True)
    ax = axes[:, :2]
    rel = np.abs(f["train/global_loss"] - b["train/global_loss"]) / np.abs(b["train/global_loss"])
    axes[0, 2].semilogy(np.arange(len(rel)), np.where(rel > 0, rel, np.nan), color="k", lw=0.8)
    axes[0, 2].set(title="|global loss - baseline| / baseline", xlabel="step")
    h = f["train/param_hash"]
    axes[1, 2].plot(np.arange(len(h)), (h != h[:, :1]).sum(axis=1), color="tab:red", drawstyle="steps-post")
    axes[1, 2].set(title="ranks whose replica differs from rank 0", xlabel="step", ylim=(-0.2, h.shape[1] - 0.8))
    x = np.arange(steps)
    for r in range(W):
        ax[0, 0].plot(x, f["train/loss"][:, r], color=colors[r], lw=0.9, label=f"rank {r}")
        ax[0, 0].plot(x, b["train/loss"][:, r], color=colors[r], lw=0.6, ls="--", alpha=0.5)
        ax[0, 1].semilogy(x, np.maximum(f["train/grad_norm_local"][:, r], 1e-12), color=colors[r], lw=0.9)
        ax[0, 1].semilogy(x, np.maximum(b["train/grad_norm_local"][:, r], 1e-12), color=colors[r], lw=0.6, ls="--", alpha=0.5)
        ax[1, 1].plot(f["eval/step"], f["eval/loss"][:, r], color=colors[r], marker="o", ms=3, lw=0.9)
    ax[1, 1].plot(b["eval/step"], b["eval/loss"][:, 0], color="k", ls="--", lw=0.8, label="baseline")
    h = f["train/param_hash"]
    ax[1, 0].imshow((h != h[:, :1]).T, aspect="auto", interpolation="nearest", cmap="Reds", vmin=0, vmax=1,
                    extent=(-0.5, steps - 0.5, W - 0.5, -0.5))
    ax[1, 0].set_yticks(range(W))
    for row in f["faults"]:
        a, z = window(row, steps)
        for axis in (ax[0, 0], ax[0, 1]):
            axis.axvspan(a, z, color="orange", alpha=0.08)
    # A run that blows up (bitflip, loss_scaler_desync) is drawn on a log scale to keep the rest readable.
    for axis, values in ((ax[0, 0], f["train/loss"]), (ax[1, 1], f["eval/loss"])):
        finite = values[np.isfinite(values)]
        if finite.size and finite.max() > 50:
            axis.set_yscale("log")
    ax[0, 0].set(title="per-rank loss (dashed: baseline)", xlabel="step", ylabel="loss")
    ax[0, 1].set(title="per-rank local gradient norm", xlabel="step")
    ax[1, 0].set(title="replica differs from rank 0 (param_hash)", xlabel="step", ylabel="rank")
    ax[1, 1].set(title="per-rank eval loss (own replica)", xlabel="step")
    ax[0, 0].legend(fontsize=7, loc="upper right")
    ax[1, 1].legend(fontsize=7)
    spec = f["faults"][0]["spec"].decode() if len(f["faults"]) else name
    fig.suptitle(f"{name}: {spec}", fontsize=10)
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--divsim", default="build/divsim")
    ap.add_argument("--out", default="docs/figures")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--runs", default="")
    a = ap.parse_args()
    tmp = a.runs or tempfile.mkdtemp(prefix="divsim-figures-")
    os.makedirs(tmp, exist_ok=True)
    os.makedirs(a.out, exist_ok=True)
    for ini in sorted(glob.glob("inputs/faults/*.ini")):
        name = os.path.splitext(os.path.basename(ini))[0]
        if a.only and name not in a.only:
            continue
        base_ini = os.path.join(tmp, f"{name}.base.ini")
        with open(ini) as fh, open(base_ini, "w") as out:
            out.write(re.sub(r"(?m)^fault\s*=.*$", "", fh.read()))
        f = run(a.divsim, ini, os.path.join(tmp, f"{name}.h5"))
        b = run(a.divsim, base_ini, os.path.join(tmp, f"{name}.base.h5"))
        figure(name, f, b, os.path.join(a.out, f"{name}.png"))
        print(f"{name}: {os.path.join(a.out, name + '.png')}")


if __name__ == "__main__":
    main()
