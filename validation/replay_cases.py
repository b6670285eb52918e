#!/usr/bin/python3
"""The replay's case matrix (issue 5, part 1) and its negative controls.

Cases: SGD+momentum and AdamW; with and without BatchNorm (and SyncBN); gradient accumulation 1 and 4
(given, or derived from batch.max_micro); constant and cosine-with-warmup LR; label smoothing; nesterov,
weight decay and clipping; W = 1, 2 and 4 logical ranks; dropout 0. Each runs divsim for --steps steps and replays it (replay.assess).
Controls: the replay is handed a run whose recorded configuration was changed in one value, so torch
computes something slightly different from what divsim ran; each must come out NOT OK, which shows
the comparison can fail.

    validation/replay_cases.py [--case NAME ...] [--controls] [--steps 100] [--reference] [--json OUT]

Exit status 1 when a case is NOT OK or a control is not. Deliberately not here: the replay itself
(replay.py) and the report's prose (report.py).
"""
import argparse
import json
import os
import shutil
import sys

import h5py

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from validation.common import Divsim, ValidationError
from validation.replay import RECORD_ARGS, assess, report_lines

SGD = ["--optim.lr=0.02"]
ADAMW = ["--optim.type=adamw"]

# name: (MPI processes, divsim options); every case adds --train.steps and the replay's record keys.
CASES = {
    "sgd_constant": (1, [*SGD, "--schedule.type=constant"]),
    "sgd_cosine_warmup": (1, [*SGD, "--schedule.warmup_steps=20"]),
    "sgd_accum4_label_smoothing": (1, [*SGD, "--batch.accum_steps=4", "--loss.label_smoothing=0.1"]),
    "sgd_bn_accum4_w2": (2, [*SGD, "--model.batchnorm=true", "--batch.accum_steps=4"]),
    "sgd_syncbn_w2": (2, [*SGD, "--model.batchnorm=true", "--dist.sync_bn=true"]),
    "sgd_max_micro_w2": (2, [*SGD, "--batch.max_micro=32"]),  # accumulation derived from W: 4 x 32 per rank
    "sgd_nesterov_wd_clip_w4": (1, [*SGD, "--dist.world_size=4", "--optim.nesterov=true",
                                    "--optim.weight_decay=0.0005", "--optim.clip_norm=0.5"]),
    "adamw_cosine_warmup_label_smoothing": (1, [*ADAMW, "--optim.lr=0.0002", "--schedule.warmup_steps=20",
                                                "--loss.label_smoothing=0.1"]),
    "adamw_wd_narrow": (1, [*ADAMW, "--optim.lr=0.001", "--optim.weight_decay=0.05", "--model.hidden=64",
                            "--batch.global=128"]),
    # The other models, through the graph the run records: convolutions, BatchNorm2d, residual adds.
    "resnet_sgd_w2": (2, ["--model.type=resnet", "--model.channels=8,16", "--optim.lr=0.05", "--batch.global=32",
                          "--data.test_size=1000"]),
    "resnet_syncbn_accum2_w2": (2, ["--model.type=resnet", "--model.channels=8,16", "--model.blocks=2",
                                    "--dist.sync_bn=true", "--batch.accum_steps=2", "--optim.lr=0.02",
                                    "--batch.global=32", "--data.test_size=1000"]),
    # Attention, LayerNorm, GELU, patch and class tokens.
    "vit_adamw_w2": (2, ["--model.type=vit", "--model.dim=32", "--model.depth=2", "--model.heads=2", "--optim.type=adamw",
                         "--optim.lr=0.001", "--batch.global=32", "--data.test_size=1000"]),
    # Embeddings, causal attention, the tied head, and a loss over padded sequences normalised by the
    # global count of their targets.
    "gpt_adamw_w2": (2, ["--model.type=gpt", "--data.source=fortunes", "--model.block_size=32", "--model.dim=32",
                         "--model.depth=2", "--model.heads=2", "--optim.type=adamw", "--optim.lr=0.003",
                         "--batch.global=32", "--data.test_size=500"]),
}

# Configurations outside the matrix, other widths, depths, learning rates, batch sizes, world sizes and step
# counts, chosen before their results were seen (the report's "outside the case matrix" table):
# name: (MPI processes, divsim options including --train.steps).
UNSEEN = {
    "wide_high_lr": (1, ["--model.hidden=512,256", "--optim.lr=0.1", "--batch.global=128", "--train.steps=150"]),
    "narrow_w2": (2, ["--model.hidden=96", "--optim.lr=0.03", "--batch.global=96", "--train.steps=120"]),
    "deep_warmup_w4": (4, ["--model.hidden=200,100,50", "--optim.lr=0.05", "--batch.global=256", "--train.steps=100",
                           "--schedule.warmup_steps=10"]),
    "very_wide_lr0.2": (1, ["--model.hidden=1024", "--optim.lr=0.2", "--batch.global=64", "--train.steps=100"]),
    "adamw_w2": (2, ["--model.hidden=300", "--optim.type=adamw", "--optim.lr=0.003", "--batch.global=200",
                     "--train.steps=130"]),
    "bn_small_batch": (1, ["--model.hidden=128,128", "--model.batchnorm=true", "--optim.lr=0.1", "--batch.global=50",
                           "--train.steps=200"]),
    "plain_sgd_lr0.5_w2": (2, ["--model.hidden=64,32", "--optim.lr=0.5", "--batch.global=32", "--train.steps=100",
                               "--optim.momentum=0"]),
    "accum4_smoothing_w4": (4, ["--optim.lr=0.05", "--train.steps=100", "--batch.accum_steps=4",
                                "--loss.label_smoothing=0.05"]),
    "default_model": (1, ["--train.steps=100"]),
}

