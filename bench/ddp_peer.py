#!/usr/bin/python3
"""The PyTorch DDP peer of a divsim job: the same MLP, optimizer, schedule, global batch and Fashion-MNIST
data, trained the way a user trains it: torch.multiprocessing.spawn, one process per rank, the gloo
backend on CPU, torch.set_num_threads(1) (and OpenBLAS/OpenMP limited to one thread) per rank,
DistributedSampler shards of tensors held in memory, DistributedDataParallel with divsim's
bucket_cap_mb and broadcast_buffers. Every rank appends its loss and the norm of the gradient it applies
to lists and writes them at the end (the per-step trajectory; optionally one HDF5 file with divsim's
/train/loss and /train/grad_norm names). Only the step loop is timed, from a barrier after set-up to the
end of the last step: process start, imports, data loading and the final evaluation are excluded, as
divsim's summary line excludes its own.

The job is given as a divsim configuration (validation.common.Config: from a run's `config` attribute or
from `divsim --print-config`), so both sides are built from one definition. Deliberately not supported
(refused with the key named): faults, gradient accumulation, batch.per_rank, losses other than
cross-entropy, optimizers other than sgd/adamw, matmul formats, AMP, augmentation, global_batch
sampling, synthetic data. Not bitwise comparable with divsim: torch draws its own initial parameters,
dropout masks and epoch permutation; and DDP broadcasts BatchNorm buffers at the start of each forward,
so after the last step every rank evaluates with its own running statistics (divsim broadcasts them
after each step).

    bench/ddp_peer.py --world 4 [--out run.h5] -- <divsim options, e.g. --train.steps=200>
"""
import argparse
import dataclasses
import os
import socket
import subprocess
import sys
import tempfile
import time

# One thread per rank, and OpenBLAS on kernels that fit the CPU (benchlib.pin_openblas_core): fixed
# before torch (and its BLAS) is loaded, here and in the spawned ranks.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"
import benchlib  # noqa: E402  (bench/, beside this file)

benchlib.pin_openblas_core()

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn.functional as F  # noqa: E402

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from validation.common import (Config, build_mlp, ddp_target_scale, load_data, parse_config,  # noqa: E402
                               scheduled_lr, unpadded)

EVAL_BATCH = 1000  # divsim evaluates in batches of 1000 as well


@dataclasses.dataclass
class DdpResult:
    world: int
    steps: int
    steps_per_s: float      # rank 0's timed loop, as divsim reports its own
    loss: np.ndarray        # [S, W] each rank's loss (mean over its samples of the step)
    grad_norm: np.ndarray   # [S, W] L2 norm of the gradient the optimizer applied (after the allreduce)
    eval_loss: np.ndarray   # [W] each rank's replica on the test split, after the last step
    eval_accuracy: np.ndarray

    def write_h5(self, path):
        """The trajectory under divsim's dataset names, with its `dims`/`description` convention."""
        import h5py

        with h5py.File(path, "w") as f:
            f.attrs["world_size"] = self.world
            f.attrs["producer"] = "bench/ddp_peer.py (PyTorch DDP)"
            f.attrs["steps_per_s"] = self.steps_per_s
            for name, data, dims, text in [
                ("train/step", np.arange(self.steps, dtype=np.int64), "step", "optimizer step"),
                ("train/loss", self.loss, "step,rank", "rank's local loss (mean over its samples of the step)"),
                ("train/grad_norm", self.grad_norm, "step,rank", "L2 norm of the gradient the optimizer applied"),
                ("eval/loss", self.eval_loss[None, :], "eval,rank", "test-split loss after the last step"),
                ("eval/accuracy", self.eval_accuracy[None, :], "eval,rank", "test-split accuracy after the last step"),
            ]:
                f[name] = data
                f[name].attrs["dims"] = dims
                f[name].attrs["description"] = text


def config_from_divsim(divsim, options):
    """The effective configuration of `divsim OPTIONS` (asks `divsim --print-config`)."""
    p = subprocess.run([divsim, "--print-config", *options], capture_output=True, text=True)
    if p.returncode != 0:
        raise ValueError(f"divsim --print-config {' '.join(options)} failed: {p.stderr.strip()}")
    return Config(parse_config(p.stdout))


