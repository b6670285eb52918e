"""diagnose: zero causes on clean runs of several seeds, world sizes and set-ups; the right cause, step
and ranks for each fault signature (real runs where the config can produce it, forged copies of a
clean run otherwise); symptom classes; blindness."""
import numpy as np
import pytest

import divsim
from conftest import add_table_rows
from divsim.evidence import NAMED_WEIGHTS, WEIGHTS

CLEAN = {  # name: (run arguments, processes, logical world size)
    "base": ([], 2, None),
    "base4": ([], 2, 4),
    "w1_seed3": (["--run.seed=3", "--sampler.seed=3"], 1, None),
    "w3_nodrop": (["--batch.global=120", "--batch.drop_last=false", "--run.seed=2", "--batch.lr_scaling=linear",
                   "--batch.base_global=64"], 1, 3),
    "w8_seed1": (["--run.seed=1", "--sampler.seed=1"], 2, 8),
    "bn_dropout_augment": (["--model.batchnorm=true", "--model.dropout=0.2", "--data.augment=true"], 2, None),
    "adamw_step_clip_accum": (["--optim.type=adamw", "--optim.lr=0.002", "--schedule.type=step",
                               "--schedule.step_size=7", "--schedule.warmup_steps=5", "--optim.clip_norm=0.5",
                               "--batch.accum_steps=2"], 2, None),
    "deterministic_global_batch": (["--dist.reduce=deterministic", "--sampler.mode=global_batch",
                                    "--schedule.min_lr=0.01", "--schedule.warmup_steps=3"], 2, None),
    # Dynamic loss scaling that overflows (every rank skips together) over ring reductions.
    "amp_ring": (["--precision.amp=fp16", "--precision.loss_scale_init=262144",
                  "--precision.loss_scale_growth_interval=10", "--dist.reduce=ring"], 2, 4),
}


def _clean(runs, name):
    args, procs, world = CLEAN[name]
    return runs(name, args, procs=procs, world_size=world)


@pytest.mark.parametrize("name", sorted(CLEAN))
def test_clean_runs_have_no_cause(runs, name):
    d = divsim.diagnose(_clean(runs, name), blind=True)
    assert d.causes == [] and d.findings == [], str(d)
    assert d.symptom == "none" and d.first_divergent_step is None and d.replicas["in_sync"]


def test_clean_run_against_its_baseline_has_no_cause(runs, base):
    d = divsim.diagnose(runs("base_rerun"), reference=base, blind=True)
    assert d.causes == [] and d.divergence is None and d.symptom == "none"


def test_schedule_table_is_what_clean_ranks_used(runs):
    """/schedule/lr (what lr_findings compares with) is bit for bit the lr every rank of a clean run used,
    warmup, step decay, cosine and batch.lr_scaling included."""
    for name in ("base", "w3_nodrop", "adamw_step_clip_accum", "deterministic_global_batch"):
        run = divsim.load(_clean(runs, name))
        table = run.values("schedule/lr")
        meta = run.describe().set_index("dataset")
        assert len(table) == run.config.get("train.steps") and meta.loc["schedule/lr", "dims"] == "step", name
        assert (run.values("train/lr") == table[run.steps][:, None]).all(), name
    # cosine from optim.lr * 120 / 64 (batch.lr_scaling=linear): steps 0 and 1 pin both the base and the scaling
    w3 = divsim.load(_clean(runs, "w3_nodrop")).values("schedule/lr")
    assert w3[0] == 0.05 * 120 / 64 and w3[1] == pytest.approx(0.05 * 120 / 64 * 0.5 * (1 + np.cos(np.pi / 40)), rel=1e-14)


def test_bn_without_buffer_broadcast_is_bn_drift(runs):
    path = runs("bn_unsynced", ["--model.batchnorm=true", "--dist.broadcast_buffers=false"])
    d = divsim.diagnose(path, blind=True)
    assert d.replicas["in_sync"] and d.causes[0]["fault"] == "bn_drift"
    assert d.first_divergent_step == 9  # the first evaluation (eval_every = 10)
    assert d.symptom == "drift"


# --- forged signatures: (edit of a clean W=4 run, expected fault, first step, ranks) ----------------

def _split(f, rank, step, update=1.0, rel=0.0):
    """Rank `rank` parts from `step` on: other parameter bits, and a parameter norm whose change in that
    step is `update` times the others' (plus `rel` of the norm)."""
    f["train/param_hash"][step:, rank] = f["train/param_hash"][step:, rank] ^ np.uint64(0x5A5A5A5A)
    pn = f["train/param_norm"][()]
    change = pn[step, rank] - pn[step - 1, rank] if step > 0 else 0.0
    pn[step:, rank] += (update - 1) * change + rel * pn[step, rank]
    f["train/param_norm"][...] = pn


