#!/usr/bin/python3
"""Recording overhead: divsim's steps/s with the default recording against recording next to nothing.

Defaults: the per-step trajectory (/train/*), layer statistics every 10 steps, a flush every 100 steps.
Minimum: record.layers_every=0, record.flush_every=100000 (one write at the end), no /train/samples
(the default too). The per-step rows themselves (losses, norms, parameter hashes) are part of every
run and are in both figures. Default model (784-256-128-10) and batch (256); W logical ranks on P
processes per layout. Every point is run --repeats times, interleaved. The overhead is the median over
the repeats of the ratio within each adjacent pair of runs (a few seconds apart, so a drift of the
machine's speed cancels), with the ratio of the fastest runs beside it: the difference measured is a
few percent, and on a noisy machine one run moves by 20% and more, which the fastest run alone (what
the other tables use) does not average out (docs/performance.md has the figures). Five repeats by
default, not three.

usage: bench/recording.py [--quick] [--write docs/performance.md] [--layouts 1x1,4x2] [--steps 1000]
       [--repeats 5] [--divsim build/divsim]
"""
import argparse
import os
import statistics
import tempfile

import benchlib

SECTION = "recording"
QUICK = ["--steps", "100", "--repeats", "1", "--layouts", "1x1"]
MODES = {"defaults": [], "minimum": ["--record.layers_every=0", "--record.flush_every=100000", "--record.samples=false"]}


def parse_layouts(text):
    """"WxP,..." -> [(W, P), ...] (W logical ranks on P processes)."""
    layouts = []
    for item in text.split(","):
        w, _, p = item.partition("x")
        if not (w.isdigit() and p.isdigit() and int(p) > 0 and int(w) % int(p) == 0):
            raise benchlib.BenchError(f"--layouts: '{item}' is not WxP with W a multiple of P")
        layouts.append((int(w), int(p)))
    return layouts


def table(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    benchlib.add_divsim_arguments(ap, repeats=5)
    ap.add_argument("--layouts", default="1x1,4x2", help="WxP: W logical ranks on P MPI processes")
    ap.add_argument("--steps", type=int, default=1000)
    a = ap.parse_args(argv)
    layouts = parse_layouts(a.layouts)
    with tempfile.TemporaryDirectory(prefix="bench-recording-") as tmp:
        def measure(point):
            (w, p), mode = point
            out = os.path.join(tmp, f"{mode}{w}x{p}.h5")
            r = benchlib.run_divsim(a, p, [f"--train.steps={a.steps}", f"--dist.world_size={w}", *MODES[mode]], out)
            r["mb"] = os.path.getsize(out) / 2**20
            return r

        runs = benchlib.repeated(a.repeats, [(lp, m) for lp in layouts for m in MODES], measure)
    rows = ["| W | processes | defaults steps/s | minimum steps/s | overhead of the defaults: median of the pairs | "
            "of the fastest runs | file MB, defaults | minimum |",
            "|---|---|---|---|---|---|---|---|"]
    for lp in layouts:
        d, m = benchlib.fastest(runs[(lp, "defaults")]), benchlib.fastest(runs[(lp, "minimum")])
        paired = statistics.median(mr["rate"] / dr["rate"] for dr, mr in zip(runs[(lp, "defaults")], runs[(lp, "minimum")]))
        rows.append(f"| {lp[0]} | {lp[1]} | {d['rate']:.1f} | {m['rate']:.1f} | {paired - 1:+.1%} | "
                    f"{m['rate'] / d['rate'] - 1:+.1%} | {d['mb']:.2f} | {m['mb']:.2f} |")
    rows += ["", f"Settings: {a.steps} steps, repeats: {a.repeats}; overhead = minimum steps/s / defaults steps/s - 1, as "
                 f"the median over the repeats of each adjacent pair's ratio and as the ratio of the fastest runs; "
                 f"{benchlib.machine()}."]
    return "\n".join(rows)


if __name__ == "__main__":
    benchlib.cli(table, SECTION, QUICK)