def check_supported(cfg):
    """Raises ValueError naming the first setting this peer does not reproduce."""
    refusals = [
        (cfg.faults, "fault: the peer runs fault-free jobs only"),
        (cfg.text("data.source") not in ("fashion-mnist", "fortunes", "text"), "data.source must be fashion-mnist, fortunes or text"),
        (cfg.int("batch.accum_steps") != 1, "batch.accum_steps must be 1"),
        (cfg.int("batch.per_rank") != 0, "batch.per_rank must be 0 (the peer splits batch.global)"),
        (cfg.text("batch.lr_scaling") != "none", "batch.lr_scaling must be none"),
        (cfg.text("loss.type") != "cross_entropy", "loss.type must be cross_entropy"),
        (cfg.text("optim.type") not in ("sgd", "adamw"), "optim.type must be sgd or adamw"),
        (cfg.text("precision.matmul") != "fp32", "precision.matmul must be fp32"),
        (cfg.text("precision.amp") != "none", "precision.amp must be none"),
        (cfg.bool("data.augment"), "data.augment must be false"),
        (cfg.text("sampler.mode") != "distributed", "sampler.mode must be distributed (DistributedSampler)"),
        (cfg.bool("dist.sync_bn"), "dist.sync_bn must be false"),
    ]
    for bad, why in refusals:
        if bad:
            raise ValueError(f"the DDP peer cannot run this job: {why}")


def make_optimizer(cfg, params):
    if cfg.text("optim.type") == "sgd":
        return torch.optim.SGD(params, lr=cfg.float("optim.lr"), momentum=cfg.float("optim.momentum"),
                               nesterov=cfg.bool("optim.nesterov"), weight_decay=cfg.float("optim.weight_decay"))
    return torch.optim.AdamW(params, lr=cfg.float("optim.lr"), betas=(cfg.float("optim.beta1"), cfg.float("optim.beta2")),
                             eps=cfg.float("optim.eps"), weight_decay=cfg.float("optim.weight_decay"))


def build_model(cfg, graph):
    """The network: divsim's own graph (the `model` attribute of a divsim run of the same job) when given,
    else the MLP from the configuration."""
    if graph is None:
        return build_mlp(cfg)
    from validation.torch_graph import GraphModel

    return GraphModel(graph)


