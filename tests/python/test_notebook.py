"""notebooks/divergence_tour.ipynb runs clean, headless, with Debian's python3 kernel and writes its
figures as PNG (under DIVSIM_TOUR_DIR)."""
import nbformat
from nbclient import NotebookClient

from conftest import ROOT

FIGURES = ["skip_rank_training", "skip_rank_replicas", "bn_unsynced_replicas", "tf32_relative_difference",
           "label_smoothing_layers", "baseline_sample_overlap", "sweep", "sweep_eval_spread"]


def test_tour_notebook_runs_and_writes_figures(runs, tmp_path, monkeypatch):
    tour = tmp_path / "tour"
    for key, value in dict(DIVSIM=runs.divsim, MPIEXEC=runs.mpiexec, DIVSIM_TOUR_DIR=str(tour)).items():
        monkeypatch.setenv(key, value)
    nb = nbformat.read(ROOT / "notebooks" / "divergence_tour.ipynb", as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    for name in FIGURES:
        png = tour / "figures" / f"{name}.png"
        assert png.exists() and png.stat().st_size > 5000, png
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    diagnosis = next(c for c in nb.cells if "diagnose(skip.path" in c.source)
    assert "Diagnosis of" in str(diagnosis.outputs)