def skip_rank(f):
    g, gl = f["train/grad_norm"], f["train/grad_norm_local"]
    g[15, 2] = gl[15, 2]
    _split(f, 2, 15, rel=1e-4)


def optimizer_state_reset(f):
    _split(f, 1, 20, update=0.1)  # no momentum: a much smaller step


def accum_misalign(f):
    lr = f["train/lr"][()]
    lr[10:39, 3] = lr[11:40, 3]
    lr[39, 3] = 0.0
    f["train/lr"][...] = lr
    _split(f, 3, 10, rel=1e-4)


def stale_scheduler(f):
    lr = f["train/lr"][()]
    lr[25:, 0] = lr[:15, 0]
    f["train/lr"][...] = lr
    _split(f, 0, 25, rel=1e-4)


def loss_scaler_desync(f):
    f.attrs["config"] = f.attrs["config"].replace("amp = none", "amp = fp16")
    f["train/loss_scale"][12:, 1] = 0.5
    h = f["train/param_hash"][()]
    h[12, 1] = h[11, 1]
    h[13:, 1] ^= np.uint64(77)
    f["train/param_hash"][...] = h


def clip_mismatch(f):
    g = f["train/grad_norm"][()]
    c = float(np.median(g[:, 0]))
    rows = np.flatnonzero(g[:, 0] > c)
    g[rows, 1] = c
    f["train/grad_norm"][...] = g
    _split(f, 1, int(rows[0]), rel=1e-4)


def bitflip(f):
    f["train/grad_norm_local"][18, 2] = f["train/grad_norm_local"][18, 2] * 1e6
    f["train/grad_norm"][18, :] = f["train/grad_norm"][18, :] * 1e3


def reduction_order(f):
    f["train/grad_norm"][5:, 3] = f["train/grad_norm"][5:, 3] * (1 + 1e-9)
    _split(f, 3, 5, rel=1e-10)


def loss_skew(f):
    f["train/loss"][:, 1] = f["train/loss"][:, 1] + 0.2


def unsynced_init(f):
    _split(f, 1, 0, rel=1e-2)


def accum_extra_update(f):
    _split(f, 2, 22, update=2.0)  # one more update than the others


def accum_missed_update(f):
    h = f["train/param_hash"][()]
    h[8, 1] = h[7, 1]
    h[9:, 1] ^= np.uint64(31)
    f["train/param_hash"][...] = h


def skip_rank_stale(f):
    g = f["train/grad_norm"]
    g[30, 0] = g[29, 1]  # the last reduced gradient it received
    _split(f, 0, 30, rel=1e-5)


def local_shuffle(f):
    x = f["train/samples"][()]
    x[:, 3] = (np.arange(x[:, 3].size).reshape(x[:, 3].shape) * 4 + 3) % 4096  # indices 3 + 4k
    f["train/samples"][...] = x


FORGED = [  # edit, expected top cause, expected first divergent step, ranks some finding names
    (skip_rank, "skip_rank", 15, [2]),
    (optimizer_state_reset, "optimizer_state_reset", 20, [1]),
    (accum_misalign, "accum_misalign", 10, [3]),
    (stale_scheduler, "stale_scheduler", 25, [0]),
    (loss_scaler_desync, "loss_scaler_desync", 12, [1]),
    (clip_mismatch, "clip_mismatch", None, [1]),
    (bitflip, "bitflip", 18, [2]),
    (reduction_order, "reduction_order", 5, [3]),
    (loss_skew, "loss_skew", None, [1]),
    (unsynced_init, "unsynced_seed", 0, [1]),
    (accum_extra_update, "accum_misalign", 22, [2]),
    (accum_missed_update, "accum_misalign", 8, [1]),
    (skip_rank_stale, "skip_rank", 30, [0]),
    (local_shuffle, "overlapping_shards", 0, [3]),
]


@pytest.mark.parametrize("edit,fault,step,ranks", FORGED, ids=[e[0].__name__ for e in FORGED])
def test_forged_signature_names_its_fault(runs, base4, edit, fault, step, ranks):
    d = divsim.diagnose(runs.forge(f"forged_{edit.__name__}", base4, edit), blind=True)
    assert d.causes and d.causes[0]["fault"] == fault, str(d)
    assert ranks in [f.ranks for f in d.findings]  # the faulty ranks are named
    if step is not None:
        assert d.first_divergent_step == step
    assert all(isinstance(e, str) and e for c in d.causes for e in c["evidence"])


def duplicate_shard(f):
    f["train/samples"][:, 1] = f["train/samples"][:, 0]
    f["train/loss"][:, 1] = f["train/loss"][:, 0]


