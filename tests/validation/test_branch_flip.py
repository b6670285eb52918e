"""validation/replay.branch_flip, the rule that tells a float32 branch flip from a different computation,
on per-step profiles shaped like real replays (the first case is the 784-512-256-10, lr 0.1, batch 128
run whose flip at step 5 the older rule, which waited for the gradient norms to part by 1e-5 while the
losses still agreed, called NOT OK)."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from validation.replay import branch_flip  # noqa: E402

STEPS = 20


def runs(loss_diff, grad_diff, margins):
    """(ref, rep): rep's loss and local gradient norm differ from ref's by the given relative amounts."""
    ones = np.ones((STEPS, 1))
    ref = {"loss": ones, "grad_norm_local": ones}
    rep = {"loss": ones * (1 + np.asarray(loss_diff))[:, None], "grad_norm_local": ones * (1 + np.asarray(grad_diff))[:, None],
           "relu_margin": np.asarray(margins, dtype=float)}
    return ref, rep


def profile(noise, departure_at, departure, growth=10.0):
    """noise until departure_at, then departure growing by `growth` per step."""
    p = np.full(STEPS, noise)
    p[departure_at:] = departure * growth ** np.arange(STEPS - departure_at)
    return p


def test_the_flip_of_the_wide_high_lr_run_is_found():
    # measured: gradient norms 1e-8 .. 1.8e-8 until step 4, 2.9e-6 at step 5; losses agree to 1e-8 until
    # step 6, pass 1e-6 at step 7; the nearest ReLU input to 0 at step 5: 3.7e-7 x RMS
    loss = profile(1e-8, 6, 8.6e-7, growth=2.0)
    grad = profile(1e-8, 5, 2.9e-6, growth=1.0)
    margins = np.full(STEPS, 1e-5)
    margins[5] = 3.7e-7
    flip = branch_flip(*runs(loss, grad, margins))
    assert flip is not None and flip["step"] == 5 and flip["grad_step"] == 5


def test_no_tie_no_flip():
    loss, grad = profile(1e-8, 6, 8.6e-7, growth=2.0), profile(1e-8, 5, 2.9e-6, growth=1.0)
    assert branch_flip(*runs(loss, grad, np.full(STEPS, 1e-5))) is None


def test_a_tie_two_steps_before_the_departure_counts_three_do_not():
    loss, grad = profile(1e-8, 9, 8e-7, growth=2.0), profile(1e-8, 6, 3e-6, growth=1.0)
    for tie, found in ((4, True), (3, False)):
        margins = np.full(STEPS, 1e-5)
        margins[tie] = 2e-7
        assert (branch_flip(*runs(loss, grad, margins)) is not None) == found, tie


def test_a_departure_at_step_0_is_a_different_computation():
    margins = np.full(STEPS, 1e-7)  # even with ties everywhere
    assert branch_flip(*runs(np.full(STEPS, 1e-9), profile(1e-8, 0, 1e-4, 1.0), margins)) is None


def test_gradients_departing_after_the_losses_are_not_a_flip():
    margins = np.full(STEPS, 1e-7)
    loss = profile(1e-8, 3, 5e-6, growth=2.0)  # e.g. an optimizer setting: the loss moves first
    assert branch_flip(*runs(loss, profile(1e-8, 4, 1e-4, 1.0), margins)) is None


def test_identical_runs_have_no_flip():
    assert branch_flip(*runs(np.zeros(STEPS), np.zeros(STEPS), np.full(STEPS, 1e-7))) is None
