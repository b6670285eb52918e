"""divsim.load and Labelled: arrays labelled from the file's own dims, tidy frames, config, blindness,
the .partial of a killed run."""
import shutil
import warnings

import h5py
import numpy as np
import pytest

import divsim
from conftest import add_table_rows


def test_labelled_arrays_follow_the_files_dims(base):
    run = divsim.load(base)
    with h5py.File(base, "r") as f:
        raw_loss, raw_fwd = f["train/loss"][()], f["layers/forward"][()]
        layer_steps = f["layers/step"][()]
    loss = run["train/loss"]
    assert loss.dims == ("step", "rank") and loss.shape == (40, 2)
    assert (loss.coords["step"] == np.arange(40)).all()
    np.testing.assert_array_equal(loss.sel(rank=1).values, raw_loss[:, 1])
    fwd = run["layers/forward"]
    assert fwd.dims == ("step", "rank", "layer", "stat")
    assert list(fwd.coords["layer"]) == ["fc1", "relu1", "fc2", "relu2", "fc3"]
    assert list(fwd.coords["stat"]) == ["mean", "std", "min", "max", "l2"]
    assert (fwd.coords["step"] == layer_steps).all()
    assert fwd.sel(step=7, rank=0, layer="fc2", stat="l2") == raw_fwd[7, 0, 2, 4]
    with pytest.raises(KeyError, match="no layer 'fc9'"):
        fwd.sel(layer="fc9")
    with pytest.raises(KeyError, match="no dataset 'train/nope'"):
        run["train/nope"]


def test_tidy_frames(base):
    run = divsim.load(base)
    frame = run.frame("train/loss")
    assert list(frame.columns) == ["step", "rank", "loss"] and len(frame) == 80
    row = frame[(frame.step == 3) & (frame["rank"] == 1)]
    assert row["loss"].item() == run.values("train/loss")[3, 1]
    fwd = run.frame("layers/forward")
    assert list(fwd.columns) == ["step", "rank", "layer", "stat", "forward"] and len(fwd) == 40 * 2 * 5 * 5
    assert list(run.frame("train/global_loss").columns) == ["step", "global_loss"]
    assert list(run.frame("events").columns) == ["step", "rank", "kind", "detail"]


def test_config_and_metadata(base):
    run = divsim.load(base)
    assert run.world_size == 2 and len(run.steps) == 40
    assert run.config["optim.lr"] == 0.05 and run.config["batch.global"] == 128
    assert run.config["record.samples"] is True and run.config["model.hidden"] == "256,128"
    assert run.config.section("train")["steps"] == 40
    assert run.train_samples == 4096 and run.samples_per_rank_step == 64
    assert "train/param_hash" in set(run.describe()["dataset"])


def test_steps_per_epoch_matches_the_recorded_samples(base):
    # Independent check: within an epoch no sample repeats; the first step of the next epoch repeats some.
    run = divsim.load(base)
    x = run.values("train/samples")
    epoch = run.steps_per_epoch
    assert epoch == 4096 // 128
    assert len(np.unique(x[:epoch])) == x[:epoch].size
    assert np.isin(x[epoch], x[:epoch]).any()


def _with_fault_records(f):
    f.attrs["config"] = "fault = bitflip:ranks=1,start=5\n" + f.attrs["config"]
    add_table_rows(f, "faults", [(b"bitflip", b"1", b"bitflip:ranks=1,start=5", 5, -1, 1, 1.0)])
    add_table_rows(f, "events", [(5, 1, b"bitflip", b"flipped bit 30 of element 17"),
                                 (6, -1, b"overflow", b"loss scale 1024 -> 512")])


def test_blind_hides_what_names_a_fault(runs, base):
    path = runs.forge("fault_records", base, _with_fault_records)
    seen = divsim.load(path)
    assert seen.fault_specs == ["bitflip:ranks=1,start=5"] and seen.config.faults == ["bitflip:ranks=1,start=5"]
    assert list(seen.events["kind"]) == ["bitflip", "overflow"]
    blind = divsim.load(path, blind=True)
    with pytest.raises(divsim.BlindError):
        blind.faults
    assert blind.config.faults == [] and "bitflip" not in blind.attrs["config"]
    assert list(blind.events["kind"]) == ["overflow"]
    assert blind.config.values == seen.config.values


def test_bad_files_give_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such run file"):
        divsim.load(tmp_path / "missing.h5")
    (tmp_path / "text.h5").write_text("not hdf5")
    with pytest.raises(ValueError, match="not an HDF5 file"):
        divsim.load(tmp_path / "text.h5")
    with h5py.File(tmp_path / "other.h5", "w") as f:
        f["x"] = 1
    with pytest.raises(ValueError, match="schema_version"):
        divsim.load(tmp_path / "other.h5")


def test_a_killed_run_opens_from_its_partial_with_a_warning(killed):
    with pytest.warns(divsim.run.PartialRunWarning) as caught:
        run = divsim.load(killed)
    assert run.partial and run.path == killed + ".partial" and run.name == "killed"
    assert len(run.steps) > 0 and (run.steps == np.arange(len(run.steps))).all()
    message = str(caught[0].message)
    assert message.startswith(f"{killed} does not exist: opened {killed}.partial instead")
    assert f"the {len(run.steps)} steps of a run that has not finished" in message and "recovered" in message
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # asked for by its own name, the .partial opens without a warning
        assert divsim.load(killed + ".partial").partial


def test_a_journal_without_a_readable_file_says_how_to_recover(killed, tmp_path):
    out = tmp_path / "killed.h5"
    shutil.copy(killed + ".journal", f"{out}.journal")
    with pytest.raises(FileNotFoundError, match="no such run file") as e:
        divsim.load(out)
    assert str(e.value) == (f"no such run file: {out}, nor {out}.partial; {out}.journal exists: if the run was "
                            f"killed, `build/divsim recover {out}` rebuilds its trajectory into {out}.partial")
    # A kill inside an HDF5 flush can leave a .partial that does not open.
    (tmp_path / "killed.h5.partial").write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(100))
    with pytest.raises(ValueError, match="not an HDF5 file") as e:
        divsim.load(out)
    assert f"`build/divsim recover {out}`" in str(e.value)


def test_labelled_selection_and_frame():
    lab = divsim.Labelled(np.arange(6).reshape(3, 2), ("step", "rank"), {"step": [10, 20, 30]}, name="x")
    assert lab.sel(step=20).dims == ("rank",) and list(lab.sel(step=20).values) == [2, 3]
    assert lab.sel(step=[10, 30]).shape == (2, 2)
    assert lab.isel(rank=1).coords["step"].tolist() == [10, 20, 30]
    assert lab.sel(step=30, rank=1) == 5
    frame = lab.to_frame()
    assert frame.to_dict("list") == {"step": [10, 10, 20, 20, 30, 30], "rank": [0, 1] * 3, "x": list(range(6))}
    with pytest.raises(ValueError, match="coordinate 'step'"):
        divsim.Labelled(np.zeros((3, 2)), ("step", "rank"), {"step": [1, 2]})
