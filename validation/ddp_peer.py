#!/usr/bin/python3
"""Real-DDP peer (issue 5, part 2): each fault PyTorch can express, done the PyTorch way under
torch.distributed DDP (gloo backend, torch.multiprocessing.spawn, one CPU thread per process), next to
divsim with the matching fault, on the same scenario, and their signatures side by side.

Each run is one set of divsim configuration keys (the shared scenario with the run's own changes: its
model, size and data); divsim gets them as options, the torch workers read the same values. divsim runs
first; the torch network is the graph its run recorded (its `model` attribute, validation/torch_graph.py),
built with torch's own default init under torch.manual_seed. The rest of the torch side is torch's own
parts too: DistributedSampler with set_epoch, DDP's gradient allreduce and buffer broadcast,
torch.optim.SGD, nn.Dropout drawing from torch's global generator. So the two sides never agree number
for number; what must agree is each fault's signature:
  split        first step after whose update the ranks' parameters differ (param hashes);
  departs      first step at which any rank's loss differs from the same side's fault-free run
               (both sides are bitwise reproducible, so any difference is the fault's);
  eval spread  max - min over ranks of the final eval loss (each rank evaluates its own replica);
  distinct     distinct samples / samples consumed over all ranks (1 when the shards are disjoint).
The faults, torch way -> divsim:
  init_reseeded         rank 1 re-initialises its model with seed+rank after the DDP wrapper
                        (DDP 1.13 broadcasts rank 0's parameters in its constructor, so this is how
                        the bug survives DDP) -> unsynced_seed:stream=init,ranks=1
  sampler_seed_per_rank DistributedSampler(seed=seed+rank) -> unsynced_seed:stream=sampler,ranks=all
  bn_no_buffer_sync     BatchNorm1d, no SyncBN, DDP(broadcast_buffers=False) -> bn_drift:ranks=all
  resnet_bn_no_buffer_sync
                        the same on the ResNet (BatchNorm2d) -> bn_drift:ranks=all
  no_sync_off_by_one    accumulation 4; at step T rank 1's counter is one ahead: it leaves no_sync()
                        one micro-step early (its allreduce pairs with the others' last one) and adds
                        its last micro-batch locally -> accum_misalign:offset=+1,ranks=1 at step T
  optimizer_state_lost  at step T rank 1 drops optimizer.state (a resume without it)
                        -> optimizer_state_reset:ranks=1 at step T
  vit_dropout_seed_per_rank, gpt_dropout_seed_per_rank
                        dropout 0.1; the script seeds torch's generator (which nn.Dropout draws from)
                        after the DDP wrap with seed + rank instead of seed
                        -> unsynced_seed:stream=dropout,ranks=all; their baselines share the seed.
                        Each side's baseline has its own masks (divsim keys them by step and sample,
                        torch by call order), but departs compares each side with itself only.

    validation/ddp_peer.py --world 2 [--scenario NAME ...] [--json OUT]

Exit status 1 when a signature differs between the two sides. Deliberately not here: faults DDP
cannot express without hanging (a rank skipped by the allreduce), or precision faults.
"""
import argparse
import collections
import contextlib
import hashlib
import json
import os
import sys
import tempfile

import h5py
import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from validation.common import (Config, Divsim, ValidationError, ddp_target_scale, load_data, read_run, scheduled_lr,
                               unpadded)

FAULT_STEP = 60  # T, the step one-off faults act at

# The shared scenario, as divsim configuration keys (strings, as in an INI file).
SCENARIO = {
    "run.seed": "1", "sampler.seed": "0", "data.source": "fashion-mnist", "data.root": "/usr/share/datasets/fashion-mnist",
    "data.train_size": "0", "data.test_size": "0",
    "model.hidden": "128,64", "model.batchnorm": "false", "model.dropout": "0", "model.bn_eps": "1e-05",
    "model.bn_momentum": "0.1", "optim.type": "sgd", "optim.lr": "0.05", "optim.momentum": "0.9",
    "schedule.type": "cosine", "schedule.warmup_steps": "20", "schedule.min_lr": "0",
    "batch.global": "256", "batch.accum_steps": "1", "train.steps": "120", "train.eval_every": "20",
}

