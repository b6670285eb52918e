#!/usr/bin/python3
"""Replay of a divsim run in PyTorch, step by step.

The run's `model` attribute (its layer graph) says what network to build (validation/torch_graph.py, any
model.type), and its effective configuration (root attribute `config`) the rest: torch.optim.SGD or
AdamW, cross-entropy with label smoothing (or the documented ASL), the closed-form LR schedule, torch.nn.utils.clip_grad_norm_. The run's initial parameters (/init, written
with record.init_params=true) are loaded into it and the run's samples (/train/samples, written with
record.samples=true) are fed in the same order: every logical rank's micro-batches, each rank's
gradient computed on its own, then averaged over the W ranks as DDP does. Compared with what divsim
recorded: per-rank loss and local gradient norm, the applied gradient's norm, the parameter norm, the
learning rate, and rank 0's evaluations.

    validation/replay.py [--ranks N] [--bound 1e-5] [--bound-steps 100] -- <divsim options>
    validation/replay.py --h5 RUN.h5          (an existing run recorded with both record keys)

Verdict on the loss over the first --bound-steps steps (exit status 0 for both OKs, 1 for NOT OK, 2
when the run cannot be replayed):
  OK                   divsim and torch float32 agree within the bound.
  OK (float32-limited) they do not, but the difference is float32 rounding amplified by training, not
                       a different computation, because either
                       (a) the first departure is a branch flip: everything agrees at step 0, then the
                       local gradient norms leave float32 noise (1e-6) at a step where the losses still
                       agree within 1e-6 (the forward passes match, so the departure is born in a
                       backward pass), and within two steps of it a ReLU input lay within 1e-6 x its
                       layer's RMS of 0, so one program's rounding took the other side of the kink
                       (where ReLU's derivative jumps from 0 to 1); or
                       (b) torch's own float32 replay (as is, or with each micro-batch's rows in another
                       order: the same sums, rounded differently) leaves a float64 replay by more than
                       the bound at a step H inside the window, so no float32 program can meet the bound
                       here, and divsim agrees with torch float32 within the bound before H.
  NOT OK               neither: divsim departs where torch's float32 arithmetic does not.

Deliberately not replayed: dropout > 0 (divsim keys a mask by sample and step, torch by call order),
matmul formats other than fp32, AMP, augmentation, synthetic data, and faults.
"""
import argparse
import json
import os
import sys

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from validation.common import Divsim, ValidationError, load_data, read_run, rel_diff, scheduled_lr, unpadded
from validation.torch_graph import from_run, styles

RECORD_ARGS = ["--record.init_params=true", "--record.samples=true"]
SERIES = ("loss", "grad_norm_local", "grad_norm", "param_norm", "lr")
NOISE = 1e-6        # float32 agreement level of two correct programs before any branch flip
TIE_MARGIN = 1e-6   # a ReLU input this close to 0 (relative to its layer's RMS) can flip under rounding
ROW_ORDERS = ("reversed", "rotated")  # the float32 variants tried before a difference is blamed on divsim


def check_replayable(cfg, data, model):
    """Raises ValidationError naming the first setting the replay cannot reproduce."""
    refusals = [
        (cfg.faults, "fault: the replay reproduces fault-free runs only"),
        ("dropout" in styles(model.graph), "dropout layers: divsim keys dropout masks by (step, sample), torch by call order"),
        (cfg.text("precision.matmul") != "fp32", "precision.matmul must be fp32 (torch's CPU matmul has no TF32/BF16 emulation)"),
        (cfg.text("precision.amp") != "none", "precision.amp must be none"),
        (cfg.bool("data.augment"), "data.augment=true: augmentations are drawn from divsim's keyed streams"),
        (cfg.text("model.type") == "gpt" and cfg.text("loss.type") != "cross_entropy",
         "loss.type must be cross_entropy for a sequence model"),
        ("train/samples" not in data, "record.samples=true is needed (/train/samples is missing)"),
        (not any(k.startswith("init/") for k in data), "record.init_params=true is needed (/init is missing)"),
    ]
    for bad, why in refusals:
        if bad:
            raise ValidationError(f"cannot replay: {why}")


