"""divsim analysis: read divsim trajectory files (HDF5 schema v1) in notebooks, compare runs, plot,
and diagnose divergence (issue 6; docs/analysis.md).

    import divsim
    run = divsim.load("outputs/baseline.h5")       # labelled arrays, tidy frames, config, faults
    run["train/loss"].sel(rank=1); run.frame("train/loss")
    sweep = divsim.load_sweep("outputs/sweep")     # many runs, one summary table
    cmp = divsim.compare(run, "outputs/other.h5")  # first difference, per-quantity table
    print(divsim.diagnose(run, reference=None))    # ranked causes from the fault catalog

Plots live in divsim.plots (matplotlib). The command line is `build/divsim diagnose RUN.h5` (the binary
runs `python3 -m divsim diagnose` with the configured interpreter, /usr/bin/python3 by default, and
PYTHONPATH=analysis). The package only reads trajectory files; it never writes into them or runs the
simulator, except `build/divsim evaluate`, which drives the binary to measure diagnose.
"""
from .catalog import FAULTS, TOLERANCES
from .compare import Comparison, align, compare
from .diagnose import Diagnosis, diagnose
from .labelled import Labelled
from .run import BlindError, Config, Run, load
from .sweep import Sweep, load_sweep

__all__ = ["FAULTS", "TOLERANCES", "BlindError", "Comparison", "Config", "Diagnosis", "Labelled", "Run",
           "Sweep", "align", "compare", "diagnose", "load", "load_sweep"]
