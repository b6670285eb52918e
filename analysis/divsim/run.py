"""Run: one divsim trajectory file (HDF5 schema v1, docs/hdf5-schema) as labelled arrays, tidy
DataFrames, its configuration, faults and events.

Axis names come from each dataset's `dims` attribute and coordinates from the file itself (steps from
the group's `step` dataset, layer names from /layers/names, statistic names from the `stats`
attribute), so nothing here hard-codes the schema's shapes. A run loaded `blind` hides everything that
names an injected fault: /faults, the `fault =` lines of the config, and /events rows whose kind names
a catalog fault. Arrays are read on first use and kept. Asked for `X.h5` of a run that did not finish,
it opens the `X.h5.partial` the writer (or `divsim recover`) left and warns (PartialRunWarning). It does
not compare runs or judge them (compare.py, detectors.py).
"""
import os
import re
import warnings

import h5py
import numpy as np
import pandas as pd

from .catalog import names_fault
from .labelled import Labelled

SCHEMA_VERSION = 1
# Keys that name a run or decide what it records, where and when, rather than change what it
# computes: a run with other record settings, checkpoints or a resume is bitwise the uninterrupted run
# (tests/slurm resumes, tests/reliability/kill_job.py), and dist.timeout_s is only a watchdog.
IDENTITY_KEYS = frozenset({"run.name", "run.out", "run.overwrite", "run.checkpoint_every", "run.resume",
                           "record.layers_every", "record.samples", "record.init_params", "record.flush_every",
                           "record.chunk_steps", "dist.timeout_s"})
_COMPOUND = ("events", "faults")


class BlindError(RuntimeError):
    """Raised when code reads what a blind run hides."""


class PartialRunWarning(UserWarning):
    """Warned when a run is asked for by its final name and only its .partial exists."""


