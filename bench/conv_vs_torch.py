#!/usr/bin/python3
"""divsim's conv2d layer style against PyTorch's torch.nn.Conv2d (oneDNN), both on one thread, on the
convolutions of the ResNet divsim trains on 28x28x1 images (model.type=resnet, no bias): forward, and
forward + backward (weight gradient and input gradient), per shape and per-rank micro-batch.

divsim's times come from bench/conv_rate.cpp (<build>/bench/divsim_conv_rate, built with divsim's
flags), which calls the layer as the engine does on one block of B rows; torch's are measured here in
the same run, interleaved with divsim's, and each figure is the minimum over --repeats rounds of
--calls calls (the machine may be shared: minima are the least noisy). Ratios are torch / divsim: above
1, divsim is faster. Figures, not assertions.

usage: bench/conv_vs_torch.py [--build build] [--batches 64,128,256] [--repeats 3] [--calls 20] [--quick]
"""
import argparse
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (name, C, H, W, OUT, kernel, stride, padding): the ResNet's distinct convolutions.
SHAPES = [
    ("stem 1->16 28x28", 1, 28, 28, 16, 3, 1, 1),
    ("16->16 28x28", 16, 28, 28, 16, 3, 1, 1),
    ("16->32 s2 28->14", 16, 28, 28, 32, 3, 2, 1),
    ("32->32 14x14", 32, 14, 14, 32, 3, 1, 1),
    ("32->64 s2 14->7", 32, 14, 14, 64, 3, 2, 1),
    ("64->64 7x7", 64, 7, 7, 64, 3, 1, 1),
    ("1x1 s2 16->32", 16, 28, 28, 32, 1, 2, 0),
    ("1x1 s2 32->64", 32, 14, 14, 64, 1, 2, 0),
]


def divsim_ms(exe, batch, shape, calls):
    _, c, h, w, out, k, s, p = shape
    r = subprocess.run([exe, str(batch), str(c), str(h), str(w), str(out), str(k), str(s), str(p), str(calls)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{exe} failed: {r.stderr.strip()}")
    fwd, step = r.stdout.split()[:2]
    return float(fwd), float(step)


def torch_ms(torch, batch, shape, calls):
    _, c, h, w, out, k, s, p = shape
    g = torch.Generator().manual_seed(0)
    conv = torch.nn.Conv2d(c, out, k, stride=s, padding=p, bias=False)
    x = torch.randn(batch, c, h, w, generator=g, requires_grad=True)
    with torch.no_grad():
        dy = torch.randn_like(conv(x))
    fwd = step = float("inf")
    for i in range(calls + 1):
        t0 = time.perf_counter()
        y = conv(x)
        t1 = time.perf_counter()
        conv.weight.grad = None
        x.grad = None
        t2 = time.perf_counter()
        y = conv(x)
        y.backward(dy)
        t3 = time.perf_counter()
        if i:
            fwd, step = min(fwd, (t1 - t0) * 1e3), min(step, (t3 - t2) * 1e3)
    return fwd, step


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(REPO, "build"), help="divsim's build folder (holds bench/divsim_conv_rate)")
    ap.add_argument("--batches", default="64,128,256")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="batch 64, one round of 5 calls")
    args = ap.parse_args(argv)
    if args.quick:
        args.batches, args.repeats, args.calls = "64", 1, 5
    exe = os.path.join(args.build, "bench", "divsim_conv_rate")
    if not os.access(exe, os.X_OK):
        sys.exit(f"no {exe}: cmake --build {args.build} --target divsim_conv_rate")
    import torch
    torch.set_num_threads(1)
    print(f"torch {torch.__version__} (1 thread, mkldnn {torch.backends.mkldnn.is_available()}); divsim {exe}; "
          f"min of {args.repeats} x {args.calls} calls")
    print(f"| {'shape':<18} | {'B':>3} | divsim fwd ms | divsim f+b ms | torch fwd ms | torch f+b ms | "
          f"torch/divsim fwd | torch/divsim f+b |")
    print("|" + "|".join("-" * n for n in (20, 5, 15, 15, 14, 14, 18, 18)) + "|")
    for batch in (int(b) for b in args.batches.split(",")):
        for shape in SHAPES:
            best = [float("inf")] * 4
            for _ in range(args.repeats):
                d = divsim_ms(exe, batch, shape, args.calls)
                t = torch_ms(torch, batch, shape, args.calls)
                best = [min(a, b) for a, b in zip(best, d + t)]
            df, ds, tf, ts = best
            print(f"| {shape[0]:<18} | {batch:>3} | {df:13.2f} | {ds:13.2f} | {tf:12.2f} | {ts:12.2f} | "
                  f"{tf / df:16.2f} | {ts / ds:16.2f} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
