"""The cause table: how much each kind of finding speaks for each catalog fault, and the ranking.

WEIGHTS[key][fault] is added, times the finding's strength, to the fault's score; the causes are the
faults with a positive score, best first, each with the findings that raised it. This table is the
one place to tune the diagnosis: the weights below come from how each fault shows in the trajectories
(docs/faults.md "first visible where", seeds 000 and 002) and are meant to be re-fitted on real
faulty runs (`build/divsim evaluate`, docs/analysis.md). It does not look at files.
"""
from .catalog import FAULTS

WEIGHTS = {
    # Replica consistency (/train/param_hash) and how the replicas came apart.
    "replicas_split": {"skip_rank": 1, "optimizer_state_reset": 1, "accum_misalign": 1, "loss_scaler_desync": 1,
                       "clip_mismatch": 1, "stale_scheduler": 0.5, "bitflip": 0.5, "reduction_order": 0.5,
                       "unsynced_seed": 0.5},
    # Before the first update there is no optimizer state to lose.
    "split_at_step0": {"unsynced_seed": 3, "optimizer_state_reset": -3},
    "split_last_bits": {"reduction_order": 3, "bitflip": 1},
    "split_same_update_inputs": {"optimizer_state_reset": 3, "accum_misalign": 1, "unsynced_seed": 1, "bitflip": 1},
    "split_update_larger": {"accum_misalign": 4},
    "split_update_smaller": {"optimizer_state_reset": 2},
    "rank_skipped_update": {"loss_scaler_desync": 4},
    "rank_missed_update": {"accum_misalign": 4},
    # The gradient each replica applied.
    "applied_gradient_disagree": {"skip_rank": 1, "clip_mismatch": 1, "reduction_order": 0.5, "bitflip": 0.5},
    "applied_own_gradient": {"skip_rank": 5},
    "applied_gradient_last_bits": {"reduction_order": 3},
    "applied_gradient_spike": {"bitflip": 3},
    "clip_threshold_mismatch": {"clip_mismatch": 5},
    # Learning rate and loss scale.
    "lr_disagree": {"accum_misalign": 2, "stale_scheduler": 2},
    "lr_ahead_of_schedule": {"accum_misalign": 3},
    "lr_behind_schedule": {"stale_scheduler": 3},
    "lr_off_schedule": {"accum_misalign": 1, "stale_scheduler": 1},
    "loss_scale_disagree": {"loss_scaler_desync": 5},
    # Data: shards and samples.
    "sample_overlap": {"unsynced_seed": 2, "overlapping_shards": 1.5},
    "duplicate_batch": {"overlapping_shards": 4},
    "identical_rank_losses": {"overlapping_shards": 3},
    "epoch_repeats_other": {"unsynced_seed": 1.5, "overlapping_shards": 1},
    "epoch_repeats_own": {"overlapping_shards": 4},
    "strided_shard": {"overlapping_shards": 5},
    "shard_not_reshuffled": {"overlapping_shards": 4},
    # Buffers, per-rank outliers, corruption.
    "eval_spread_in_sync": {"bn_drift": 5},
    "eval_spread_numeric": {"tf32_mismatch": 5},
    "rank_loss_offset": {"loss_skew": 3},
    "rank_grad_norm_offset": {"loss_skew": 2},
    "nonfinite": {"bitflip": 3},
    "grad_norm_spike": {"bitflip": 4},
    "sawtooth": {"skip_rank": 1},
    # Generic events (never those naming a fault: see event_names_fault below).
    "event_overflow_partial": {"loss_scaler_desync": 3},
    "event_nonfinite": {"bitflip": 1},
    # Against a reference of the same configuration: the phase of the first difference, its size.
    "ref_data_differs": {"unsynced_seed": 2, "overlapping_shards": 2, "accum_misalign": 1},
    "ref_forward_small": {"tf32_mismatch": 4},
    "ref_forward_large": {"unsynced_seed": 2},
    "ref_forward_later_layer": {"unsynced_seed": 3},
    "ref_loss_first": {"loss_skew": 4},
    "ref_loss_changed": {"loss_skew": 3, "unsynced_seed": 0.5},
    # Forward and loss bitwise equal, the gradient not: the gradient itself was corrupted.
    "ref_backward_first": {"bitflip": 4, "loss_skew": 0.5},
    "ref_backward_tolerance": {"tf32_mismatch": 1, "loss_skew": 0.5, "bitflip": 0.5},
    # ... and by no more than a bf16 rounding of every element could: the gradient was sent in bf16/fp16.
    "ref_backward_rounding": {"reduce_dtype_mismatch": 5, "bitflip": 0.5},
    "ref_reduce_first": {"skip_rank": 1, "clip_mismatch": 1, "reduction_order": 1, "bitflip": 1},
    "ref_optimizer_first": {"stale_scheduler": 1.5, "accum_misalign": 1.5, "loss_scaler_desync": 1},
    "ref_update_first": {"optimizer_state_reset": 2, "loss_scaler_desync": 1, "bitflip": 0.5},
    "ref_eval_only": {"bn_drift": 4},
    "ref_onset_last_bits": {"reduction_order": 3},
    "ref_world_size_differs": {"reduction_order": 1},
}
# Findings that carry their fault in data["fault"], with their weight.
NAMED_WEIGHTS = {"event_names_fault": 10}


def _contributions(finding):
    if finding.key in NAMED_WEIGHTS:
        return {finding.data["fault"]: NAMED_WEIGHTS[finding.key]}
    return WEIGHTS.get(finding.key, {})


def rank_causes(findings):
    """[{"fault", "score", "evidence"}], best first, each fault's evidence strongest first; [] when no
    finding speaks for any fault."""
    scores, evidence = {}, {}
    for f in findings:
        for fault, weight in _contributions(f).items():
            scores[fault] = scores.get(fault, 0.0) + weight * f.strength
            if weight > 0:
                evidence.setdefault(fault, []).append((weight * f.strength, f.text))
    order = list(FAULTS)
    ranked = sorted((f for f, s in scores.items() if s > 0), key=lambda f: (-scores[f], order.index(f)))
    return [{"fault": f, "score": round(scores[f], 2),
             "evidence": [text for _, text in sorted(evidence[f], key=lambda e: -e[0])]} for f in ranked]