# The other models' changes to SCENARIO: small networks and short runs on part of the data (each epoch
# still longer than the run, as in the MLP's), so that their set takes minutes on two cores.
SHORT = {"batch.global": "64", "train.steps": "48", "train.eval_every": "16", "data.train_size": "4096",
         "data.test_size": "500"}
RESNET = {**SHORT, "model.type": "resnet", "model.channels": "8,16"}
TRANSFORMER = {**SHORT, "model.dim": "32", "model.depth": "2", "model.heads": "2", "model.dropout": "0.1"}
VIT = {**TRANSFORMER, "model.type": "vit"}
GPT = {**TRANSFORMER, "model.type": "gpt", "model.block_size": "32", "data.source": "fortunes"}
DROPOUT_SEED = "unsynced_seed:stream=dropout,ranks=all"

# name: (baseline, scenario changes, divsim fault or None, torch fault or None)
RUNS = {
    "baseline": (None, {}, None, None),
    "baseline_bn": (None, {"model.batchnorm": "true"}, None, None),
    "baseline_accum4": (None, {"batch.accum_steps": "4"}, None, None),
    "init_reseeded": ("baseline", {}, "unsynced_seed:stream=init,ranks=1", "init_reseeded"),
    "sampler_seed_per_rank": ("baseline", {}, "unsynced_seed:stream=sampler,ranks=all", "sampler_seed_per_rank"),
    "bn_no_buffer_sync": ("baseline_bn", {"model.batchnorm": "true"}, "bn_drift:ranks=all", "bn_no_buffer_sync"),
    "no_sync_off_by_one": ("baseline_accum4", {"batch.accum_steps": "4"},
                           f"accum_misalign:offset=+1,ranks=1,start={FAULT_STEP},stop={FAULT_STEP + 1}", "no_sync_off_by_one"),
    "optimizer_state_lost": ("baseline", {}, f"optimizer_state_reset:ranks=1,start={FAULT_STEP}", "optimizer_state_lost"),
    "baseline_resnet": (None, RESNET, None, None),
    "baseline_vit": (None, VIT, None, None),
    "baseline_gpt": (None, GPT, None, None),
    "resnet_bn_no_buffer_sync": ("baseline_resnet", RESNET, "bn_drift:ranks=all", "bn_no_buffer_sync"),
    "vit_dropout_seed_per_rank": ("baseline_vit", VIT, DROPOUT_SEED, "dropout_seed_per_rank"),
    "gpt_dropout_seed_per_rank": ("baseline_gpt", GPT, DROPOUT_SEED, "dropout_seed_per_rank"),
}
FAULTY_RANK = 1


def scenario(name):
    cfg = dict(SCENARIO)
    cfg.update(RUNS[name][1])
    return cfg


DATA_ARRAYS = ("x_train", "y_train", "x_test", "y_test")