def accumulation(cfg, world, per_rank_step):
    """Micro-steps per optimizer step, as docs/user-guide.md plans them: batch.accum_steps, or with
    batch.max_micro the least count from accum_steps up whose per-rank micro-batch fits under it."""
    accum = cfg.int("batch.accum_steps")
    max_micro = cfg.int("batch.max_micro") if "batch.max_micro" in cfg.flat else 0  # older files lack the key
    if cfg.int("batch.per_rank") > 0 or max_micro <= 0:
        return accum
    glob = cfg.int("batch.global")
    for a in range(accum, glob // world + 1):
        if glob % (a * world) == 0 and glob // (a * world) <= max_micro and per_rank_step % a == 0:
            return a
    raise ValidationError(f"batch.max_micro: cannot rebuild the run's accumulation count (per-rank step {per_rank_step})")


def make_optimizer(cfg, params):
    import torch

    kind = cfg.text("optim.type")
    if kind == "sgd":
        return torch.optim.SGD(params, lr=cfg.float("optim.lr"), momentum=cfg.float("optim.momentum"),
                               nesterov=cfg.bool("optim.nesterov"), weight_decay=cfg.float("optim.weight_decay"),
                               foreach=False)
    if kind == "adamw":
        return torch.optim.AdamW(params, lr=cfg.float("optim.lr"), betas=(cfg.float("optim.beta1"), cfg.float("optim.beta2")),
                                 eps=cfg.float("optim.eps"), weight_decay=cfg.float("optim.weight_decay"), foreach=False)
    raise ValidationError(f"optim.type={kind} is not known to the replay")


def per_sample_loss(cfg, logits, labels):
    """Per-target training loss as divsim documents it: one per sample for a classifier (the caller takes
    the mean over the micro-batch), one per position for a sequence model, 0 where the target is padding
    (-1; the caller divides by the step's count of the others)."""
    import torch
    import torch.nn.functional as F

    if logits.dim() == 3:
        logits, labels = logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)
    if cfg.text("loss.type") == "cross_entropy":
        return F.cross_entropy(logits, labels, reduction="none", ignore_index=-1,
                               label_smoothing=cfg.float("loss.label_smoothing"))
    # ASL, summed over classes: positives -(1-p)^gp log p, negatives -pm^gn log(1-pm), pm = max(p - margin, 0)
    p = torch.sigmoid(logits)
    pos = F.one_hot(labels, logits.shape[1]).bool()
    pm = torch.clamp(p - cfg.float("loss.margin"), min=0.0)
    l_pos = -((1 - p) ** cfg.float("loss.gamma_pos")) * F.logsigmoid(logits)
    l_neg = -(pm ** cfg.float("loss.gamma_neg")) * torch.log1p(-pm)
    return torch.where(pos, l_pos, l_neg).sum(dim=1)


def load_init(model, data):
    import torch

    state = model.state_dict()
    for name, p in model.named_parameters():
        layer, param = name.rsplit(".", 1)
        key = f"init/{layer}/{param}"
        if key not in data:
            raise ValidationError(f"/{key} missing: the run's model does not match its configuration")
        value = torch.from_numpy(np.asarray(data[key], dtype=np.float32)).to(p.dtype)
        if tuple(value.shape) != tuple(p.shape):
            raise ValidationError(f"/{key} has shape {tuple(value.shape)}, the configured model expects {tuple(p.shape)}")
        state[name] = value
    model.load_state_dict(state)


def recorded(path, steps=None):
    """What divsim recorded, in replay()'s layout (rank 0's columns where the replay has one value)."""
    data, _, _ = read_run(path)
    n = len(data["train/step"]) if steps is None else min(steps, len(data["train/step"]))
    e = [i for i, s in enumerate(data["eval/step"]) if s < n]
    return {"loss": data["train/loss"][:n], "grad_norm_local": data["train/grad_norm_local"][:n],
            "grad_norm": data["train/grad_norm"][:n, 0], "param_norm": data["train/param_norm"][:n, 0],
            "lr": data["train/lr"][:n, 0], "eval_step": [int(s) for s in data["eval/step"][e]],
            "eval_loss": list(data["eval/loss"][e, 0]), "eval_accuracy": list(data["eval/accuracy"][e, 0])}