def _rank(rank, world, cfg, steps, tensors, port, outdir, graph=None):
    """One DDP rank: set-up, barrier, the timed steps and final evaluation, then its trajectory to outdir."""
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data.distributed import DistributedSampler

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    x_train, y_train, x_test, y_test = tensors
    torch.manual_seed(cfg.int("run.seed"))
    model = DistributedDataParallel(build_model(cfg, graph), bucket_cap_mb=cfg.float("dist.bucket_cap_mb"),
                                    broadcast_buffers=cfg.bool("dist.broadcast_buffers"))
    params = list(model.parameters())
    opt = make_optimizer(cfg, params)
    sampler = DistributedSampler(range(len(x_train)), num_replicas=world, rank=rank, shuffle=cfg.bool("sampler.shuffle"),
                                 seed=cfg.int("sampler.seed"), drop_last=cfg.bool("batch.drop_last"))
    batch = cfg.int("batch.global") // world
    per_epoch = len(sampler) // batch
    base_lr, smoothing, clip = cfg.float("optim.lr"), cfg.float("loss.label_smoothing"), cfg.float("optim.clip_norm")
    losses, norms = [], []
    sequences = y_train.dim() == 2

    def step_loss(logits, y):
        if not sequences:
            loss = F.cross_entropy(logits, y, label_smoothing=smoothing)
            return loss, loss.item()
        y = y.reshape(-1)
        total = F.cross_entropy(logits.reshape(len(y), -1), y, ignore_index=-1, reduction="sum",
                                label_smoothing=smoothing)
        count = int((y != -1).sum())
        return total * ddp_target_scale(count, world), total.item() / count

    dist.barrier()
    t0 = time.perf_counter()
    model.train()
    for step in range(steps):
        epoch, in_epoch = divmod(step, per_epoch)
        if in_epoch == 0:
            sampler.set_epoch(epoch)
            order = torch.tensor(list(sampler), dtype=torch.int64)
        idx = order[in_epoch * batch:(in_epoch + 1) * batch]
        x, y = x_train[idx], y_train[idx]
        for g in opt.param_groups:
            g["lr"] = scheduled_lr(cfg, step, steps, base_lr)
        opt.zero_grad(set_to_none=True)
        loss, rank_loss = step_loss(model(x), y)
        loss.backward()
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in params]))
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(params, clip)
        opt.step()
        losses.append(rank_loss)
        norms.append(norm.item())
    seconds = time.perf_counter() - t0
    model.eval()
    eval_loss, correct, counted = 0.0, 0, 0
    with torch.no_grad():
        for first in range(0, len(x_test), EVAL_BATCH):
            logits = model.module(x_test[first:first + EVAL_BATCH])
            logits, target = unpadded(logits, y_test[first:first + EVAL_BATCH])
            eval_loss += F.cross_entropy(logits, target, reduction="sum").item()
            correct += int((logits.argmax(dim=1) == target).sum())
            counted += len(target)

    np.savez(os.path.join(outdir, f"rank{rank}.npz"), loss=np.array(losses), grad_norm=np.array(norms), seconds=seconds,
             eval_loss=eval_loss / counted, eval_accuracy=correct / counted)
    dist.destroy_process_group()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ddp(cfg, world, steps=None, graph=None):
    """Trains the job of divsim configuration `cfg` with PyTorch DDP on `world` CPU processes; returns a
    DdpResult. `steps` defaults to the configuration's train.steps (or epochs x steps per epoch); `graph`
    (a divsim run's `model` attribute, parsed) is the network, the configuration's MLP without it."""
    check_supported(cfg)
    if cfg.int("batch.global") % world:
        raise ValueError(f"batch.global={cfg.int('batch.global')} is not divisible by the world size {world}")
    x_train, y_train, x_test, y_test, _ = load_data(cfg)
    if steps is None:
        per_rank = len(x_train) // world if cfg.bool("batch.drop_last") else -(-len(x_train) // world)
        steps = cfg.int("train.steps") or cfg.int("train.epochs") * (per_rank // (cfg.int("batch.global") // world))
    # Shared-memory tensors: spawn hands them to the ranks without a copy per rank.
    tensors = tuple(torch.from_numpy(np.array(a)).share_memory_() for a in (x_train, y_train, x_test, y_test))
    with tempfile.TemporaryDirectory(prefix="ddp-peer-") as outdir:
        mp.spawn(_rank, args=(world, cfg, steps, tensors, _free_port(), outdir, graph), nprocs=world, join=True)
        ranks = [np.load(os.path.join(outdir, f"rank{r}.npz")) for r in range(world)]
        return DdpResult(world=world, steps=steps, steps_per_s=steps / float(ranks[0]["seconds"]),
                         loss=np.stack([r["loss"] for r in ranks], axis=1),
                         grad_norm=np.stack([r["grad_norm"] for r in ranks], axis=1),
                         eval_loss=np.array([float(r["eval_loss"]) for r in ranks]),
                         eval_accuracy=np.array([float(r["eval_accuracy"]) for r in ranks]))


def blas_gflops(n=1024, seconds=1.0):
    """Single-thread float32 matmul rate of the BLAS torch is linked to. Measured in a fresh interpreter
    whose BLAS starts with one thread: in a process where numpy loaded OpenBLAS before this module set
    OPENBLAS_NUM_THREADS, torch.set_num_threads(1) does not reach OpenBLAS's own threads (this once
    reported twice the single-core rate). Reference (netlib) BLAS gives a few GFLOP/s, OpenBLAS on
    AVX-512 over a hundred."""
    code = ("import time, torch\n"
            "torch.set_num_threads(1)\n"
            f"a, b = torch.randn({n}, {n}), torch.randn({n}, {n})\n"
            "torch.mm(a, b)\n"
            "calls, t0 = 0, time.perf_counter()\n"
            f"while time.perf_counter() - t0 < {seconds}:\n"
            "    torch.mm(a, b)\n"
            "    calls += 1\n"
            f"print(2.0 * {n} ** 3 * calls / (time.perf_counter() - t0) * 1e-9)\n")
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", type=int, default=1)
    ap.add_argument("--divsim", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build", "divsim"),
                    help="asked for the job's effective configuration (--print-config)")
    ap.add_argument("--out", default="", help="write the trajectory to this HDF5 file")
    ap.add_argument("options", nargs="*", help="divsim options after --, e.g. -- --train.steps=200")
    a = ap.parse_args()
    try:
        r = run_ddp(config_from_divsim(a.divsim, a.options), a.world)
    except ValueError as e:
        sys.exit(f"ddp_peer.py: {e}")
    if a.out:
        r.write_h5(a.out)
    print(f"ddp_peer: {r.steps} steps, W={r.world}, {r.steps_per_s:.1f} steps/s, final eval loss "
          f"{r.eval_loss.min():.4f}..{r.eval_loss.max():.4f} accuracy {r.eval_accuracy.min():.4f}..{r.eval_accuracy.max():.4f}"
          + (f", wrote {a.out}" if a.out else ""))


if __name__ == "__main__":
    main()
