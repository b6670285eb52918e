"""divsim.compare on real runs: a rerun is bitwise equal; a changed learning rate, sampler seed, loss
or precision is found at the step and in the phase where it acts; world sizes compare what they can."""
import numpy as np
import pytest

import divsim


def test_rerun_is_bitwise_equal(runs, base):
    c = divsim.compare(runs("base_rerun"), base)
    assert c.same_setup and c.first_difference is None and c.first_divergence is None
    assert not c.table()["first_difference"].notna().any()


def test_learning_rate_change_shows_in_the_optimizer_phase_at_step_0(runs, base):
    c = divsim.compare(runs("lr", ["--optim.lr=0.06"]), base)
    assert c.config_diff == {"optim.lr": (0.06, 0.05)} and not c.same_setup
    assert c.first_difference is None  # not the same set-up: no bitwise verdict
    d = c.first_divergence
    assert (d.step, d.phase, d.direction, d.ranks) == (0, "optimizer", "update", [0, 1])
    assert d.quantities == ["train/lr"] and d.magnitude == pytest.approx(0.01 / 0.05)


def test_sampler_seed_change_shows_in_the_data_phase(runs, base):
    d = divsim.compare(runs("sampler_seed", ["--sampler.seed=1"]), base).first_divergence
    assert (d.step, d.phase, d.direction, d.ranks) == (0, "data", "forward", [0, 1])
    assert d.layer == "fc1"  # different inputs: the first layer's output differs first


def test_loss_change_differs_after_an_identical_forward(runs, base):
    # Label smoothing leaves the forward pass alone and changes the loss and the gradient of the logits.
    c = divsim.compare(runs("smooth", ["--loss.label_smoothing=0.1"]), base)
    d = c.first_divergence
    assert (d.step, d.phase, d.direction) == (0, "loss", "loss")
    assert d.layer_recorded and d.layer == "fc3"  # the last layer's backward statistics differ first
    profile = c.layer_profile(0)
    assert (profile["forward"] == 0).all() and profile.set_index("layer").loc["fc3", "backward"] > 1e-3


def test_tolerance_follows_the_looser_precision(runs, base):
    tf32 = runs("tf32", ["--precision.matmul=tf32"])
    loose = divsim.compare(tf32, base)
    assert loose.precision == "tf32" and (loose.rtol, loose.atol) == (1e-3, 1e-4)
    strict = divsim.compare(tf32, base, rtol=1e-5, atol=1e-6)
    assert strict.first_divergence.step <= loose.first_divergence.step
    # TF32 rounding is numerical noise: it shows from step 0, far below TF32's rtol at first, then grows.
    rel = loose.relative("train/global_loss").values[:, 0]
    assert 0 < rel[0] and rel[:5].max() < 1e-4 < rel.max()


def test_other_world_size_compares_replica_quantities_only(base, base4):
    c = divsim.compare(base4, base)
    table = c.table().set_index("dataset")
    assert not table.loc["train/loss", "compared"] and "world sizes differ" in table.loc["train/loss", "note"]
    assert table.loc["train/param_norm", "compared"] and table.loc["train/global_loss", "compared"]
    # Same global batch, only the summation order differs: the loss agrees far below FP32 tolerance.
    assert c.relative("train/global_loss").values.max() < 1e-6
    assert c.relative("train/param_norm").shape == (40, 4)


def test_align_puts_runs_side_by_side(runs, base):
    lr = runs("lr", ["--optim.lr=0.06"])
    frame = divsim.align([divsim.load(base), divsim.load(lr), divsim.load(lr)], "train/lr", rank=0)
    assert list(frame.columns) == ["base", "lr", "lr (2)"]
    assert (frame.index == np.arange(40)).all() and frame.iloc[0].tolist() == [0.05, 0.06, 0.06]
