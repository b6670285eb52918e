"""`python3 -m divsim diagnose`: exit codes, text and JSON output, --reference and --blind."""
import json
import os
import subprocess
import sys

from conftest import ROOT
from test_diagnose import skip_rank


def cli(*args):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "analysis"))
    return subprocess.run([sys.executable, "-m", "divsim", *args], capture_output=True, text=True, env=env,
                          timeout=120)


def test_clean_run_json_has_no_causes(base):
    p = cli("diagnose", base, "--json", "--blind")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["causes"] == [] and out["symptom"]["class"] == "none" and out["first_divergent_step"] is None
    assert out["replicas"]["in_sync"] and out["blind"] and out["world_size"] == 2 and out["steps"] == 40


def test_text_report(base):
    p = cli("diagnose", base, "--reference", base)
    assert p.returncode == 0 and "no sign of a fault" in p.stdout and "matches the reference" in p.stdout


def test_faulty_run_json_ranks_causes(runs, base4):
    path = runs.forge("forged_skip_rank", base4, skip_rank)
    p = cli("diagnose", path, "--reference", base4, "--json", "--blind")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    best = out["causes"][0]
    assert best["fault"] == "skip_rank" and best["score"] > 0
    assert best["evidence"] and all(isinstance(e, str) for e in best["evidence"])
    assert [c["score"] for c in out["causes"]] == sorted((c["score"] for c in out["causes"]), reverse=True)
    assert out["first_divergent_step"] == 15 and out["divergence"]["phase"] == "reduce"
    assert out["tolerance"] == {"precision": "fp32", "rtol": 1e-5, "atol": 1e-6}
    assert "skip_rank" in out["summary"]


def test_missing_file_exits_2_with_one_message(tmp_path):
    p = cli("diagnose", str(tmp_path / "nope.h5"), "--json")
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and "no such run file" in p.stderr


def test_usage_error_exits_2():
    p = cli("diagnose")
    assert p.returncode == 2 and "usage" in p.stderr
