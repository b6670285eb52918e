"""diagnose(run, reference=None): find the first place where a run's replicas (or the run and its
reference) part, name the symptom, rank likely causes from the fault catalog, and say it in a paragraph.

It assembles: the within-run findings and, with a reference, the comparison's first difference
(detectors.py), the cause ranking (evidence.py), the symptom class of seed 000 §1.1 (from step 0 /
equal then drifts / every step slightly different / rerun differs, plus seed 002's sawtooth), and a
human summary. A reference whose configuration differs (beyond the fault lines and run.IDENTITY_KEYS)
is said first: every difference from it may be that change's own consequence, so what the comparison
shows is reported as expected and scores no cause; only the run's own findings do. A blind diagnosis
loads the runs blind (run.py), so /faults, the config's fault lines and events naming a fault are never
read. It does not plot (plots.py) or print (__main__.py).
"""
import json

from .compare import Comparison
from .detectors import NOISE, SPLIT_LAST_BITS, loss_onset_magnitude, reference_findings, within_run_findings
from .evidence import rank_causes
from .run import Run

SYMPTOMS = {
    "none": "no divergence: replicas stay bitwise in sync",
    "from_step_0": "differs from the first step: the data path or the initial state (seed 000 §1.1, type 1)",
    "drift": "equal at first, then drifts apart: state that accumulates (BN statistics, optimizer state, "
             "a missed update) (seed 000 §1.1, type 2)",
    "per_step_noise": "every step slightly different, same trend: floating-point paths (seed 000 §1.1, type 3)",
    "rerun_differs": "the same set-up run again differs in the last bits: non-deterministic code "
                     "(seed 000 §1.1, type 4)",
}
# Findings that are properties of the whole run, not an onset.
_NO_ONSET = {"rank_loss_offset", "rank_grad_norm_offset", "ref_world_size_differs"}


def describe_config_diff(diff):
    """["key = mine here, theirs in the reference", ...] of a Comparison's config_diff."""
    return [f"{k} = {_value(mine)} here, {_value(theirs)} in the reference" for k, (mine, theirs) in diff.items()]


def _value(v):
    if v is None:
        return "(unset)"
    return str(v).lower() if isinstance(v, bool) else str(v)  # as the config writes it