def _worker(rank, world, jobs, out_dir, init_file):
    """One DDP rank: trains each (name, scenario, graph, fault, data folder) of `jobs` in turn in one
    process group (torch imported and each data set mapped once) and saves each run's per-step record to
    out_dir/<name>-rank<r>.npz. Every run starts from torch.manual_seed and a fresh model, optimizer and
    sampler, so it does not depend on the runs before it. The data comes prepared (standardised, or
    tokenised) from out_dir/<data folder>/<array>.npy, mapped copy-on-write: prepared once for all ranks."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    mapped = {}
    for name, cfg_flat, graph, fault, folder in jobs:
        if folder not in mapped:
            mapped[folder] = tuple(torch.from_numpy(np.load(os.path.join(out_dir, folder, f"{k}.npy"), mmap_mode="c"))
                                   for k in DATA_ARRAYS)
        rec = _train(rank, world, Config(cfg_flat), graph, fault, mapped[folder])
        np.savez(os.path.join(out_dir, f"{name}-rank{rank}.npz"), **{k: np.asarray(v) for k, v in rec.items()})
    dist.destroy_process_group()


def _train(rank, world, cfg, graph, fault, data):
    """One rank's DDP run of one scenario (the network: divsim's recorded `graph`) -> its per-step record."""
    import torch
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data.distributed import DistributedSampler

    from validation.torch_graph import GraphModel

    x_train, y_train, x_test, y_test = data
    seed, steps, accum = cfg.int("run.seed"), cfg.int("train.steps"), cfg.int("batch.accum_steps")
    faulty = rank == FAULTY_RANK
    sequences = y_train.dim() == 2  # per-position targets, -1 where padded

    torch.manual_seed(seed)
    model = GraphModel(graph)
    ddp = DDP(model, broadcast_buffers=fault != "bn_no_buffer_sync")
    if fault == "init_reseeded" and faulty:
        torch.manual_seed(seed + rank)
        for m in model.modules():
            if isinstance(m, torch.nn.Linear):
                m.reset_parameters()
    # The script seeds the generator its dropout draws from once the model is built; the bug adds the rank.
    torch.manual_seed(seed + (rank if fault == "dropout_seed_per_rank" else 0))
    opt = torch.optim.SGD(ddp.parameters(), lr=cfg.float("optim.lr"), momentum=cfg.float("optim.momentum"), foreach=False)
    sampler = DistributedSampler(range(len(x_train)), num_replicas=world, rank=rank, shuffle=True, drop_last=True,
                                 seed=cfg.int("sampler.seed") + (rank if fault == "sampler_seed_per_rank" else 0))
    per_rank = cfg.int("batch.global") // world
    micro = per_rank // accum
    per_epoch = len(sampler) // per_rank

    rec = {k: [] for k in ("loss", "param_hash", "param_norm", "samples", "eval_step", "eval_loss", "eval_accuracy")}
    order = None
    for step in range(steps):
        epoch, in_epoch = divmod(step, per_epoch)
        if in_epoch == 0:
            sampler.set_epoch(epoch)
            order = torch.tensor(list(iter(sampler)))
        for g in opt.param_groups:
            g["lr"] = scheduled_lr(cfg, step, steps, cfg.float("optim.lr"))
        if fault == "optimizer_state_lost" and faulty and step == FAULT_STEP:
            opt.state = collections.defaultdict(dict)
        # DDP allreduces in the backward of the micro-step outside no_sync(): normally the last one.
        sync_at = accum - 2 if fault == "no_sync_off_by_one" and faulty and step == FAULT_STEP else accum - 1
        idx_step = order[in_epoch * per_rank:(in_epoch + 1) * per_rank]
        targets = int((y_train[idx_step] != -1).sum())
        if sequences:
            scale = ddp_target_scale(targets, world)
        loss_sum = 0.0
        for m in range(accum):
            idx = idx_step[m * micro:(m + 1) * micro]
            with contextlib.nullcontext() if m == sync_at else ddp.no_sync():
                logits = ddp(x_train[idx])
                losses = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y_train[idx].reshape(-1),
                                         reduction="none", ignore_index=-1)
                (losses.sum() * scale if sequences else losses.mean() / accum).backward()
            loss_sum += float(losses.detach().double().sum())
        opt.step()
        opt.zero_grad(set_to_none=False)
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        rec["loss"].append(loss_sum / targets)
        rec["param_hash"].append(int.from_bytes(hashlib.blake2b(flat.numpy().tobytes(), digest_size=8).digest(), "little"))
        rec["param_norm"].append(float(flat.double().norm()))
        rec["samples"].append(idx_step.numpy())
        if (step + 1) % cfg.int("train.eval_every") == 0 or step + 1 == steps:
            ddp.eval()  # through the wrapper: DDP broadcasts rank 0's buffers first, unless told not to
            with torch.no_grad():
                logits = ddp(x_test)
            ddp.train()
            logits, y = unpadded(logits, y_test)
            rec["eval_step"].append(step)
            rec["eval_loss"].append(float(F.cross_entropy(logits, y, reduction="none").double().mean()))
            rec["eval_accuracy"].append(float((logits.argmax(dim=1) == y).double().mean()))
    return rec


def data_settings(cfg):
    """The settings that pick a scenario's data: those load_data reads."""
    return tuple(sorted((k, v) for k, v in cfg.items() if k.startswith("data.") or k == "model.block_size"))


