#!/usr/bin/python3
"""Writes docs/validation.md from measured numbers: runs the replay cases (100 steps, with the float64
reference), the negative controls, the long replays (1000 steps), the real-DDP comparison at W=2 and 4
and the seed claims, keeps every result as JSON in --results, and renders the tables from the JSON.

    validation/report.py [--results DIR] [--only replay|controls|long|unseen|ddp|seeds ...] [--render-only]
                         [--out docs/validation.md]

--render-only re-renders from the JSON already in --results (nothing is run); --only reruns some parts
and keeps the others' JSON. Takes about 15 minutes of CPU on one core for everything. Deliberately not
here: any measurement of its own; every number comes from replay_cases, ddp_peer or seed_claims.
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from validation import ddp_peer, replay_cases, rounding, seed_claims
from validation.common import REPO, Divsim, ValidationError

PARTS = ("replay", "controls", "long", "unseen", "ddp", "seeds", "rounding")
LONG_CASES = ("sgd_constant", "sgd_bn_accum4_w2", "adamw_cosine_warmup_label_smoothing")
LONG_STEPS = 1000


def measure(part, divsim):
    if part == "replay":
        return replay_cases.run_cases(divsim, list(replay_cases.CASES), 100, reference=True)
    if part == "controls":
        return replay_cases.run_controls(divsim, sorted(replay_cases.CONTROLS), 100)
    if part == "long":
        return replay_cases.run_cases(divsim, list(LONG_CASES), LONG_STEPS, reference=True)
    if part == "unseen":
        return replay_cases.run_unseen(divsim, list(replay_cases.UNSEEN))
    if part == "ddp":
        names = ["baseline", *[n for n in ddp_peer.RUNS if ddp_peer.RUNS[n][0]]]
        return {str(w): ddp_peer.compare_world(divsim, w, names) for w in (2, 4)}
    if part == "rounding":
        return rounding.check(os.path.join(os.path.dirname(divsim.exe), "tests", "divsim_round_filter"))
    return seed_claims.check(divsim, list(seed_claims.CLAIMS))


def e(v):
    return "–" if v is None else f"{v:.1e}"


def replay_section(cases, controls, long):
    out = ["## 1. Replay against PyTorch", "",
           "`validation/replay.py` rebuilds the run's network in `torch.nn` from the graph the run recorded (its "
           "`model` attribute: the MLP, the ResNet, the ViT or the GPT), loads `/init`, feeds `/train/samples` in "
           "order (every logical rank's micro-batches, gradients averaged over the ranks) and trains with "
           "`torch.optim`. Columns: maximum relative difference divsim vs torch float32 over the first 100 steps "
           "(loss: each rank's; gradient norms: the rank's own and the applied one; parameter norm; learning rate; "
           "rank 0's eval loss at steps 49 and 99), then the loss against a float64 torch replay (divsim / torch "
           "float32), and the verdict on the loss bound 1e-5.", "",
           "| case | W | divsim options | loss | grad norm (local) | grad norm | param norm | lr | eval loss "
           "| vs float64: divsim / torch f32 | verdict |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in cases.items():
        f64 = r.get("float64", {})
        t32 = f64.get("torch_float32", {}).get("rows as recorded", {})
        out.append(f"| {name} | {r['world_size']} | `{' '.join(r['args'])}` | {e(r['loss']['first'])} "
                   f"| {e(r['grad_norm_local']['first'])} | {e(r['grad_norm']['first'])} | {e(r['param_norm']['first'])} "
                   f"| {e(r['lr']['first'])} | {e(r.get('eval_loss'))} | {e(f64.get('divsim', {}).get('first'))} / "
                   f"{e(t32.get('first'))} | {r['verdict']} |")
    flips = [f"{n} (step {r['branch_flip']['step']}, ReLU input {r['branch_flip']['relu_margin']:.0e} x RMS from 0)"
             for n, r in cases.items() if r.get("branch_flip")]
    out += ["", "Branch flips seen (the local gradient norms leave float32 noise while the losses still agree, "
            "within two steps of a ReLU input within rounding of 0; the ResNet's BatchNorm2d and ReLUs amplify them): " + (", ".join(flips) if flips else "none") + ".", "",
            "### Negative controls", "",
            "The replay is handed a run whose recorded configuration says one value differently from what divsim "
            "ran; each must come out NOT OK.", "",
            "| control | replay told | loss (first 100) | first step above 1e-5 | verdict |", "|---|---|---|---|---|"]
    for name, r in controls.items():
        out.append(f"| {name} | `{r['change']}` | {e(r['loss']['first'])} | {r['first_step_above_bound']} | {r['verdict']} |")
    out += ["", f"### {LONG_STEPS} steps", "",
            "Three of the cases run for 1000 steps (a cosine schedule now spans 1000 steps, so its first 100 "
            "steps are not those of the table above). Float32 rounding differs between any two programs (Eigen's "
            "and the BLAS's GEMM blocking); training amplifies it once a ReLU input within rounding of 0 takes the "
            "other branch in one program, so after enough steps the figure is set by the dynamics, not by the "
            "implementation: compare it with torch float32 against torch float64 (torch's own float32 with each "
            "micro-batch's rows as recorded, reversed and rotated) in the same row.", "",
            "| case | W | loss, first 100 / all 1000 | first step > 1e-5 | vs float64: divsim | torch f32 (rows as recorded / reversed / rotated) | verdict |",
            "|---|---|---|---|---|---|---|"]
    for name, r in long.items():
        f = r["float64"]
        t = " / ".join(e(v["all"]) for v in f["torch_float32"].values())
        out.append(f"| {name} | {r['world_size']} | {e(r['loss']['first'])} / {e(r['loss']['all'])} "
                   f"| {r['first_step_above_bound']} | {e(f['divsim']['all'])} | {t} | {r['verdict']} |")
    return out


def unseen_section(unseen):
    out = ["### Outside the case matrix", "",
           "Configurations chosen before their results were seen (other widths, depths, learning rates, batch "
           "sizes, world sizes and step counts; `replay_cases.UNSEEN`), through the same export and replay path. "
           "*flip*: the step of the branch flip the verdict found, and how close to 0 the ReLU input was.", "",
           "| configuration | W | divsim options | loss, first 100 steps | first step > 1e-5 | flip | verdict |",
           "|---|---|---|---|---|---|---|"]
    for name, r in unseen.items():
        f = r.get("branch_flip")
        flip = f"step {f['step']} ({f['relu_margin']:.0e} x RMS)" if f else "–"
        out.append(f"| {name} | {r['world_size']} | `{' '.join(r['args'])}` | {e(r['loss']['first'])} "
                   f"| {r['first_step_above_bound']} | {flip} | {r['verdict']} |")
    counts = {v: sum(r["verdict"] == v for r in unseen.values()) for v in ("OK", "OK (float32-limited)", "NOT OK")}
    out += ["", f"{counts['OK']} OK, {counts['OK (float32-limited)']} OK (float32-limited), {counts['NOT OK']} NOT OK "
            f"of {len(unseen)}. *OK (float32-limited)*: the difference began as a branch flip, or only after "
            "torch's own float32 replays had left its float64 replay by more than the bound (the verdict's rules are "
            "in `validation/replay.py`).", ""]
    return out


def ddp_section(ddp):
    changes = "; ".join(f"{name} `" + " ".join(f"{k}={v}" for k, v in change.items()) + "`"
                        for name, (base, change, _, _) in ddp_peer.RUNS.items() if base is None and change)
    out = ["## 2. Real DDP peer", "",
           "`validation/ddp_peer.py`: the same scenario (`" + " ".join(f"{k}={v}" for k, v in ddp_peer.SCENARIO.items()
                                                              if not k.startswith("data")) + "`) under "
           "torch.distributed DDP (gloo, `torch.multiprocessing.spawn`, one thread per process) with the bug done "
           f"the PyTorch way (rank {ddp_peer.FAULTY_RANK}; one-off faults at step {ddp_peer.FAULT_STEP}), next to "
           "divsim with the matching fault; the torch network is the graph divsim's run recorded, with torch's own "
           "initial draw. Fault-free runs that change the scenario (the faults compared with them change it the "
           f"same way): {changes}. *split*: first step after whose update the ranks' parameters differ; "
           "*departs*: first step a rank's loss differs from the same side's fault-free run; *eval spread*: max - min "
           "over ranks of the final eval loss (each rank's own replica); *distinct*: distinct / consumed samples; "
           "*end loss*: each rank's mean loss over the last sixth of the steps. Cells are divsim | torch.", ""]
    for w, results in ddp.items():
        out += [f"### W = {w}", "",
                "| fault | split | departs | eval spread | eval acc spread | distinct | end loss per rank | signatures |",
                "|---|---|---|---|---|---|---|---|"]
        for name, r in results.items():
            d, t = r["divsim"], r["torch"]
            losses = " ".join(f"{v:.3f}" for v in d["end_loss"]) + " \\| " + " ".join(f"{v:.3f}" for v in t["end_loss"])
            verdict = "agree" if not r["problems"] else "differ: " + "; ".join(r["problems"])
            out.append(f"| {name} | {d['split']} \\| {t['split']} | {d['departs']} \\| {t['departs']} "
                       f"| {d['eval_spread']:.2e} \\| {t['eval_spread']:.2e} "
                       f"| {d['eval_accuracy_spread']:.4f} \\| {t['eval_accuracy_spread']:.4f} "
                       f"| {d['distinct']:.3f} \\| {t['distinct']:.3f} | {losses} | {verdict} |")
        out.append("")
    return out


def seeds_section(seeds):
    out = ["## 3. Seed claims", "",
           "`validation/seed_claims.py`: each claim of `../shared/seeds/` that divsim can test, as a divsim "
           "experiment. Required checks are the mechanism divsim models; optional ones a quantitative shape the "
           "report saw in its own model.", ""]
    for name, r in seeds.items():
        out += [f"### {name}: {r['verdict']}", "", r["claim"], ""]
        for k, v in r["measured"].items():
            out.append(f"- {k}: {seed_claims.fmt(v)}")
        for text, ok, required in r["checks"]:
            out.append(f"- [{'x' if ok else ' '}] {text}{'' if required else ' (optional)'}")
        out.append("")
    return out


def rounding_section(rounding):
    out = ["## 4. Precision conversions", "",
           "`validation/rounding.py`: divsim's bf16 / fp16 / TF32 rounding (`numerics/bits.hpp`, through the function "
           "the layers call) on every class of float32 bit pattern: zeros, subnormals, normals, exact ties and their "
           "neighbours at the format's rounding bit (every upper half with each of those low halves), fp16's "
           "subnormal ties, the largest finite values and their overflow, Inf, NaN of both signs and 8,000 payloads, "
           "and 4M random patterns. bf16 and fp16 must equal PyTorch's own conversion bit for bit, NaN bits "
           "included; TF32 (which PyTorch cannot do on the CPU) the PTX rule, NaN as any NaN.", "",
           "| format | reference | patterns | differ |", "|---|---|---:|---:|"]
    for r in rounding:
        out.append(f"| {r['format']} | {r['reference']} | {r['patterns']:,} | {r['differ']} |")
    return out + [""]


def provenance(results, meta):
    """Where the numbers come from: one run for all parts, or each part's own run (after --only)."""
    def where(m):
        return f"{m['date']} ({m['machine']}, torch {m['torch']}, {m['divsim']})"
    runs = {}
    for part in results:
        runs.setdefault(where(meta[part]), []).append(part)
    if len(runs) == 1:
        return f"Generated by `validation/report.py` on {next(iter(runs))}; every number below was measured by that run."
    return ("Generated by `validation/report.py`; every number below was measured by it, the parts on different "
            "runs: " + "; ".join(f"{', '.join(parts)} on {w}" for w, parts in runs.items()) + ".")


