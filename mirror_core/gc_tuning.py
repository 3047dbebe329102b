"""Python's cyclic garbage collector, set for the copy loop.

Every consumed record is a container object the collector tracks, and a consumed batch (10,000 records by
default) stays alive until it is produced. With the default first-generation threshold (700 allocations)
a collection runs every few hundred records, finds them all alive and promotes them, so the records of
every batch are traversed again in the older generations, together with everything else the process
holds — more at 2,000 partitions than at 8. Profiled at 2,000 partitions: 15-20 % of the copy loop's time
in ``gc_collect_main`` (py-spy --native). With the threshold above a few batches, a batch is freed by
reference counting before a collection sees it; the start-up objects (modules, configuration) are frozen
out of full collections.
"""

from __future__ import annotations

import gc

#: First-generation threshold when flows fetch small batches; a bigger batch raises it (``for_batches``).
MIN_THRESHOLD = 50_000
MAX_THRESHOLD = 2_000_000


def threshold_for(batch_sizes: list[int]) -> int:
    """Allocations between collections of the youngest generation: four times what all flows can hold
    in consumed batches at once, so a batch in hand is never what triggers a collection."""
    return max(MIN_THRESHOLD, min(MAX_THRESHOLD, 4 * sum(batch_sizes)))


def tune(batch_sizes: list[int]) -> None:
    """Called once, after start-up: cheaper collections for the rest of the process's life (cycles are
    still collected, only less often; memory held by garbage cycles is bounded by the threshold)."""
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(threshold_for(batch_sizes), older, oldest)
    gc.freeze()