def replay(path, steps=None, dtype="float32", row_order=None):
    """Replays the first `steps` steps (all by default) of the run in `path` in torch; returns a dict of
    arrays as recorded() does (grad_norm_local is NaN where it is not defined). dtype="float64" is the
    rounding-free reference; row_order ("reversed" | "rotated") feeds each micro-batch's rows in another
    order: the same mathematics with different float32 rounding."""
    import torch

    torch.set_num_threads(1)
    dt = getattr(torch, dtype)
    data, cfg, W = read_run(path)
    model = from_run(path).to(dt)
    check_replayable(cfg, data, model)
    x_train, y_train, x_test, y_test, classes = load_data(cfg)
    x_train, y_train = torch.from_numpy(x_train).to(dt), torch.from_numpy(y_train)
    x_test, y_test = torch.from_numpy(x_test).to(dt), torch.from_numpy(y_test)

    samples = data["train/samples"]  # [S, W, B]
    S, _, B = samples.shape
    n = S if steps is None else min(steps, S)
    accum = accumulation(cfg, W, B)
    mb = B // accum
    rows = {None: np.arange(mb), "reversed": np.arange(mb)[::-1], "rotated": np.roll(np.arange(mb), mb // 2)}[row_order]
    base_lr = cfg.float("optim.lr")
    if cfg.text("batch.lr_scaling") == "linear":
        base_lr *= W * B / cfg.int("batch.base_global")
    clip = cfg.float("optim.clip_norm")
    sync_bn = cfg.bool("dist.sync_bn") and W > 1 and bool({"batchnorm1d", "batchnorm2d"} & styles(model.graph))

    load_init(model, data)
    params = list(model.parameters())
    opt = make_optimizer(cfg, params)
    buffers = [b for b in model.buffers() if b.dtype.is_floating_point]
    eval_steps = {int(s) for s in data["eval/step"] if s < n}

    out = {"loss": np.zeros((n, W)), "grad_norm_local": np.full((n, W), np.nan), "grad_norm": np.zeros(n),
           "param_norm": np.zeros(n), "lr": np.zeros(n), "relu_margin": np.full(n, np.inf),
           "eval_step": [], "eval_loss": [], "eval_accuracy": []}
    current = [0]  # the step the ReLU hooks attribute their margins to

    def relu_margin(module, inputs, output):
        if module.training:
            z = inputs[0].detach()
            rms = float(z.pow(2).mean().sqrt())
            if rms > 0:
                out["relu_margin"][current[0]] = min(out["relu_margin"][current[0]], float(z.abs().min()) / rms)

    for m in model.modules():
        if isinstance(m, torch.nn.ReLU):
            m.register_forward_hook(relu_margin)

    def batch(step, rank, micro):
        idx = torch.from_numpy(samples[step, rank, micro * mb:(micro + 1) * mb][rows].astype(np.int64))
        return x_train[idx], y_train[idx]

    def norm(tensors):
        return float(np.sqrt(sum(float((t.double() ** 2).sum()) for t in tensors)))

    # A sequence model's loss is the mean over the step's unpadded targets of all ranks; each rank scales
    # its sum by W / that count so DDP's average gives it (docs/models.md). A classifier's is the mean
    # over its micro-batch divided by the micro-steps, as PyTorch's recipe writes it.
    sequences = y_train.dim() == 2

    def counted(step, rank):
        return int((y_train[torch.from_numpy(samples[step, rank].astype(np.int64))] != -1).sum()) if sequences else B

    def backward(lv, step_targets):
        (lv.sum() * (W / step_targets) if sequences else lv.mean() / accum).backward()

    model.train()
    for step in range(n):
        current[0] = step
        lr = scheduled_lr(cfg, step, S, base_lr)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=False)
        per_rank = [counted(step, r) for r in range(W)]
        step_targets = sum(per_rank)
        if sync_bn:
            # SyncBN with DDP's average is one batch of all ranks' micro-batches and its mean loss.
            for m in range(accum):
                xs, ys = zip(*(batch(step, r, m) for r in range(W)))
                lv = per_sample_loss(cfg, model(torch.cat(xs)), torch.cat(ys))
                (lv.mean() / accum).backward()
                out["loss"][step] += lv.detach().double().view(W, mb).sum(dim=1).numpy() / B
            reduced = [p.grad.clone() for p in params]
        else:
            before = [b.clone() for b in buffers]
            reduced, rank0_buffers = None, None
            for r in range(W):
                for b, v in zip(buffers, before):
                    b.copy_(v)
                opt.zero_grad(set_to_none=False)
                for m in range(accum):
                    x, y = batch(step, r, m)
                    lv = per_sample_loss(cfg, model(x), y)
                    backward(lv, step_targets)
                    out["loss"][step, r] += float(lv.detach().double().sum()) / per_rank[r]
                grads = [p.grad.clone() for p in params]
                out["grad_norm_local"][step, r] = norm(grads)
                reduced = grads if reduced is None else [a + g for a, g in zip(reduced, grads)]
                if r == 0:
                    rank0_buffers = [b.clone() for b in buffers]
            reduced = [g / W for g in reduced]
            for b, v in zip(buffers, rank0_buffers):  # rank 0's running statistics, as DDP broadcasts them
                b.copy_(v)
        for p, g in zip(params, reduced):
            p.grad.copy_(g)
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(params, clip)
        out["grad_norm"][step] = norm(p.grad for p in params)
        opt.step()
        out["param_norm"][step] = norm(p.detach() for p in params)
        out["lr"][step] = lr
        if step in eval_steps:
            model.eval()
            with torch.no_grad():
                logits = torch.cat([model(x_test[i:i + 1000]) for i in range(0, len(x_test), 1000)])
                logits, y = unpadded(logits, y_test)
                nll = -torch.log_softmax(logits, dim=1).gather(1, y[:, None]).double()
                out["eval_step"].append(step)
                out["eval_loss"].append(float(nll.mean()))
                out["eval_accuracy"].append(float((logits.argmax(dim=1) == y).double().mean()))
            model.train()
    return out


def loss_profile(a, b):
    """Per step: the largest relative loss difference over the ranks."""
    return rel_diff(a["loss"], b["loss"]).max(axis=1)


def first_above(profile, bound):
    above = np.nonzero(profile > bound)[0]
    return int(above[0]) if len(above) else None


def compare(ref, rep, bound_steps):
    """Maxima of the relative differences of ref vs rep: over the first `bound_steps` and over all steps."""
    k = min(bound_steps, len(rep["lr"]))
    result = {"steps": len(rep["lr"]), "bound_steps": k, "world_size": int(ref["loss"].shape[1])}
    for key in SERIES:
        d = rel_diff(ref[key], rep[key])
        result[key] = {"first": float(np.nanmax(d[:k])) if np.isfinite(d[:k]).any() else None,
                       "all": float(np.nanmax(d)) if np.isfinite(d).any() else None}
    if rep["eval_step"]:
        result["eval_loss"] = float(rel_diff(ref["eval_loss"], rep["eval_loss"]).max())
        result["eval_accuracy_abs"] = float(np.abs(np.subtract(ref["eval_accuracy"], rep["eval_accuracy"])).max())
    return result


def branch_flip(ref, rep):
    """The first departure of rep from ref if it is a backward branch flip (see the module comment):
    {"step", "grad_step", "relu_margin"}, else None."""
    g = rel_diff(ref["grad_norm_local"], rep["grad_norm_local"])
    if not np.isfinite(g).any():
        return None
    g = np.nanmax(g, axis=1)
    onset = first_above(g, NOISE)  # the local gradients leave float32 noise here ...
    losses = loss_profile(ref, rep)
    if onset is None or onset == 0 or losses[:onset + 1].max() > NOISE:  # ... the forward passes still agree
        return None
    agree = first_above(losses, NOISE)  # the window: two steps either side, while the losses agree
    lo, hi = max(1, onset - 2), min(onset + 2, len(losses) - 1 if agree is None else agree - 1)
    margins = rep["relu_margin"][lo:hi + 1]
    tie = int(np.argmin(margins))
    if margins[tie] > TIE_MARGIN:
        return None
    return {"step": lo + tie, "grad_step": onset, "relu_margin": float(margins[tie])}


def assess(path, steps=None, bound=1e-5, bound_steps=100, with_reference=False):
    """The replay verdict (see the module comment). with_reference=True always measures the float64
    reference and every float32 row order, for the report."""
    ref = recorded(path, steps)
    t32 = replay(path, steps)
    result = compare(ref, t32, bound_steps)
    k = result["bound_steps"]
    result["bound"] = bound
    result["first_step_above_bound"] = first_above(loss_profile(ref, t32), bound)
    result["branch_flip"] = branch_flip(ref, t32)
    strict_ok = result["loss"]["first"] <= bound
    if (strict_ok or result["branch_flip"]) and not with_reference:
        result["verdict"] = "OK" if strict_ok else "OK (float32-limited)"
        return result
    t64 = replay(path, steps, "float64")
    floor = {"rows as recorded": loss_profile(t32, t64)}
    for order in ROW_ORDERS:
        if not with_reference and max(float(p[:k].max()) for p in floor.values()) > bound:
            break
        floor[f"rows {order}"] = loss_profile(replay(path, steps, "float32", order), t64)
    d64 = loss_profile(ref, t64)
    result["float64"] = {"divsim": {"first": float(d64[:k].max()), "all": float(d64.max()),
                                    "first_step_above_bound": first_above(d64, bound)},
                         "torch_float32": {name: {"first": float(p[:k].max()), "all": float(p.max()),
                                                  "first_step_above_bound": first_above(p, bound)}
                                           for name, p in floor.items()}}
    horizon = min((v["first_step_above_bound"] for v in result["float64"]["torch_float32"].values()
                   if v["first_step_above_bound"] is not None and v["first_step_above_bound"] < k), default=None)
    result["float32_horizon"] = horizon
    if strict_ok:
        result["verdict"] = "OK"
    elif result["branch_flip"] or (horizon is not None and result["first_step_above_bound"] >= horizon):
        result["verdict"] = "OK (float32-limited)"
    else:
        result["verdict"] = "NOT OK"
    return result


def report_lines(result):
    n, k, bound = result["steps"], result["bound_steps"], result["bound"]
    lines = [f"replay W={result['world_size']}, {n} steps: max relative difference, divsim vs torch float32"]
    for key in SERIES:
        v = result[key]
        if v["first"] is None:
            lines.append(f"  {key:16s} not defined for this run (SyncBN couples the ranks' local gradients)")
            continue
        lines.append(f"  {key:16s} first {k}: {v['first']:.3e}   all {n}: {v['all']:.3e}")
    if "eval_loss" in result:
        lines.append(f"  eval loss (rank 0) {result['eval_loss']:.3e} relative, accuracy {result['eval_accuracy_abs']:.1e} absolute")
    if "float64" in result:
        f = result["float64"]
        lines.append(f"  against torch float64 (loss, first {k} / all {n} steps, first step above {bound:g}):")
        rows = [("divsim", f["divsim"])] + [(f"torch float32, {name}", v) for name, v in f["torch_float32"].items()]
        for name, v in rows:
            lines.append(f"    {name:32s} {v['first']:.3e} / {v['all']:.3e}   {v['first_step_above_bound']}")
    if result.get("float32_horizon") is not None:
        lines.append(f"  torch float32 itself leaves float64 by more than {bound:g} at step {result['float32_horizon']}")
    if result["branch_flip"]:
        f = result["branch_flip"]
        lines.append(f"  branch flip: a ReLU input within {f['relu_margin']:.1e} x RMS of 0 at step {f['step']}; "
                     f"local gradient norms leave float32 noise ({NOISE:g}) at step {f['grad_step']} while the losses agree")
    lines.append(f"  loss bound {bound:g} over the first {k} steps: {result['verdict']}"
                 + (f" (first exceeded at step {result['first_step_above_bound']})" if result["verdict"] != "OK" else ""))
    return lines


def main(argv):
    own, divsim_args = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, default=1, help="MPI processes for the divsim run")
    p.add_argument("--h5", help="replay this existing run instead of running divsim")
    p.add_argument("--divsim", help="divsim binary (default: $DIVSIM or build*/divsim)")
    p.add_argument("--mpiexec", help="mpiexec (default: $MPIEXEC, mpiexec.mpich or mpiexec)")
    p.add_argument("--workdir", help="folder for the divsim run (default: a new temporary folder)")
    p.add_argument("--steps", type=int, help="replay only the first N steps")
    p.add_argument("--bound", type=float, default=1e-5, help="max relative loss difference allowed")
    p.add_argument("--bound-steps", type=int, default=100, help="steps the bound applies to")
    p.add_argument("--reference", action="store_true", help="always measure the float64 reference")
    p.add_argument("--json", help="also write the result as JSON here")
    a = p.parse_args(own)
    try:
        path = a.h5 or Divsim(a.divsim, a.mpiexec, a.workdir).run("replay", [*divsim_args, *RECORD_ARGS], ranks=a.ranks)
        result = assess(path, a.steps, a.bound, a.bound_steps, a.reference)
    except ValidationError as e:
        print(f"replay: {e}", file=sys.stderr)
        return 2
    print("\n".join(report_lines(result)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    return 1 if result["verdict"] == "NOT OK" else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
