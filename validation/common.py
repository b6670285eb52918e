"""Plumbing shared by the validation scripts: finding and running divsim, reading a run's HDF5 file and
its effective configuration, Fashion-MNIST standardised exactly as divsim does it, and the MLP as a
torch nn.Sequential in PyTorch's own layout.

Deliberately not here: comparisons and thresholds (each check owns its own), and anything that reads
divsim's C++ sources: the peers are built from the documented semantics only.
"""
import configparser
import functools
import gzip
import os
import shutil
import subprocess
import tempfile

import h5py
import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class ValidationError(RuntimeError):
    """A check could not be run as asked (bad configuration, divsim failed): not a measured mismatch."""


def find_divsim(path=None):
    """The divsim binary: the given path, $DIVSIM, build/divsim (the release build), or the first other
    build*/divsim in the repository (sorted, "build-asan" would come before "build")."""
    candidates = [path, os.environ.get("DIVSIM"), os.path.join(REPO, "build", "divsim")]
    candidates += sorted(os.path.join(REPO, d, "divsim") for d in os.listdir(REPO) if d.startswith("build"))
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise ValidationError("no divsim binary found: pass --divsim PATH or set $DIVSIM (build it with cmake first)")


def find_mpiexec(path=None):
    exe = path or os.environ.get("MPIEXEC") or shutil.which("mpiexec.mpich") or shutil.which("mpiexec")
    if not exe:
        raise ValidationError("no mpiexec found: pass --mpiexec PATH or set $MPIEXEC")
    return exe


class Divsim:
    """Runs divsim under mpiexec into a work folder; each run is one HDF5 file there."""

    def __init__(self, divsim=None, mpiexec=None, workdir=None):
        self.exe = find_divsim(divsim)
        self.mpiexec = find_mpiexec(mpiexec)
        self.workdir = workdir or tempfile.mkdtemp(prefix="divsim-validation-")
        os.makedirs(self.workdir, exist_ok=True)

    def run(self, name, args, ranks=1, timeout=900):
        """Runs `mpiexec -n ranks divsim --quiet ARGS --run.out=<workdir>/<name>.h5`; returns the path."""
        out = os.path.join(self.workdir, name + ".h5")
        cmd = [self.mpiexec, "-n", str(ranks), self.exe, "--quiet", *args, f"--run.out={out}", "--run.overwrite=true"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO)
        if proc.returncode != 0:
            raise ValidationError(f"divsim failed (exit {proc.returncode}): {' '.join(cmd)}\n{proc.stderr.strip()}")
        return out


def parse_config(text):
    """The effective INI text divsim stores in its root attribute `config` -> {"section.key": "value"}.
    Top-level repeatable `fault = ...` lines come back as the list under "fault"."""
    faults = []
    body = []
    for line in text.splitlines():
        s = line.strip()
        if not body and s.startswith("fault") and "=" in s:  # before the first section
            faults.append(s.split("=", 1)[1].strip())
        elif s.startswith("[") or body:
            body.append(line)
    cp = configparser.ConfigParser(interpolation=None, strict=False)
    cp.read_string("\n".join(body))
    flat = {f"{sec}.{k}": v for sec in cp.sections() for k, v in cp[sec].items()}
    flat["fault"] = faults
    return flat


class Config:
    """Typed access to the flat configuration, with an error naming the key when it is missing."""

    def __init__(self, flat):
        self.flat = flat

    def text(self, key):
        if key not in self.flat:
            raise ValidationError(f"configuration key {key} missing from the run's config attribute")
        return self.flat[key]

    def int(self, key):
        return int(self.text(key))

    def float(self, key):
        return float(self.text(key))

    def bool(self, key):
        return self.text(key).lower() in ("true", "1", "yes", "on")

    def ints(self, key):
        return [int(v) for v in self.text(key).split(",") if v.strip()]

    @property
    def faults(self):
        return self.flat.get("fault", [])


def read_run(path):
    """(datasets {name: array}, Config, world_size) of one divsim HDF5 file."""
    data = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda n, o: data.__setitem__(n, o[()]) if isinstance(o, h5py.Dataset) else None)
        config = f.attrs["config"]
        config = config.decode() if isinstance(config, bytes) else str(config)
        world = int(f.attrs["world_size"])
    return data, Config(parse_config(config)), world


def _idx(path, magic, dims):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    if int.from_bytes(raw[:4], "big") != magic:
        raise ValidationError(f"{path}: not an IDX file of the expected kind")
    shape = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def standardised(train_bytes, test_bytes):
    """float32 features from byte features [N, F] as divsim's data section documents: per-feature mean and
    population std of the used training split from exact integer sums, std floored at 1e-3,
    x = float32((b/255 - mean)/std) with every step in double; the test split with the training's."""
    n = train_bytes.shape[0]
    s1 = train_bytes.sum(axis=0, dtype=np.int64)
    s2 = (train_bytes.astype(np.int64) ** 2).sum(axis=0)
    mean = s1.astype(np.float64) / (255.0 * n)
    var = (n * s2 - s1 * s1).astype(np.float64) / (float(n) * float(n) * 65025.0)
    std = np.maximum(np.sqrt(var), 1e-3)

    def standardise(b):
        return ((b / 255.0 - mean) / std).astype(np.float32)

    return standardise(train_bytes), standardise(test_bytes)


