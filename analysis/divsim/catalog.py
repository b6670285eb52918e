"""Names the analysis shares with the simulator: the fault catalog and the precision tolerances.

The fault names are the ones `--fault NAME:...` accepts (docs/faults.md); diagnose ranks causes with
them and a blind diagnosis hides every /events row whose kind contains one. The tolerances are seed
000 §3.3's table. Nothing here reads files or knows how a fault shows in a trajectory (that is
detectors.py and evidence.py).
"""

FAULTS = {
    "unsynced_seed": "a random stream (init, sampler, dropout, augment) keyed by rank or clock",
    "overlapping_shards": "two ranks with one rank id, a wrong num_replicas, or shuffle after shard",
    "tf32_mismatch": "one rank on a TF32/BF16/FP16 matmul path, the others FP32",
    "bn_drift": "BatchNorm without SyncBN and without buffer broadcast",
    "skip_rank": "a rank dropped from the allreduce, updating alone",
    "accum_misalign": "a rank off by one micro-step; scheduler stepped per micro-step",
    "loss_skew": "ranks with different loss hyper-parameters",
    "optimizer_state_reset": "a rank resumed without optimizer state",
    "loss_scaler_desync": "fp16 dynamic loss scale not agreed across ranks",
    "reduction_order": "bucket size or summation order differs per rank or per run",
    "bitflip": "silent data corruption in one gradient element",
    "stale_scheduler": "scheduler state lost on resume",
    "clip_mismatch": "ranks clip the gradient norm with different thresholds",
    "reduce_dtype_mismatch": "a rank sends its gradient to the allreduce in bf16/fp16, the others in fp32",
}

# precision.matmul -> (rtol, atol), seed 000 §3.3. Values are compared after dividing by the
# quantity's typical magnitude (compare.py), so atol is in units of that magnitude.
TOLERANCES = {
    "fp32": (1e-5, 1e-6),
    "tf32": (1e-3, 1e-4),
    "fp16": (1e-3, 1e-4),
    "bf16": (1e-2, 1e-2),
}


def names_fault(kind):
    """True when an /events kind names a catalog fault (such rows are hidden from a blind diagnosis)."""
    kind = kind.lower()
    return any(name in kind for name in FAULTS)


def tolerance(*precisions):
    """(rtol, atol, precision) of the loosest of the given precision.matmul values."""
    known = [p for p in precisions if p in TOLERANCES]
    if not known:
        return TOLERANCES["fp32"] + ("fp32",)
    loosest = max(known, key=lambda p: TOLERANCES[p])
    return TOLERANCES[loosest] + (loosest,)
