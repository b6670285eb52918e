"""Fixtures of the analysis tests: small real runs of the divsim binary, made once per session, and
"forged" copies of them whose datasets are edited to carry one fault's recorded signature.

DIVSIM (the binary) and MPIEXEC come from the environment (tests/python/tests.cmake sets them);
DIVSIM_TEST_DIR, if set, holds the runs (else pytest's temporary folder). Forged copies test the
detectors and the cause table on exactly known signatures; real faulty runs replace them once the
fault catalog is applied by the simulator.
"""
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "analysis"))
os.environ.setdefault("MPLBACKEND", "Agg")

# The brief's small set-up: 40 steps of 128 samples from 4096 (about a second per run).
SMALL = ["--data.train_size=4096", "--data.test_size=1000", "--batch.global=128", "--train.steps=40",
         "--record.samples=true", "--record.layers_every=1", "--train.eval_every=10"]


class RunFactory:
    """Makes (once) and returns the path of a named run: `runs("base")`, `runs("lr", args=[...])`."""

    def __init__(self, folder):
        self.folder = Path(folder)
        self.divsim = os.environ.get("DIVSIM", str(ROOT / "build" / "divsim"))
        self.mpiexec = os.environ.get("MPIEXEC", "mpiexec")
        if not os.access(self.divsim, os.X_OK):
            raise RuntimeError(f"no divsim binary at {self.divsim}: set DIVSIM (CTest does)")

    def __call__(self, name, args=(), procs=2, world_size=None):
        path = self.folder / f"{name}.h5"
        if not path.exists():
            extra = [f"--dist.world_size={world_size}"] if world_size else []
            overridden = {a.split("=", 1)[0] for a in args}
            small = [a for a in SMALL if a.split("=", 1)[0] not in overridden]
            cmd = [self.mpiexec, "-n", str(procs), self.divsim, "--quiet", *small, *extra, *args,
                   f"--run.out={path}", "--run.overwrite=true"]
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            if p.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stderr}")
        return str(path)

    def forge(self, name, source, edit):
        """A copy of run `source` (a path) named `name`, edited in place by edit(h5py.File)."""
        path = self.folder / f"{name}.h5"
        shutil.copyfile(source, path)
        with h5py.File(path, "r+") as f:
            edit(f)
        return str(path)


@pytest.fixture(scope="session")
def runs(tmp_path_factory):
    folder = os.environ.get("DIVSIM_TEST_DIR")
    if folder:
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
    else:
        folder = tmp_path_factory.mktemp("runs")
    return RunFactory(folder)


@pytest.fixture(scope="session")
def base(runs):
    """The fault-free baseline: W = 2, samples and layer statistics at every step."""
    return runs("base")


@pytest.fixture(scope="session")
def base4(runs):
    """The baseline at W = 4 (four logical ranks on two processes)."""
    return runs("base4", world_size=4)


@pytest.fixture(scope="session")
def killed(runs):
    """`killed.h5` of a run killed (SIGKILL) while training, then `divsim recover`ed: only killed.h5.partial
    (the recovered trajectory) and killed.h5.journal exist."""
    out = runs.folder / "killed.h5"
    # One process without mpiexec (an MPI singleton), so that the kill hits the writer itself.
    job = subprocess.Popen([runs.divsim, "--quiet", "--data.source=synthetic", "--data.synthetic_train=2048",
                            "--model.hidden=32,16", "--batch.global=24", "--train.steps=1000000",
                            "--record.flush_every=1", f"--run.out={out}"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not (Path(f"{out}.journal").exists() and Path(f"{out}.partial").exists()):
        if job.poll() is not None or time.monotonic() > deadline:
            job.kill()
            raise RuntimeError(f"the run to be killed made no {out}.journal (exit {job.wait()})")
        time.sleep(0.02)
    time.sleep(0.5)  # some flushes
    job.kill()
    job.wait()
    assert not out.exists()
    p = subprocess.run([runs.divsim, "recover", str(out)], capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise RuntimeError(f"divsim recover {out} exited {p.returncode}:\n{p.stderr}")
    return str(out)


def add_table_rows(f, name, rows):
    """Replaces the /events or /faults table of an open file with `rows` (tuples in field order)."""
    fields = f[name].dtype.names
    widths = {"kind": 32, "detail": 224, "name": 32, "ranks": 16, "spec": 96}
    dtype = [(k, f"S{widths[k]}" if k in widths else f[name].dtype[k].str) for k in fields]
    attrs = dict(f[name].attrs)
    del f[name]
    d = f.create_dataset(name, data=np.array(rows, dtype=dtype), maxshape=(None,), chunks=True)
    d.attrs.update(attrs)
