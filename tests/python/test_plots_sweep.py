"""Plots write non-empty PNGs and show the right numbers; load_sweep summarises a folder of runs."""
import os
import shutil

import h5py
import numpy as np
import pytest

import divsim
from divsim import plots
from test_diagnose import duplicate_shard, skip_rank


def _png(fig, path):
    fig.savefig(path)
    plots.plt.close(fig)
    assert os.path.getsize(path) > 5000


def test_run_plots(runs, base, base4, tmp_path):
    run = divsim.load(runs.forge("forged_skip_rank", base4, skip_rank))
    _png(plots.plot_training(run), tmp_path / "training.png")
    _png(plots.plot_curves(run, "train/global_loss"), tmp_path / "global.png")
    _png(plots.plot_replica_divergence(run), tmp_path / "heat.png")
    _png(plots.plot_replica_divergence(divsim.load(base)), tmp_path / "heat_clean.png")
    c = divsim.compare(runs("smooth", ["--loss.label_smoothing=0.1"]), base)
    _png(plots.plot_relative_difference(c), tmp_path / "rel.png")
    _png(plots.plot_layer_divergence(c), tmp_path / "layers.png")
    _png(plots.plot_sample_overlap(divsim.load(base)), tmp_path / "overlap.png")


def test_replica_distance_is_blank_where_in_sync(runs, base4):
    run = divsim.load(runs.forge("forged_skip_rank", base4, skip_rank))
    dist = plots.replica_distance(run)
    assert np.isnan(dist[:15]).all() and np.isnan(dist[:, [0, 1, 3]]).all()
    pn = run.values("train/param_norm")[:, 0]  # the forgery shifted rank 2's norm by 1e-4 of step 15's
    np.testing.assert_allclose(dist[15:, 2], 1e-4 * pn[15] / pn[15:], rtol=1e-6)


def test_sample_overlap_matrix(runs, base):
    clean = plots.sample_overlap(divsim.load(base))
    assert (clean == np.diag([32 * 64, 32 * 64])).all()  # one epoch: disjoint shards of 2048 samples
    dup = plots.sample_overlap(divsim.load(runs.forge("forged_duplicate_shard", base, duplicate_shard)))
    assert dup[0, 1] == dup[1, 0] == dup[0, 0] == 2048


def test_fault_windows_are_shaded(runs, base):
    def fault_row(f):
        from conftest import add_table_rows
        add_table_rows(f, "faults", [(b"skip_rank", b"1", b"skip_rank:ranks=1,start=10,stop=20", 10, 20, 1, 1.0)])
    run = divsim.load(runs.forge("forged_fault_row", base, fault_row))
    assert plots.fault_windows(run) == [("skip_rank", 10, 20, 1)]
    fig = plots.plot_curves(run)
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()][-1] == "fault skip_rank"
    assert plots.fault_windows(divsim.load(run.path, blind=True)) == []


def test_sweep(runs, base, base4, tmp_path):
    folder = tmp_path / "sweep"
    (folder / "w4").mkdir(parents=True)
    shutil.copy(base, folder / "base.h5")
    shutil.copy(base4, folder / "w4" / "base4.h5")
    shutil.copy(runs("bn_unsynced", ["--model.batchnorm=true", "--dist.broadcast_buffers=false"]), folder / "bn.h5")
    with h5py.File(folder / "checkpoint.h5", "w") as f:
        f["weights"] = np.zeros(3)
    sweep = divsim.load_sweep(folder)
    assert len(sweep) == 3 and [p for p, _ in sweep.skipped] == [str(folder / "checkpoint.h5")]
    table = sweep.table()
    assert table["world_size"].tolist() == [2, 2, 4] and table["fault"].tolist() == ["none"] * 3
    assert table["replicas_in_sync"].all() and table["steps"].eq(40).all()
    bn = table[table.path.str.endswith("bn.h5")].iloc[0]
    assert bn["eval_loss_spread"] > 0 and table[~table.path.str.endswith("bn.h5")]["eval_loss_spread"].eq(0).all()
    assert len(sweep.frame("train/loss")) == 40 * (2 + 2 + 4)
    assert sweep.align("train/global_loss").shape == (40, 3)
    diag = sweep.diagnose()
    assert diag.set_index("world_size").loc[4, "cause"] is None and "bn_drift" in diag["cause"].tolist()
    compared = sweep.compare(base)
    assert compared["first_difference"].iloc[0] is None or np.isnan(compared["first_difference"].iloc[0])
    _png(plots.plot_sweep(sweep), tmp_path / "sweep.png")
    with pytest.raises(ValueError, match="no divsim runs"):
        divsim.load_sweep(tmp_path, pattern="*.nothing")


def test_sweep_diagnosis_against_another_seed_names_the_config_difference(runs, tmp_path):
    folder = tmp_path / "seeds"
    folder.mkdir()
    for seed in (1, 2):
        shutil.copy(runs(f"seed{seed}", [f"--run.seed={seed}"]), folder / f"s{seed}.h5")
    diag = divsim.load_sweep(folder).diagnose(reference=folder / "s2.h5")
    assert list(diag.columns[:5]) == ["run", "world_size", "fault", "config_diff", "cause"]
    assert diag["config_diff"].tolist() == ["run.seed = 1 here, 2 in the reference", ""]
    assert diag["cause"].isna().all() and diag["score"].eq(0).all()