def render(results, meta):
    lines = ["# Validation", "",
             provenance(results, meta) + " Do not edit by hand: rerun `validation/report.py` (or `--render-only` "
             "after `--only PART`).", "",
             "The same checks run in the test suite: `ctest -L validation` (`-LE slow` leaves out the controls, the "
             "1000-step replay, the DDP comparison at W=4 and the seed claims). Each script also runs on its own:", "",
             "```",
             "validation/replay.py --ranks 2 -- --model.hidden=64,32 --optim.lr=0.01 --batch.global=64 --train.steps=100",
             "validation/replay.py --h5 RUN.h5        # a run recorded with record.init_params=true record.samples=true",
             "validation/replay_cases.py [--case NAME] [--controls] [--steps N] [--reference]",
             "validation/ddp_peer.py --world 2 [--scenario NAME]",
             "validation/seed_claims.py [--claim ID]",
             "validation/rounding.py --filter build/tests/divsim_round_filter",
             "```", ""]
    if all(k in results for k in ("replay", "controls", "long")):
        lines += replay_section(results["replay"], results["controls"], results["long"]) + [""]
    if "unseen" in results:
        lines += unseen_section(results["unseen"])
    if "ddp" in results:
        lines += ddp_section(results["ddp"])
    if "seeds" in results:
        lines += seeds_section(results["seeds"])
    if "rounding" in results:
        lines += rounding_section(results["rounding"])
    return "\n".join(lines).rstrip() + "\n"


