"""Adaptive batching: when the replicator sends what it produced at once, and when batches may grow.

A read that returns less than a full batch means the mirror has read everything there is right now:
what it produced goes out at once (at-least-once: past the producer's linger; exactly-once: the open
transactions commit, which makes the records visible). A full batch means a backlog, where large
batches and transactions pay for themselves; a backlog that lasts is still sent after a short bound
that doubles each time, until it reaches the commit interval and the interval's own commit takes over.
No knob: the configured waits (linger.ms, offset.flush.interval.ms) are the ceiling under backlog.
"""

from __future__ import annotations

#: how long a backlog's records may wait before they are sent anyway, at first (doubles per send)
FIRST_BOUND_S = 0.05


class SendPacer:
    def __init__(self, interval_s: float, first_bound_s: float = FIRST_BOUND_S) -> None:
        self.interval_s = interval_s
        self.first_bound_s = first_bound_s
        self.bound_s = first_bound_s
        self.due: float | None = None  # when a lasting backlog is sent anyway (None: no backlog)

    def after_read(self, now: float, count: int, batch_max: int) -> bool:
        """A read returned ``count`` records: True when what was produced should be sent now."""
        if count < batch_max:
            self.bound_s, self.due = self.first_bound_s, None
            return count > 0
        if self.due is None:
            self.due = now + self.bound_s
            return False
        if now < self.due:
            return False
        self.bound_s *= 2
        self.due = now + self.bound_s if self.bound_s < self.interval_s else float("inf")
        return True