def run_torch(names, world, graphs):
    """The torch DDP runs of `names` at `world` ranks, one spawn for all, each the network of
    graphs[name] -> {name: {loss [S,W], param_hash, param_norm, samples [S,W,B], eval_step [E],
    eval_loss [E,W], eval_accuracy [E,W]}}."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="ddp-peer-") as tmp:
        folders = {}
        for n in names:
            key = data_settings(scenario(n))
            if key not in folders:
                folders[key] = f"data{len(folders)}"
                os.mkdir(os.path.join(tmp, folders[key]))
                for k, a in zip(DATA_ARRAYS, load_data(Config(scenario(n)))):
                    np.save(os.path.join(tmp, folders[key], f"{k}.npy"), a)
        jobs = [(n, scenario(n), graphs[n], RUNS[n][3], folders[data_settings(scenario(n))]) for n in names]
        mp.spawn(_worker, args=(world, jobs, tmp, os.path.join(tmp, "init")), nprocs=world, join=True)
        out = {}
        for n in names:
            ranks = [np.load(os.path.join(tmp, f"{n}-rank{r}.npz")) for r in range(world)]
            out[n] = {k: np.stack([d[k] for d in ranks], axis=1) for k in ("loss", "param_hash", "param_norm", "samples",
                                                                          "eval_loss", "eval_accuracy")}
            out[n]["eval_step"] = ranks[0]["eval_step"]
    return out


def run_divsim(divsim, name, world):
    """The divsim run of `name` at `world` logical ranks (on up to 2 MPI processes), same layout, and
    the layer graph it recorded."""
    args = [f"--{k}={v}" for k, v in scenario(name).items()]
    args += [f"--dist.world_size={world}", "--record.samples=true", "--record.layers_every=0"]
    if RUNS[name][2]:
        args += ["--fault", RUNS[name][2]]
    path = divsim.run(f"ddp-{name}-w{world}", args, ranks=min(world, 2))
    data, _, _ = read_run(path)
    with h5py.File(path, "r") as f:
        graph = f.attrs["model"]
    return {"loss": data["train/loss"], "param_hash": data["train/param_hash"], "param_norm": data["train/param_norm"],
            "samples": data["train/samples"], "eval_step": data["eval/step"], "eval_loss": data["eval/loss"],
            "eval_accuracy": data["eval/accuracy"],
            "graph": json.loads(graph.decode() if isinstance(graph, bytes) else str(graph))}


def first_step(mask):
    hits = np.nonzero(mask)[0]
    return int(hits[0]) if len(hits) else None


def signature(run, base):
    """The fault's signature in one side's run, against that side's fault-free run."""
    hashes = run["param_hash"]
    samples = run["samples"].reshape(-1)
    tail = max(1, len(run["loss"]) // 6)
    return {
        "split": first_step([len(set(h.tolist())) > 1 for h in hashes]),
        "departs": None if base is None else first_step((run["loss"] != base["loss"]).any(axis=1)),
        "eval_spread": float(np.ptp(run["eval_loss"][-1])),
        "eval_accuracy_spread": float(np.ptp(run["eval_accuracy"][-1])),
        "final_eval_loss": [float(v) for v in run["eval_loss"][-1]],
        "end_loss": [float(v) for v in run["loss"][-tail:].mean(axis=0)],
        "distinct": float(len(np.unique(samples)) / len(samples)),
        "param_norm_spread": float(np.ptp(run["param_norm"][-1]) / np.mean(run["param_norm"][-1])),
    }


def agree(a, b):
    """Which parts of two signatures must match: the same split and departure steps, the eval spread
    zero on both sides or on neither, the shards disjoint on both sides or on neither."""
    problems = []
    for key in ("split", "departs"):
        if a[key] != b[key]:
            problems.append(f"{key}: divsim {a[key]} vs torch {b[key]}")
    if (a["eval_spread"] > 0) != (b["eval_spread"] > 0):
        problems.append(f"eval spread: divsim {a['eval_spread']:.3g} vs torch {b['eval_spread']:.3g}")
    if (a["distinct"] < 1) != (b["distinct"] < 1):
        problems.append(f"distinct samples: divsim {a['distinct']:.3f} vs torch {b['distinct']:.3f}")
    return problems


def compare_world(divsim, world, names):
    """{name: {"divsim": signature, "torch": signature, "problems": [...]}} at one world size."""
    runs = {}
    needed = []
    for name in names:
        for n in (RUNS[name][0], name):
            if n and n not in needed:
                needed.append(n)
    divsim_runs = {n: run_divsim(divsim, n, world) for n in needed}
    torch_runs = run_torch(needed, world, {n: r["graph"] for n, r in divsim_runs.items()})
    for n in needed:
        runs[n] = {"divsim": divsim_runs[n], "torch": torch_runs[n]}
    out = {}
    for name in names:
        base = RUNS[name][0]
        sig = {side: signature(runs[name][side], runs[base][side] if base else None) for side in ("divsim", "torch")}
        sig["problems"] = agree(sig["divsim"], sig["torch"])
        out[name] = sig
    return out


def table_lines(world, results):
    width = max(len(name) for name in ("fault", *results))
    lines = [f"W={world}: signatures, divsim | torch DDP",
             f"  {'fault':{width}s} {'split':>11s} {'departs':>11s} {'eval spread':>21s} {'distinct':>13s}  end loss per rank"]
    for name, r in results.items():
        d, t = r["divsim"], r["torch"]
        lines.append(f"  {name:{width}s} {str(d['split']):>5s} | {str(t['split']):<4s}{str(d['departs']):>5s} | {str(t['departs']):<4s}"
                     f"{d['eval_spread']:9.2e} | {t['eval_spread']:<9.2e} {d['distinct']:5.3f} | {t['distinct']:<5.3f}  "
                     f"{' '.join(f'{v:.3f}' for v in d['end_loss'])} | {' '.join(f'{v:.3f}' for v in t['end_loss'])}")
        for p in r["problems"]:
            lines.append(f"    NOT OK: {p}")
    return lines


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--world", type=int, action="append", help="world size (repeatable; default 2 and 4)")
    p.add_argument("--scenario", action="append", choices=sorted(n for n in RUNS if RUNS[n][0]))
    p.add_argument("--divsim")
    p.add_argument("--mpiexec")
    p.add_argument("--workdir")
    p.add_argument("--json")
    a = p.parse_args(argv)
    names = a.scenario or ["baseline", *[n for n in RUNS if RUNS[n][0]]]
    try:
        divsim = Divsim(a.divsim, a.mpiexec, a.workdir)
        results = {w: compare_world(divsim, w, names) for w in (a.world or [2, 4])}
    except ValidationError as e:
        print(f"ddp_peer: {e}", file=sys.stderr)
        return 2
    bad = 0
    for w, r in results.items():
        print("\n".join(table_lines(w, r)))
        bad += sum(len(v["problems"]) for v in r.values())
    if a.json:
        with open(a.json, "w") as f:
            json.dump({str(w): r for w, r in results.items()}, f, indent=1)
    print("signatures agree" if not bad else f"NOT OK: {bad} signature differences")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