# name: (case whose run is reused, section, key, value the replay is told instead)
CONTROLS = {
    "momentum_0.88": ("sgd_constant", "optim", "momentum", "0.88"),
    "warmup_19": ("sgd_cosine_warmup", "schedule", "warmup_steps", "19"),
    "label_smoothing_0.105": ("sgd_accum4_label_smoothing", "loss", "label_smoothing", "0.105"),
    "bn_eps_1e-4": ("sgd_bn_accum4_w2", "model", "bn_eps", "0.0001"),
    "adamw_beta2_0.998": ("adamw_wd_narrow", "optim", "beta2", "0.998"),
}


# model.* settings the replay reads from the recorded graph (the `model` attribute) rather than from the
# configuration: the layer option each one sets, and the styles that have it.
GRAPH_OPTIONS = {"bn_eps": ("eps", {"batchnorm1d", "batchnorm2d"}),
                 "bn_momentum": ("momentum", {"batchnorm1d", "batchnorm2d"})}


def with_changed_config(path, section, key, value, out):
    """A copy of the run at `path` whose config attribute says `section.key = value` (and whose graph
    does too, for the settings the replay builds the network from)."""
    shutil.copyfile(path, out)
    with h5py.File(out, "r+") as f:
        text = f.attrs["config"]
        text = text.decode() if isinstance(text, bytes) else str(text)
        lines, current, done = text.splitlines(), None, False
        for i, line in enumerate(lines):
            s = line.strip()
            if s.startswith("["):
                current = s.strip("[]")
            elif current == section and s.split("=")[0].strip() == key:
                lines[i] = f"{key} = {value}"
                done = True
        if not done:
            raise ValidationError(f"{section}.{key} not in the run's configuration")
        f.attrs["config"] = "\n".join(lines) + "\n"
        if section == "model" and key in GRAPH_OPTIONS:
            option, styles = GRAPH_OPTIONS[key]
            graph = json.loads(f.attrs["model"])
            for layer in graph["layers"]:
                if layer["style"] in styles:
                    layer["options"][option] = float(value)
            f.attrs["model"] = json.dumps(graph)
    return out


_RAN = {}  # (case, steps) -> the run's file, written by this process: the controls reuse them


def run_cases(divsim, names, steps, reference=False):
    """{name: assess() result} for the named cases, each at `steps` steps."""
    results = {}
    for name in names:
        ranks, args = CASES[name]
        path = divsim.run(name, [*args, f"--train.steps={steps}", "--train.eval_every=50", *RECORD_ARGS], ranks=ranks)
        _RAN[(name, steps)] = path
        results[name] = assess(path, with_reference=reference)
        results[name]["ranks"], results[name]["args"] = ranks, args
    return results


def run_unseen(divsim, names):
    """{name: assess() result} for the named UNSEEN configurations (each at its own step count)."""
    results = {}
    for name in names:
        ranks, args = UNSEEN[name]
        path = divsim.run("unseen-" + name, [*args, *RECORD_ARGS], ranks=ranks)
        results[name] = assess(path)
        results[name]["ranks"], results[name]["args"] = ranks, args
    return results


def run_controls(divsim, names, steps):
    results = {}
    for name in names:
        case, section, key, value = CONTROLS[name]
        if (case, steps) not in _RAN:  # never a file left by another binary
            run_cases(divsim, [case], steps)
        source = _RAN[(case, steps)]
        changed = with_changed_config(source, section, key, value, os.path.join(divsim.workdir, f"control-{name}.h5"))
        results[name] = assess(changed)
        results[name]["change"] = f"{section}.{key} = {value}"
    return results


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--case", action="append", choices=sorted(CASES), help="run these cases (default: all)")
    p.add_argument("--controls", action="store_true", help="run the negative controls instead of the cases")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--reference", action="store_true", help="always measure the float64 reference")
    p.add_argument("--divsim")
    p.add_argument("--mpiexec")
    p.add_argument("--workdir")
    p.add_argument("--json", help="write the results here")
    a = p.parse_args(argv)
    try:
        divsim = Divsim(a.divsim, a.mpiexec, a.workdir)
        if a.controls:
            results = run_controls(divsim, sorted(CONTROLS), a.steps)
        else:
            results = run_cases(divsim, a.case or list(CASES), a.steps, a.reference)
    except ValidationError as e:
        print(f"replay_cases: {e}", file=sys.stderr)
        return 2
    failed = []
    for name, r in results.items():
        label = f"control {name} (replay told {r['change']})" if a.controls else f"case {name}"
        print(f"== {label}")
        print("\n".join(report_lines(r)))
        ok = (r["verdict"] == "NOT OK") if a.controls else (r["verdict"] != "NOT OK")
        print(f"-> {'OK' if ok else 'NOT OK'}" + (": the changed configuration was detected" if a.controls and ok else ""))
        if not ok:
            failed.append(name)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    if failed:
        print(f"NOT OK: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