def test_duplicate_shard_is_overlapping_shards_from_step_0(runs, base):
    d = divsim.diagnose(runs.forge("forged_duplicate_shard", base, duplicate_shard), blind=True)
    assert d.causes[0]["fault"] == "overlapping_shards" and d.first_divergent_step == 0
    assert {"sample_overlap", "duplicate_batch", "identical_rank_losses"} <= {f.key for f in d.findings}
    assert d.symptom == "from_step_0"


def test_skip_rank_against_the_baseline(runs, base4):
    path = runs.forge("forged_skip_rank", base4, skip_rank)
    d = divsim.diagnose(path, reference=base4, blind=True)
    assert d.causes[0]["fault"] == "skip_rank"
    assert d.divergence["step"] == 15 and d.divergence["phase"] == "reduce" and d.divergence["ranks"] == [2]
    assert d.symptom == "drift"


def test_last_bit_differences_from_the_same_set_up_are_a_rerun_difference(runs, base):
    def tiny(f):
        f["train/param_hash"][5:] = f["train/param_hash"][5:] ^ np.uint64(99)
        for name in ("train/loss", "train/global_loss", "train/param_norm"):
            f[name][6:] = f[name][6:] * (1 + 1e-12)
    d = divsim.diagnose(runs.forge("forged_rerun", base, tiny), reference=base, blind=True)
    assert d.divergence["step"] == 5 and d.divergence["phase"] == "update" and d.divergence["bitwise"]
    assert d.symptom == "rerun_differs" and d.causes[0]["fault"] == "reduction_order"


def test_precision_change_is_per_step_noise_and_a_config_difference(runs, base):
    d = divsim.diagnose(runs("tf32", ["--precision.matmul=tf32"]), reference=base, blind=True)
    assert d.causes == [] and d.findings == [] and d.symptom == "per_step_noise", str(d)
    assert d.config_diff == {"precision.matmul": ("tf32", "fp32")} and d.expected


def test_a_reference_of_another_seed_is_a_config_difference_not_a_fault(runs):
    run, reference = runs("seed1", ["--run.seed=1"]), runs("seed2", ["--run.seed=2"])
    d = divsim.diagnose(run, reference=reference, blind=True)
    assert d.causes == [] and d.findings == [] and d.first_divergent_step is None, str(d)
    assert d.config_diff == {"run.seed": (1, 2)}
    assert d.divergence["step"] == 0 and d.expected  # the evidence is still shown
    assert d.summary.startswith("The configuration differs from that of the reference 'seed2': "
                                "run.seed = 1 here, 2 in the reference.")
    lines = str(d).splitlines()
    assert lines[1:4] == ["", "configuration differs from the reference (differences from it are expected, not faults):",
                          "  run.seed = 1 here, 2 in the reference"]
    assert "likely causes: none" in lines
    for text in (str(d), d.to_json()):
        assert not [fault for fault in divsim.FAULTS if fault in text], text
    assert divsim.diagnose(run, reference=run, blind=True).config_diff == {}


def test_bookkeeping_keys_are_no_config_difference(runs, base):
    path = runs("bookkeeping", ["--record.layers_every=5", "--record.flush_every=7", "--run.checkpoint_every=20",
                                "--dist.timeout_s=100"])
    d = divsim.diagnose(path, reference=base, blind=True)
    assert d.comparison.same_setup and d.divergence is None and d.causes == [], str(d)
    assert d.config_diff == {}


def test_sawtooth(runs, base):
    def jumps(f):
        y = f["train/global_loss"][()]
        y[10::5] *= 3
        f["train/global_loss"][...] = y
    d = divsim.diagnose(runs.forge("forged_sawtooth", base, jumps), blind=True)
    saw = [f for f in d.findings if f.key == "sawtooth"]
    assert d.sawtooth and saw[0].data["period"] == 5 and saw[0].step == 10


def test_blind_diagnosis_ignores_fault_records(runs, base):
    def records(f):
        f.attrs["config"] = "fault = bitflip:ranks=1,start=5\n" + f.attrs["config"]
        add_table_rows(f, "faults", [(b"bitflip", b"1", b"bitflip:ranks=1,start=5", 5, -1, 1, 1.0)])
        add_table_rows(f, "events", [(5, 1, b"bitflip", b"flipped bit 30 of element 17")])
    path = runs.forge("forged_records", base, records)
    assert divsim.diagnose(path).causes[0]["fault"] == "bitflip"  # not blind: the event log is evidence
    blind = divsim.diagnose(path, blind=True)
    assert blind.causes == [] and blind.findings == []


def test_cause_table_uses_catalog_names_and_reaches_every_fault():
    named = {fault for row in WEIGHTS.values() for fault in row}
    assert named <= set(divsim.FAULTS)
    assert {f for row in WEIGHTS.values() for f, w in row.items() if w > 0} == set(divsim.FAULTS)
    assert not set(NAMED_WEIGHTS) & set(WEIGHTS)
