#!/usr/bin/python3
"""divsim's achieved fwd+bwd GFLOP/s at W=1 on a wide MLP against the best single-thread GEMM rate of
the same layer shapes on this machine, measured by the same script (bench/gemm_rate.cpp, built with
divsim's flags: Eigen's kernels and, when divsim is built with it, OpenBLAS's sgemm on one thread).

The model is 784-H-H-10 (H = --width, default 1024) at batch 256, SGD, no recording of layer
statistics (their cost is in bench/recording.py) and a 1000-sample test split (so the final
evaluation, which divsim's step timer includes, stays below 1% of the run). FLOPs per step count the
matrix products only: 2*B*in*out for each Linear forward and weight gradient, and for each input
gradient except the first layer's (divsim skips it: the input is data). The achieved rate divides them
by the whole step time, so the optimizer, norms, hashing and trajectory rows count against it. The
reference is the fastest of the three products (forward, weight gradient, input gradient) of the
H x H layer over both kernels.

usage: bench/gemm.py [--quick] [--write docs/performance.md] [--width 1024] [--batch 256] [--steps 300]
       [--repeats 3] [--seconds 1] [--divsim build/divsim]
"""
import argparse
import os
import subprocess
import tempfile

import benchlib

SECTION = "gemm"
QUICK = ["--steps", "30", "--repeats", "1", "--seconds", "0.3"]
IN_FEATURES, CLASSES = 784, 10
KERNELS = {"eigen": "Eigen", "openblas": "OpenBLAS"}


def gemm_rates(exe, batch, fan_in, fan_out, seconds):
    """{(kernel, product): GFLOP/s} from divsim_gemm_rate."""
    p = subprocess.run([exe, str(batch), str(fan_in), str(fan_out), str(seconds)], capture_output=True, text=True)
    if p.returncode != 0:
        raise benchlib.BenchError(f"{exe} failed: {p.stderr.strip()}")
    return {tuple(line.split()[:2]): float(line.split()[5]) for line in p.stdout.splitlines()}


def flops_per_step(batch, widths):
    """Matrix-product FLOPs of one fwd+bwd step of the MLP with layer widths [in, h1, ..., classes]."""
    shapes = list(zip(widths[:-1], widths[1:]))
    forward = sum(2 * batch * i * o for i, o in shapes)
    # forward + weight gradients (as many) + input gradients (as many, less the first layer's)
    return 3 * forward - 2 * batch * shapes[0][0] * shapes[0][1]


def products_seconds(batch, widths, rates):
    """Seconds per step of the products flops_per_step counts, each at the best of its rates: rates[l] is
    gemm_rates' {(kernel, product): GFLOP/s} for layer l's shapes."""
    seconds = 0.0
    for layer, (fan_in, fan_out) in enumerate(zip(widths[:-1], widths[1:])):
        for product in ("forward", "weight", "input")[:2 if layer == 0 else 3]:
            best = max(g for (_, name), g in rates[layer].items() if name == product)
            seconds += 2.0 * batch * fan_in * fan_out / (best * 1e9)
    return seconds


def table(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    benchlib.add_divsim_arguments(ap)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--seconds", type=float, default=1.0, help="timing per GEMM product")
    a = ap.parse_args(argv)
    exe = benchlib.helper(a.divsim, "divsim_gemm_rate")
    job = [f"--model.hidden={a.width},{a.width}", f"--batch.global={a.batch}", f"--train.steps={a.steps}",
           "--record.layers_every=0", "--data.test_size=1000"]
    with tempfile.TemporaryDirectory(prefix="bench-gemm-") as tmp:
        runs = benchlib.repeated(a.repeats, ["gemm", "divsim"], lambda p: gemm_rates(exe, a.batch, a.width, a.width, a.seconds)
                                 if p == "gemm" else benchlib.run_divsim(a, 1, job, os.path.join(tmp, "gemm.h5")))
    gemm = {k: max(r[k] for r in runs["gemm"]) for k in runs["gemm"][0]}
    reference = max(gemm.values())
    rate = benchlib.fastest(runs["divsim"])["rate"]
    flops = flops_per_step(a.batch, [IN_FEATURES, a.width, a.width, CLASSES])
    achieved = rate * flops * 1e-9
    rows = ["| quantity | value |", "|---|---|",
            *(f"| {KERNELS[kernel]} GEMM, {name} product of the {a.width}x{a.width} layer at batch {a.batch}, 1 thread | "
              f"{g:.1f} GFLOP/s |" for (kernel, name), g in gemm.items()),
            f"| divsim W=1, 784-{a.width}-{a.width}-10, batch {a.batch} | {rate:.1f} steps/s |",
            f"| matrix-product FLOPs per step (fwd + bwd) | {flops / 1e9:.2f} GFLOP |",
            f"| divsim achieved fwd+bwd rate | {achieved:.1f} GFLOP/s |",
            f"| achieved / best GEMM rate | {achieved / reference:.0%} |",
            "", f"Settings: {a.steps} steps, best of {a.repeats}, {a.seconds:g} s per GEMM product; {benchlib.machine()}."]
    return "\n".join(rows)


if __name__ == "__main__":
    benchlib.cli(table, SECTION, QUICK)
