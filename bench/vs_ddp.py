#!/usr/bin/python3
"""Steps/s of divsim against PyTorch DDP (bench/ddp_peer.py) on the identical job, W = 1, 2, 4.

The job (--model mlp, the default): MLP 784-256-128-10 with BatchNorm and dropout 0.1, SGD (lr 0.05,
momentum 0.9, cosine schedule); --model resnet: the default ResNet (16-32-64 channels, one basic block per
stage), SGD lr 0.1; --model vit: the default ViT (patch 7, dim 64, 4 heads, 4 blocks), AdamW lr 0.002;
--model gpt: the default character GPT (64 tokens, dim 64, 4 heads, 4 blocks) on the fortunes, AdamW lr
0.003 with clipping, 64 sequences a step (inputs/gpt.ini).
The peer runs divsim's own graph (the `model` attribute of divsim's run, validation/torch_graph.py).
Global batch 256 split over W ranks, the full Fashion-MNIST training split in memory. divsim
runs its W logical ranks on min(W, --procs) MPI processes (default: the machine's cores; the other ranks
are virtual ranks inside them, as a user runs W > cores) with its default recording (the whole per-step
trajectory and layer statistics every 10 steps, to HDF5); the DDP peer needs one process per rank and
runs W spawned processes, one thread each, appending every rank's loss and gradient norm per step.
Both sides time the step loop only (divsim: the steps/s of its summary line; the peer: rank 0 from a
barrier after set-up to the end of its last step), so process start-up, imports, data loading and the
final evaluation are excluded on both. Every point is run --repeats times, interleaved; the fastest run counts. The mean
loss over the last tenth of the steps shows that both sides trained the same job (they draw different
initial parameters and dropout masks, so it agrees only approximately). The matmul rate of torch's BLAS is printed to show which BLAS the peer runs on
(Debian's reference BLAS: a few GFLOP/s; OpenBLAS: about a hundred).

A last line bounds the W = 1 ratio from the machine: the step's matrix products alone (every Linear
layer's forward, weight and input products at the batch, the first layer's input product left out as on
both sides), each at the best single-thread rate that bench/gemm_rate.cpp measures for its shapes, take
a time no implementation on these kernels can beat; the peer's step time over it is the largest ratio
to the peer that W = 1 can reach on this machine. It is measured in every repeat, interleaved with the
runs, and the fastest counts, as for the runs.

usage: bench/vs_ddp.py [--quick] [--write docs/performance.md] [--model mlp|resnet|vit|gpt] [--worlds 1,2,4] [--procs CORES] [--steps 500]
       [--repeats 3] [--divsim build/divsim] [-- extra divsim options for both sides]
"""
import argparse
import json
import os
import tempfile

import h5py

import benchlib
import ddp_peer
import gemm

SECTION = "vs_ddp"
QUICK = ["--steps", "40", "--repeats", "1", "--worlds", "1,4"]
JOBS = {
    "mlp": ["--model.hidden=256,128", "--model.batchnorm=true", "--model.dropout=0.1", "--batch.global=256",
            "--optim.type=sgd", "--optim.lr=0.05", "--optim.momentum=0.9", "--schedule.type=cosine"],
    "resnet": ["--model.type=resnet", "--batch.global=256", "--optim.type=sgd", "--optim.lr=0.1", "--optim.momentum=0.9",
               "--schedule.type=cosine"],
    "vit": ["--model.type=vit", "--batch.global=256", "--optim.type=adamw", "--optim.lr=0.002",
            "--optim.weight_decay=0.05", "--schedule.type=cosine"],
    "gpt": ["--model.type=gpt", "--data.source=fortunes", "--batch.global=64", "--optim.type=adamw", "--optim.lr=0.003",
            "--optim.weight_decay=0.1", "--optim.beta2=0.99", "--optim.clip_norm=1.0", "--schedule.type=cosine"],
}