class Diagnosis:
    """The result of diagnose(): `.config_diff` (against the reference), `.causes`, `.symptom`,
    `.first_divergent_step`, `.replicas`, `.divergence` (against the reference), `.findings` (scored),
    `.expected` (the reference's findings when the configurations differ: shown, never scored), `.summary`;
    `.to_dict()`, `.to_json()`, `str()`."""

    def __init__(self, run, reference, comparison, findings, expected=()):
        self.run, self.reference, self.comparison, self.findings = run, reference, comparison, findings
        self.config_diff = comparison.config_diff if comparison else {}
        self.expected = list(expected)
        self.causes = rank_causes(findings)
        self.replicas = self._replicas()
        d = comparison and (comparison.first_difference or comparison.first_divergence)
        self.divergence = d.to_dict() if d else None
        if comparison:
            self.divergence_beyond_tolerance = (comparison.first_divergence.to_dict()
                                                if comparison.first_divergence else None)
        onsets = [f.step for f in findings if f.step is not None and f.key not in _NO_ONSET]
        self.first_divergent_step = min(onsets) if onsets else None
        self.sawtooth = any(f.key == "sawtooth" for f in findings)
        self.symptom = self._symptom(d)
        self.summary = self._summary()

    def _replicas(self):
        split = next((f for f in self.findings if f.key == "replicas_split"), None)
        if split is None:
            return {"in_sync": True, "first_split_step": None, "groups": [list(range(self.run.world_size))]}
        return {"in_sync": False, "first_split_step": split.step, "groups": split.data["groups"],
                "param_norm_spread": split.data["param_norm_spread"]}

    def _symptom(self, d):
        if self.first_divergent_step is None and d is None:
            return "none"
        if d is not None:
            step = d.step
            # The loss tells the size best (one step later for differences born in the update);
            # where it does not move (eval-only differences), the first difference's own size.
            magnitude = loss_onset_magnitude(self.comparison, d.step) or d.magnitude
            if magnitude <= SPLIT_LAST_BITS:
                return "rerun_differs" if self.comparison.same_setup else "per_step_noise"
            if magnitude <= NOISE:
                return "per_step_noise"
        else:  # within the run: replicas that part in the last bits only are numerical noise
            step = self.first_divergent_step
            spread = self.replicas.get("param_norm_spread")
            if spread is not None and self.replicas["first_split_step"] == step and spread <= SPLIT_LAST_BITS:
                return "per_step_noise"
        return "from_step_0" if step == 0 else "drift"

    def _summary(self):
        run, parts = self.run, []
        n = len(run.steps)
        if self.config_diff:
            parts.append(f"The configuration differs from that of the reference {self.comparison.reference.name!r}: "
                         f"{'; '.join(describe_config_diff(self.config_diff))}. Differences from the reference are "
                         "what that change does, so they name no fault.")
        if self.replicas["in_sync"]:
            replicas = "The one replica" if run.world_size == 1 else f"The {run.world_size} replicas"
            parts.append(f"{replicas} of {run.name!r} stayed bitwise in sync over all {n} steps.")
        else:
            parts.append(f"The replicas of {run.name!r} split at step {self.replicas['first_split_step']} into groups "
                         f"{self.replicas['groups']}.")
        if self.comparison is not None:
            d = self.comparison.first_difference or self.comparison.first_divergence
            ref = self.comparison.reference.name
            if d is None:
                same = "bit for bit" if self.comparison.same_setup else (
                    f"within {self.comparison.precision} tolerance (rtol {self.comparison.rtol:g}, "
                    f"atol {self.comparison.atol:g})")
                parts.append(f"It matches the reference {ref!r} {same}.")
            else:
                where = (f"rank{'s' if len(d.ranks) != 1 else ''} {', '.join(map(str, d.ranks))}" if d.ranks
                         else "the global loss")
                layer = f", first in layer {d.layer}" if d.layer else ""
                expected = " (expected: the configurations differ)" if self.config_diff else ""
                parts.append(f"Against {ref!r} it first differs at step {d.step} in the {d.phase} phase "
                             f"({d.direction} first) on {where}{layer}, relative size {d.magnitude:.1e}{expected}.")
                tol = self.comparison.first_divergence
                if d.bitwise and tol is not None and tol.step != d.step:
                    parts.append(f"The difference exceeds {self.comparison.precision} tolerance from step {tol.step}.")
                elif d.bitwise and tol is None:
                    parts.append(f"It stays within {self.comparison.precision} tolerance throughout.")
        if self.symptom != "none":
            saw = ", with a sawtooth loss (seed 002)." if self.sawtooth else "."
            parts.append(f"Symptom: {SYMPTOMS[self.symptom]}{saw}")
        if self.causes:
            best = self.causes[0]
            own = "From the run's own findings, the most" if self.config_diff else "Most"
            parts.append(f"{own} likely cause: {best['fault']} (score {best['score']:g}), because "
                         f"{best['evidence'][0].rstrip('.')}.")
            others = [c["fault"] for c in self.causes[1:4]]
            if others:
                parts.append(f"Also consistent with: {', '.join(others)}.")
        elif self.config_diff:
            parts.append("No detector fired on the run itself: no sign of a fault; the configuration difference "
                         "accounts for the differences from the reference.")
        elif self.symptom == "none":
            parts.append("No detector fired: no sign of a fault.")
        else:
            parts.append("No catalog fault explains it.")
        return " ".join(parts)

    def to_dict(self):
        out = {"run": self.run.path, "reference": self.reference.path if self.reference else None}
        if self.comparison is not None:
            out["config_diff"] = {k: list(v) for k, v in self.config_diff.items()}
        out.update({
            "blind": self.run.blind, "partial": self.run.partial, "world_size": self.run.world_size,
            "steps": len(self.run.steps),
            "first_divergent_step": self.first_divergent_step, "replicas": self.replicas,
            "divergence": self.divergence,
            "symptom": {"class": self.symptom, "sawtooth": self.sawtooth, "meaning": SYMPTOMS[self.symptom]},
            "causes": self.causes, "findings": [f.to_dict() for f in self.findings], "summary": self.summary,
        })
        if self.comparison is not None:
            out["expected_differences"] = [f.to_dict() for f in self.expected]
            out["divergence_beyond_tolerance"] = self.divergence_beyond_tolerance
            out["tolerance"] = {"precision": self.comparison.precision, "rtol": self.comparison.rtol,
                                "atol": self.comparison.atol}
        return out

    def to_json(self, indent=2):
        return json.dumps(self.to_dict(), indent=indent, default=_json_default)

    def __str__(self):
        flags = ", ".join(f for f, on in (("blind", self.run.blind), ("partial: the run has not finished",
                                                                      self.run.partial)) if on)
        lines = [f"diagnosis of {self.run.path}" + (f" against {self.reference.path}" if self.reference else "")
                 + (f" ({flags})" if flags else ""), ""]
        if self.config_diff:
            lines += ["configuration differs from the reference (differences from it are expected, not faults):"]
            lines += [f"  {line}" for line in describe_config_diff(self.config_diff)] + [""]
        lines += [self.summary, ""]
        if self.causes:
            lines.append("likely causes:")
            for c in self.causes:
                lines.append(f"  {c['fault']:<22} score {c['score']:g}")
                lines.extend(f"      - {e}" for e in c["evidence"])
        else:
            lines.append("likely causes: none")
        if self.findings:
            lines += ["", "findings:"] + [f"  [{f.key}] {f.text}" for f in self.findings]
        if self.expected:
            lines += ["", "differences from the reference (expected from the configuration difference, not scored):"]
            lines += [f"  [{f.key}] {f.text}" for f in self.expected]
        return "\n".join(lines)

    def __repr__(self):
        best = f"{self.causes[0]['fault']} ({self.causes[0]['score']:g})" if self.causes else "none"
        return (f"<Diagnosis {self.run.name!r}: cause {best}, symptom {self.symptom}, "
                f"first divergent step {self.first_divergent_step}>")

    def _repr_markdown_(self):
        rows = "\n".join(f"| {c['fault']} | {c['score']:g} | {'<br>'.join(c['evidence'])} |" for c in self.causes)
        table = f"\n\n| fault | score | evidence |\n|---|---|---|\n{rows}" if self.causes else ""
        return f"**Diagnosis of `{self.run.name}`** — {self.summary}{table}"


def _json_default(value):
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def diagnose(run, reference=None, blind=False):
    """Diagnoses `run` (a Run or a path), optionally against `reference` (the fault-free baseline of the
    same configuration; against another configuration, a world size included, the differences from it
    are reported as expected and only the run's own findings name causes). blind=True loads paths blind;
    a Run keeps the blindness it was loaded with."""
    run = run if isinstance(run, Run) else Run(run, blind=blind)
    if reference is not None and not isinstance(reference, Run):
        reference = Run(reference, blind=blind)
    comparison = Comparison(run, reference) if reference is not None else None
    findings = within_run_findings(run)
    against = reference_findings(comparison) if comparison else []
    if comparison and comparison.config_diff:
        return Diagnosis(run, reference, comparison, findings, expected=against)
    return Diagnosis(run, reference, comparison, findings + against)
