"""`python3 -m divsim evaluate` end to end on a tiny study: it runs, writes its report and raw results,
and counts no false positive on clean runs."""
import json
import os
import subprocess
import sys

from conftest import ROOT


def test_tiny_evaluation(runs, tmp_path):
    out = tmp_path / "eval"
    cmd = [sys.executable, "-m", "divsim", "evaluate", "--divsim", runs.divsim, "--mpiexec", runs.mpiexec,
           "--out", str(out), "--scenarios", "1", "--clean-seeds", "1", "--world-sizes", "2,3",
           "--faults", "skip_rank", "--steps", "12"]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "analysis"))
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr
    results = json.loads((out / "results.json").read_text())
    assert [(r["world_size"], r["causes"]) for r in results["clean"]] == [(2, []), (3, [])]
    scenario = results["scenarios"][0]
    assert scenario["fault"] == "skip_rank" and 2 <= scenario["world_size"] <= 8
    assert scenario["spec"].startswith(f"skip_rank:ranks={scenario['rank']},start={scenario['start']},mode=")
    report = (out / "report.md").read_text()
    assert "blind diagnoses naming a cause: 0 (0.0%)" in report
