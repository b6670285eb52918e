"""`divsim diagnose` (the binary's subcommand and `python -m divsim`): exit codes, text and JSON output, --reference and --blind, a killed
run's .partial, a reference of another configuration; it and tools/divsim-sweep on a closed pipe."""
import json
import os
import subprocess
import sys

from conftest import ROOT
from divsim import FAULTS
from test_diagnose import skip_rank

ENV = dict(os.environ, PYTHONPATH=str(ROOT / "analysis"))


def cli(*args):
    return subprocess.run([sys.executable, "-m", "divsim", *args], capture_output=True, text=True, env=ENV,
                          timeout=120)


def test_clean_run_json_has_no_causes(base):
    p = cli("diagnose", base, "--json", "--blind")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["causes"] == [] and out["symptom"]["class"] == "none" and out["first_divergent_step"] is None
    assert out["replicas"]["in_sync"] and out["blind"] and out["world_size"] == 2 and out["steps"] == 40


def test_binary_subcommand_needs_no_python_on_path(base):
    """`build/divsim diagnose` runs the analysis with the interpreter chosen at configure time, whatever
    `python3` is first on PATH (here: none at all), and with no PYTHONPATH."""
    env = {"PATH": "/nonexistent", "HOME": os.environ.get("HOME", "/")}
    p = subprocess.run([os.environ["DIVSIM"], "diagnose", base, "--json", "--blind"], capture_output=True, text=True,
                       env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["run"] == base
    h = subprocess.run([os.environ["DIVSIM"], "evaluate", "--help"], capture_output=True, text=True, env=env, timeout=60)
    assert h.returncode == 0 and h.stdout.startswith("usage: divsim evaluate"), h.stdout + h.stderr


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


def test_killed_run_is_read_from_its_partial_with_one_warning(killed):
    p = cli("diagnose", killed)
    assert p.returncode == 0, p.stderr
    assert p.stderr.count("\n") == 1
    assert p.stderr.startswith(f"divsim diagnose: warning: {killed} does not exist: opened {killed}.partial instead")
    assert p.stdout.startswith(f"diagnosis of {killed}.partial (partial: the run has not finished)\n")
    assert json.loads(cli("diagnose", killed, "--json").stdout)["partial"] is True


def test_reference_of_another_seed_is_said_first_and_names_no_fault(runs):
    run, reference = runs("seed1", ["--run.seed=1"]), runs("seed2", ["--run.seed=2"])
    p = cli("diagnose", run, "--reference", reference)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[2:4] == [
        "configuration differs from the reference (differences from it are expected, not faults):",
        "  run.seed = 1 here, 2 in the reference"]
    assert "likely causes: none" in p.stdout and not [f for f in FAULTS if f in p.stdout]
    out = json.loads(cli("diagnose", run, "--reference", reference, "--json").stdout)
    assert list(out)[:3] == ["run", "reference", "config_diff"] and out["config_diff"] == {"run.seed": [1, 2]}
    assert out["causes"] == [] and out["findings"] == [] and out["expected_differences"]


def _into_head(cmd):
    """Runs cmd with its stdout piped into `head -1`: (cmd's exit status, its stderr, what head printed)."""
    head = subprocess.Popen(["head", "-1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    proc = subprocess.Popen(cmd, stdout=head.stdin, stderr=subprocess.PIPE, text=True, env=ENV)
    head.stdin.close()  # head's only writer is now cmd
    printed = head.stdout.read()
    head.wait(timeout=120)
    err = proc.communicate(timeout=120)[1]
    return proc.returncode, err, printed


def test_sweep_listing_into_head_ends_quietly(tmp_path):
    # Far more than a pipe holds (64 KiB), so the listing is still being written when head leaves.
    description = tmp_path / "big.ini"
    description.write_text("[sweep]\nworld_sizes = 1, 2, 4, 8\nseeds = " + ", ".join(map(str, range(1000)))
                           + "\n[faults]\nreference =\nskip_rank = skip_rank:ranks=0\n")
    rc, err, printed = _into_head([sys.executable, str(ROOT / "tools" / "divsim-sweep"), "list", str(description)])
    assert printed.split() == ["index", "fault", "W", "seed", "output"]
    assert err == "" and rc == 141


def test_diagnosis_into_a_closed_pipe_ends_quietly(base):
    # A reader that is already gone, as head is after its line: every write fails, whatever its size.
    read, write = os.pipe()
    os.close(read)
    proc = subprocess.Popen([sys.executable, "-m", "divsim", "diagnose", base], stdout=write, stderr=subprocess.PIPE,
                            text=True, env=ENV)
    os.close(write)
    assert proc.communicate(timeout=120)[1] == "" and proc.returncode == 141