def read_meta(results):
    """meta.json: part -> the run that measured it (date, machine, torch, divsim version)."""
    path = os.path.join(results, "meta.json")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        meta = json.load(f)
    if "date" in meta:  # one run for every part, as report.py wrote it before parts kept their own
        meta = {part: meta for part in PARTS}
    return meta


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", default=os.path.join(REPO, "outputs", "validation"), help="JSON results folder")
    p.add_argument("--only", action="append", choices=PARTS)
    p.add_argument("--render-only", action="store_true")
    p.add_argument("--out", default=os.path.join(REPO, "docs", "validation.md"))
    p.add_argument("--divsim")
    p.add_argument("--mpiexec")
    a = p.parse_args(argv)
    os.makedirs(a.results, exist_ok=True)
    try:
        if not a.render_only:
            divsim = Divsim(a.divsim, a.mpiexec, os.path.join(a.results, "runs"))
            import torch

            version = subprocess.run([divsim.exe, "--version"], capture_output=True, text=True).stdout.strip()
            now = {"date": datetime.date.today().isoformat(), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
                   "torch": torch.__version__, "divsim": version.splitlines()[0] if version else divsim.exe}
            meta = read_meta(a.results)
            for part in a.only or PARTS:
                print(f"report: measuring {part}", file=sys.stderr)
                with open(os.path.join(a.results, f"{part}.json"), "w") as f:
                    json.dump(measure(part, divsim), f, indent=1)
                meta[part] = now
                with open(os.path.join(a.results, "meta.json"), "w") as f:
                    json.dump(meta, f, indent=1)
        results = {}
        for part in PARTS:
            path = os.path.join(a.results, f"{part}.json")
            if os.path.exists(path):
                with open(path) as f:
                    results[part] = json.load(f)
        meta = read_meta(a.results)
    except (ValidationError, FileNotFoundError) as err:
        print(f"report: {err}", file=sys.stderr)
        return 2
    with open(a.out, "w") as f:
        f.write(render(results, meta))
    print(f"report: wrote {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