@functools.lru_cache(maxsize=2)
def fashion_mnist(root, train_size=0, test_size=0):
    """(x_train, y_train, x_test, y_test): float32 [N, 784] (standardised()) and int64 labels. Cached:
    callers must not modify the arrays."""
    def split(kind, n):
        x = _idx(os.path.join(root, f"{kind}-images-idx3-ubyte.gz"), 0x803, 3)
        y = _idx(os.path.join(root, f"{kind}-labels-idx1-ubyte.gz"), 0x801, 1)
        n = n or len(x)
        return x[:n].reshape(n, -1), y[:n].astype(np.int64)

    bt, yt = split("train", train_size)
    be, ye = split("t10k", test_size)
    xt, xe = standardised(bt, be)
    return xt, yt, xe, ye


def hdf5_data(path, train_size=0, test_size=0):
    """(x_train, y_train, x_test, y_test, classes) of a data.source=hdf5 file (src/data/h5_dataset.hpp):
    uint8 features standardised as Fashion-MNIST's, floating point ones as stored (float32)."""
    import h5py

    with h5py.File(path, "r") as f:
        def split(name, n):
            x, y = f[f"{name}/x"], f[f"{name}/y"]
            n = n or len(x)
            return x[:n].reshape(n, -1), y[:n].astype(np.int64)

        bt, yt = split("train", train_size)
        be, ye = split("test", test_size)
        classes = int(f["train/y"].attrs.get("classes", max(yt.max(), ye.max()) + 1))
    xt, xe = standardised(bt, be) if bt.dtype == np.uint8 else (bt.astype(np.float32), be.astype(np.float32))
    return xt, yt, xe, ye, classes


def load_data(cfg):
    """The run's data as (x_train, y_train, x_test, y_test, classes); synthetic data cannot be rebuilt
    outside divsim (it is Philox-keyed)."""
    source = cfg.text("data.source")
    if source == "fashion-mnist":
        return (*fashion_mnist(cfg.text("data.root"), cfg.int("data.train_size"), cfg.int("data.test_size")), 10)
    if source == "hdf5":
        return hdf5_data(cfg.text("data.path"), cfg.int("data.train_size"), cfg.int("data.test_size"))
    if source in ("fortunes", "text"):
        from validation.text_data import fortune_files, load_text

        files = fortune_files() if source == "fortunes" else [cfg.text("data.path")]
        x_train, y_train, x_test, y_test, vocabulary = load_text(files, cfg.int("model.block_size"),
                                                                 cfg.int("data.train_size"), cfg.int("data.test_size"))
        return x_train, y_train, x_test, y_test, len(vocabulary)
    raise ValidationError(f"data.source={source}: only fashion-mnist, hdf5, fortunes and text data can be replayed")


def build_mlp(cfg, in_features=784, classes=10, dropout=None):
    """nn.Sequential in divsim's documented order: Linear -> [BatchNorm1d] -> ReLU -> [Dropout] per hidden
    width, then the final Linear; module names fc1, bn1, ... so state_dict keys match /init/<layer>/<param>."""
    import torch.nn as nn

    p = cfg.float("model.dropout") if dropout is None else dropout
    layers = []
    width = in_features
    hidden = cfg.ints("model.hidden")
    for i, h in enumerate(hidden, start=1):
        layers.append((f"fc{i}", nn.Linear(width, h)))
        if cfg.bool("model.batchnorm"):
            layers.append((f"bn{i}", nn.BatchNorm1d(h, eps=cfg.float("model.bn_eps"), momentum=cfg.float("model.bn_momentum"))))
        layers.append((f"relu{i}", nn.ReLU()))
        if p > 0:
            layers.append((f"drop{i}", nn.Dropout(p)))
        width = h
    layers.append((f"fc{len(hidden) + 1}", nn.Linear(width, classes)))
    from collections import OrderedDict

    return nn.Sequential(OrderedDict(layers))


def scheduled_lr(cfg, step, total_steps, base_lr):
    """The closed-form schedule divsim documents in src/optim/schedule.hpp: linear warmup
    base*(step+1)/warmup, then constant, step decay base*gamma^(s // step_size), or cosine
    min + (base-min)/2 (1 + cos(pi s / max(1, total - warmup))), with s = step - warmup."""
    import math

    warmup = cfg.int("schedule.warmup_steps")
    if step < warmup:
        return base_lr * (step + 1) / warmup
    s = step - warmup
    kind = cfg.text("schedule.type")
    if kind == "constant":
        return base_lr
    if kind == "step":
        return base_lr * cfg.float("schedule.gamma") ** (s // cfg.int("schedule.step_size"))
    if kind == "cosine":
        lo = cfg.float("schedule.min_lr")
        return lo + 0.5 * (base_lr - lo) * (1.0 + math.cos(math.pi * s / max(1, total_steps - warmup)))
    raise ValidationError(f"schedule.type={kind} is not known to the replay")


def unpadded(logits, targets):
    """The logits and targets of every counted target, for a loss or accuracy over them: a sequence
    model's positions of all samples in one axis with the padding (target -1) dropped; a classifier's
    unchanged."""
    logits, targets = logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)
    keep = targets != -1
    return logits[keep], targets[keep]


def ddp_target_scale(local_count, world):
    """A sequence model's loss is the mean over the step's unpadded targets of all ranks (docs/models.md):
    under DDP each rank multiplies its summed loss by W / that count, summed here over the ranks, so that
    DDP's average of the gradients is the gradient of the mean."""
    import torch
    import torch.distributed as dist

    total = torch.tensor(int(local_count))
    dist.all_reduce(total)
    return world / int(total)


def rel_diff(a, b):
    """Elementwise |a - b| / max(|b|, tiny)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return np.abs(a - b) / np.maximum(np.abs(b), 1e-300)