def _decode(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, np.ndarray) and value.dtype.kind in "OS":
        return [_decode(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _typed(text):
    if text in ("true", "false"):
        return text == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


class Config:
    """The effective configuration of a run (the root attribute `config`, INI text).

    `cfg["optim.lr"]` gives a typed value (bool, int, float or str), `cfg.section("optim")` a dict,
    `cfg.faults` the `fault =` specs (empty when loaded blind).
    """

    def __init__(self, text, keep_faults=True):
        self.values = {}
        self.faults = []
        kept = []
        section = None
        for line in text.splitlines():
            stripped = line.strip()
            if stripped.startswith("[") and stripped.endswith("]"):
                section = stripped[1:-1].strip()
            elif "=" in stripped and not stripped.startswith(("#", ";")):
                key, value = (s.strip() for s in stripped.split("=", 1))
                if section is None and key == "fault":
                    if keep_faults:
                        self.faults.append(value)
                        kept.append(line)
                    continue
                self.values[f"{section}.{key}" if section else key] = _typed(value)
            kept.append(line)
        self.text = "\n".join(kept) + ("\n" if text.endswith("\n") else "")

    def __getitem__(self, key):
        try:
            return self.values[key]
        except KeyError:
            raise KeyError(f"no config key '{key}' (keys look like 'optim.lr')") from None

    def __contains__(self, key):
        return key in self.values

    def get(self, key, default=None):
        return self.values.get(key, default)

    def section(self, name):
        prefix = name + "."
        return {k[len(prefix):]: v for k, v in self.values.items() if k.startswith(prefix)}

    def diff(self, other, ignore=IDENTITY_KEYS):
        """{key: (mine, other's)} for every key whose values differ (missing -> None)."""
        keys = (set(self.values) | set(other.values)) - set(ignore)
        return {k: (self.values.get(k), other.values.get(k)) for k in sorted(keys)
                if self.values.get(k) != other.values.get(k)}

    def __repr__(self):
        return f"<Config {len(self.values)} keys, {len(self.faults)} faults>"


class Run:
    """One trajectory file. `run["train/loss"]` -> Labelled (step x rank), `run.frame(name)` -> tidy
    DataFrame, `run.config`, `run.faults`, `run.events`, `run.world_size`, `run.steps`; `run.partial`
    when the file is a .partial (opened for `X.h5` when only `X.h5.partial` exists, with a warning)."""

    def __init__(self, path, blind=False):
        requested = self.path = os.fspath(path)
        final = requested.removesuffix(".partial")
        # A running or killed job has X.h5.partial and X.h5.journal; `divsim recover X.h5` rebuilds the
        # .partial from the journal (a kill inside an HDF5 flush can leave a .partial that does not open).
        journal = final + ".journal"
        recover = (f"; {journal} exists: if the run was killed, `build/divsim recover {final}` rebuilds its "
                   f"trajectory into {final}.partial" if os.path.isfile(journal) else "")
        if not os.path.isfile(self.path) and os.path.isfile(requested + ".partial"):
            self.path = requested + ".partial"
        if not os.path.isfile(self.path):
            if recover:
                raise FileNotFoundError(f"no such run file: {final}, nor {final}.partial{recover}")
            raise FileNotFoundError(f"no such run file: {self.path}")
        try:
            f = h5py.File(self.path, "r")
        except OSError as e:
            raise ValueError(f"{self.path}: not an HDF5 file ({e}){recover}") from None
        with f:
            attrs = {k: _decode(v) for k, v in f.attrs.items()}
            if attrs.get("schema_version") != SCHEMA_VERSION:
                raise ValueError(f"{self.path}: not a divsim trajectory of schema {SCHEMA_VERSION} "
                                 f"(root attribute schema_version = {attrs.get('schema_version')!r})")
            self._meta = {}
            f.visititems(self._note_dataset)
            self.layer_names = [_decode(n) for n in f["layers/names"][()]] if "layers/names" in f else []
            self.stat_names = _decode(f["layers/forward"].attrs["stats"]) if "layers/forward" in f else []
        self.blind = blind
        self.partial = self.path.endswith(".partial")
        self.config = Config(attrs.get("config", ""), keep_faults=not blind)
        attrs["config"] = self.config.text
        self.attrs = attrs
        self.world_size = int(attrs["world_size"])
        self.env = dict(line.split("=", 1) for line in attrs.get("env", "").splitlines() if "=" in line)
        # The file name tells runs apart (run.name is often left at its default).
        self.name = os.path.basename(self.path).removesuffix(".partial").removesuffix(".h5")
        self._cache = {}
        if self.path != requested:
            steps = self._meta.get("train/step", {"shape": (0,)})["shape"][0]
            state = f"recovered: {attrs['recovered']}" if "recovered" in attrs else f"as its writer left it{recover}"
            warnings.warn(f"{requested} does not exist: opened {self.path} instead, the {steps} steps of a run that "
                          f"has not finished (still running, or killed), {state}", PartialRunWarning, stacklevel=2)

    def _note_dataset(self, name, obj):
        if isinstance(obj, h5py.Dataset):
            dims = _decode(obj.attrs.get("dims", ""))
            self._meta[name] = {"shape": obj.shape, "dtype": obj.dtype,
                                "dims": tuple(dims.split(",")) if dims else (),
                                "description": _decode(obj.attrs.get("description", ""))}

    def __repr__(self):
        flags = (" blind" if self.blind else "") + (" partial" if self.partial else "")
        return f"<Run {self.name!r} W={self.world_size} steps={len(self.steps)}{flags} {self.path}>"

    @property
    def datasets(self):
        """Dataset names in the file ("train/loss", ...)."""
        return sorted(self._meta)

    def has(self, name):
        return name.strip("/") in self._meta

    def describe(self):
        """DataFrame: one row per dataset with its shape, dims and description."""
        return pd.DataFrame([{"dataset": n, "shape": m["shape"], "dims": ",".join(m["dims"]),
                              "description": m["description"]} for n, m in sorted(self._meta.items())])

    def _read(self, name):
        if name not in self._cache:
            with h5py.File(self.path, "r") as f:
                self._cache[name] = f[name][()]
        return self._cache[name]

    def __getitem__(self, name):
        name = name.strip("/")
        if name not in self._meta:
            raise KeyError(f"{self.path} has no dataset '{name}' (datasets: {', '.join(self.datasets)})")
        if name in _COMPOUND:
            raise KeyError(f"'{name}' is a table: use run.{name} or run.frame('{name}')")
        meta = self._meta[name]
        values = self._read(name)
        if values.dtype.kind == "S":
            values = np.array(_decode(values))
        group = name.rsplit("/", 1)[0] if "/" in name else ""
        coords = {"rank": np.arange(self.world_size), "layer": np.array(self.layer_names),
                  "stat": np.array(self.stat_names)}
        dims = meta["dims"] or tuple(f"dim{i}" for i in range(values.ndim))
        if dims and dims[0] == "step" and f"{group}/step" in self._meta and name != f"{group}/step":
            coords["step"] = self._read(f"{group}/step")
        coords = {d: c for d, c in coords.items() if d in dims and len(c) == values.shape[dims.index(d)]}
        return Labelled(values, dims, coords, name=name.rsplit("/", 1)[-1], description=meta["description"])

    def values(self, name):
        """The plain numpy array of a dataset."""
        return self[name].values

    def frame(self, name):
        """Tidy DataFrame of a dataset (one row per element, one column per axis), or the events/faults table."""
        name = name.strip("/")
        if name == "events":
            return self.events
        if name == "faults":
            return self.faults
        return self[name].to_frame()

    @property
    def steps(self):
        return self._read("train/step") if self.has("train/step") else np.zeros(0, dtype=np.int64)

    def _table(self, name):
        if not self.has(name):
            return pd.DataFrame()
        rows = self._read(name)
        return pd.DataFrame({field: [_decode(v) for v in rows[field]] for field in rows.dtype.names})

    @property
    def events(self):
        """/events as a DataFrame (step, rank, kind, detail); blind: rows whose kind names a fault are dropped."""
        table = self._table("events")
        if self.blind and len(table):
            table = table[[not names_fault(k) for k in table["kind"]]].reset_index(drop=True)
        return table

    @property
    def faults(self):
        """/faults as a DataFrame (name, ranks, spec, start, stop, every, prob); refused when blind."""
        if self.blind:
            raise BlindError(f"{self.path} was loaded blind: its faults are hidden")
        return self._table("faults")

    @property
    def fault_specs(self):
        """The injected faults as spec strings (from /faults, else the config's fault lines)."""
        table = self.faults
        return list(table["spec"]) if len(table) else list(self.config.faults)

    @property
    def train_samples(self):
        """Number of training samples the run drew from (None when the file does not say)."""
        found = re.search(r" (\d+)/\d+", str(self.attrs.get("data", "")))
        if found:
            return int(found.group(1))
        size = self.config.get("data.train_size", 0)
        return size if isinstance(size, int) and size > 0 else None

    @property
    def samples_per_rank_step(self):
        """Samples each rank consumes per optimizer step (micro-batch x accumulation steps)."""
        accum = self.config.get("batch.accum_steps", 1)
        per_rank = self.config.get("batch.per_rank", 0)
        if per_rank:
            return per_rank * accum
        return self.config.get("batch.global", 0) // self.world_size

    @property
    def steps_per_epoch(self):
        """Optimizer steps per epoch as the sampler computes them (data/sampler.cpp), or None."""
        n, b, w = self.train_samples, self.samples_per_rank_step, self.world_size
        if not n or not b:
            return None
        if self.config.get("sampler.mode", "distributed") == "global_batch":
            return n // (w * b) or None
        per_rank = n // w if self.config.get("batch.drop_last", True) and n % w else -(-n // w)
        return per_rank // b or None


def load(path, blind=False):
    """Opens a divsim trajectory file (`X.h5`, else the `X.h5.partial` of an unfinished run, with a
    PartialRunWarning). blind=True hides /faults, the config's fault lines and /events rows whose kind
    names a fault (what `diagnose --blind` may not see)."""
    return Run(path, blind=blind)
