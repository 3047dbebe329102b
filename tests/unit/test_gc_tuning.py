from __future__ import annotations

import gc

from mirror_core import gc_tuning


def test_threshold_grows_with_the_batches_all_flows_hold_and_is_bounded() -> None:
    assert gc_tuning.threshold_for([10_000]) == gc_tuning.MIN_THRESHOLD
    assert gc_tuning.threshold_for([10_000] * 5) == 200_000
    assert gc_tuning.threshold_for([1_000_000] * 3) == gc_tuning.MAX_THRESHOLD
    assert gc_tuning.threshold_for([]) == gc_tuning.MIN_THRESHOLD


def test_tune_keeps_the_older_generations_and_freezes_start_up_objects() -> None:
    before = gc.get_threshold()
    try:
        gc_tuning.tune([10_000])
        assert gc.get_threshold() == (gc_tuning.MIN_THRESHOLD, before[1], before[2])
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