def table(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    benchlib.add_divsim_arguments(ap)
    ap.add_argument("--model", choices=sorted(JOBS), default="mlp")
    ap.add_argument("--worlds", default="1,2,4")
    ap.add_argument("--procs", type=int, default=os.cpu_count(),
                    help="divsim's MPI processes at most (default: the cores; 0: one per logical rank, as DDP)")
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("options", nargs="*", help="extra divsim options for both sides")
    a = ap.parse_args(argv)
    worlds = [int(w) for w in a.worlds.split(",")]
    procs = benchlib.processes(worlds, a.procs)
    job = JOBS[a.model] + a.options + [f"--train.steps={a.steps}"]
    graph = {}  # the network divsim ran, for the peer (from divsim's first output file)
    cfg = ddp_peer.config_from_divsim(benchlib.check_divsim(a.divsim), job)
    tail = max(1, a.steps // 10)

    with tempfile.TemporaryDirectory(prefix="bench-vs-ddp-") as tmp:
        def measure(point):
            side, w = point
            if side == "products":
                return {"ms": products_time_ms(gemm_exe, cfg)}
            if side == "divsim":
                out = os.path.join(tmp, f"divsim{w}.h5")
                r = benchlib.run_divsim(a, procs[w], job + [f"--dist.world_size={w}"], out)
                with h5py.File(out, "r") as f:
                    r["tail_loss"] = float(f["train/global_loss"][-tail:].mean())
                    graph.setdefault("model", json.loads(f.attrs["model"]))
                return r
            try:
                d = ddp_peer.run_ddp(cfg, w, a.steps, graph.get("model") if a.model != "mlp" else None)
            except ValueError as e:
                raise benchlib.BenchError(str(e)) from e
            d.write_h5(os.path.join(tmp, f"ddp{w}.h5"))
            return {"rate": d.steps_per_s, "tail_loss": float(d.loss[-tail:].mean())}

        # The products' bound is measured in every repeat too, so that it comes from the same spells of the
        # machine as the runs it bounds (measured once after them, it once read 1.82 beside a measured 2.32).
        bound = 1 in worlds and a.model == "mlp"  # the products' bound is written for the MLP's Linear layers
        gemm_exe = benchlib.helper(a.divsim, "divsim_gemm_rate") if bound else None
        points = [(s, w) for w in worlds for s in ("divsim", "ddp")] + ([("products", 1)] if bound else [])
        runs = benchlib.repeated(a.repeats, points, measure)
    blas = ddp_peer.blas_gflops()
    products_ms = min(r["ms"] for r in runs[("products", 1)]) if ("products", 1) in runs else None
    if products_ms is None and 1 in worlds:
        # The other models: their declared products' flops at the 1024^3 rate, which no kernel on this
        # core beats on these smaller shapes; attention's products are not declared, so this bound is loose.
        products_ms = 1000.0 * step_flops(graph["model"], cfg.int("batch.global")) / (blas * 1e9)

    rows = ["| W | divsim processes | divsim steps/s | DDP processes | PyTorch DDP steps/s | divsim / DDP | "
            "mean loss, last 10% of steps: divsim | DDP |",
            "|---|---|---|---|---|---|---|---|"]
    for w in worlds:
        d, t = benchlib.fastest(runs[("divsim", w)]), benchlib.fastest(runs[("ddp", w)])
        rows.append(f"| {w} | {procs[w]} | {d['rate']:.1f} | {w} | {t['rate']:.1f} | {d['rate'] / t['rate']:.2f} | "
                    f"{d['tail_loss']:.3f} | {t['tail_loss']:.3f} |")
    rows += ["", f"Settings: {a.steps} steps, best of {a.repeats}, job `{' '.join(job[:-1])}`; "
                 f"torch {ddp_peer.torch.__version__} matmul 1024^3 on one thread: {blas:.0f} GFLOP/s; "
                 f"{benchlib.machine()}."]
    if products_ms is not None:
        peer_ms = 1000.0 / benchlib.fastest(runs[("ddp", 1)])["rate"]
        divsim_ms = 1000.0 / benchlib.fastest(runs[("divsim", 1)])["rate"]
        rate = ("each at the best single-thread GEMM rate measured for its shapes (fastest of the repeats)"
                if a.model == "mlp" else
                f"forward, weight and input gradient of every declared product at torch's 1024^3 rate above")
        rows += ["", f"W = 1 ceiling: the matrix products alone, {rate}, take {products_ms:.2f} ms per step; divsim's "
                     f"step takes {divsim_ms:.2f} ms ({products_ms / divsim_ms:.0%} of that rate) and the peer's "
                     f"{peer_ms:.2f} ms, so divsim / DDP at W = 1 cannot exceed {peer_ms / products_ms:.2f} on this machine."]
    return "\n".join(rows)


def step_flops(model, batch):
    """Flops of one step's declared products (the `products` of divsim's model attribute): forward, weight
    gradient and input gradient, less the input gradient of layers that read the input batch."""
    total = 0
    for layer in model["layers"]:
        passes = 2 if layer["inputs"] == [0] else 3
        total += sum(passes * 2 * rows * i * o for rows, i, o in layer["products"])
    return total * batch


def products_time_ms(exe, cfg):
    """Milliseconds per W = 1 step of the job's matrix products, each at the best rate measured for it."""
    widths = [gemm.IN_FEATURES, *cfg.ints("model.hidden"), gemm.CLASSES]
    batch = cfg.int("batch.global")
    rates = [gemm.gemm_rates(exe, batch, i, o, 0.3) for i, o in zip(widths[:-1], widths[1:])]
    return 1000.0 * gemm.products_seconds(batch, widths, rates)


if __name__ == "__main__":
    # Each model's table has its own section of docs/performance.md: vs_ddp (the MLP), vs_ddp_resnet, ...
    peek = argparse.ArgumentParser(add_help=False)
    peek.add_argument("--model", default="mlp")
    model = peek.parse_known_args()[0].model
    benchlib.cli(table, SECTION if model == "mlp" else f"{SECTION}_{model}", QUICK)
