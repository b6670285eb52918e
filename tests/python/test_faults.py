"""diagnose on real faulty runs of the catalog: blind, against the fault-free baseline of the same set-up,
the injected fault is named first, and where the fault splits the replicas the reported split step is
the injection step (+-1). Small runs: W = 4 logical ranks on 2 processes, 40 steps."""
import pytest

import divsim

AMP = ["--precision.amp=fp16", "--precision.loss_scale_init=262144", "--precision.loss_scale_growth_interval=50"]
SCENARIOS = [  # (fault spec, set-up arguments, step where the replicas split or None)
    ("unsynced_seed:stream=init,ranks=3", [], 0),
    ("unsynced_seed:stream=sampler,ranks=2,start=5", [], None),
    ("overlapping_shards:mode=duplicate_rank,of=0,ranks=1,start=3", [], None),
    ("overlapping_shards:mode=local_shuffle,ranks=2", [], None),
    ("overlapping_shards:mode=wrong_num_replicas,ranks=1", [], None),
    ("tf32_mismatch:ranks=2,start=4", [], None),
    ("bn_drift:ranks=1-3", ["--model.batchnorm=true"], None),
    ("skip_rank:ranks=3,start=12", [], 12),
    ("accum_misalign:offset=1,ranks=2,start=10,stop=11", ["--batch.accum_steps=2"], 10),
    ("accum_misalign:scheduler_per_micro=true,ranks=1,start=6", ["--batch.accum_steps=2"], 6),
    ("loss_skew:param=label_smoothing,value=0.1,ranks=0-1", [], None),
    ("optimizer_state_reset:ranks=1,start=15", [], 15),
    ("loss_scaler_desync:ranks=1", AMP, None),
    ("reduction_order:mode=bucket,cap_mb=0.1,ranks=1", ["--dist.reduce=ring"], 0),
    ("bitflip:bit=30,ranks=2,start=20", [], None),
    ("stale_scheduler:ranks=1,start=20", [], 20),
    ("clip_mismatch:max_norm=0.5,ranks=0", [], None),
    ("reduce_dtype_mismatch:dtype=bf16,ranks=2,start=3", [], None),
    ("reduce_dtype_mismatch:dtype=fp16,ranks=0-1", [], None),
]


def _name(args):
    return "base4_" + "_".join(a.strip("-").replace("=", "").replace(".", "") for a in args) if args else "base4"


@pytest.mark.parametrize("spec,setup,split", SCENARIOS, ids=[s[0].split(",")[0] for s in SCENARIOS])
def test_catalog_fault_is_named_first(runs, spec, setup, split):
    base = runs(_name(setup), setup, world_size=4)
    faulty = runs("fault_" + spec.replace(":", "_").replace(",", "_").replace("=", ""), [*setup, f"--fault={spec}"],
                  world_size=4)
    d = divsim.diagnose(faulty, reference=base, blind=True)
    fault = spec.split(":")[0]
    assert d.causes and d.causes[0]["fault"] == fault, str(d)
    if split is not None:
        assert abs(d.replicas["first_split_step"] - split) <= 1, str(d)
