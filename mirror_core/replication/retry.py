"""Delays between attempts: restarting a flow's pipeline and probing clusters that do not answer (the line
said meanwhile: ThrottledLine, throttling.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

#: the longest delay before a pipeline is restarted (and before a failed partition is retried)
MAX_BACKOFF_S = 30.0
#: the longest delay between two probes of a cluster that does not answer. A probe is a metadata call
#: that returns as soon as the link is back, so the wait between probes is what an outage adds to the
#: resumption: kept short (a probe costs one metadata request; a long wait costs copying time).
MAX_PROBE_INTERVAL_S = 5.0
#: a pipeline that ran this long before failing was healthy: its restart starts from the first delay
#: again (before, the delay kept the doubling of every restart in the process's life)
HEALTHY_RUN_S = 60.0


@dataclass
class Backoff:
    """Doubling delays from ``first`` up to ``cap``."""

    first: float = 1.0
    cap: float = MAX_BACKOFF_S
    _next: float = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._next = self.first

    def next(self) -> float:
        """The delay before the next attempt (doubling the one after it)."""
        delay = self._next
        self._next = min(delay * 2, self.cap)
        return delay

    def reset(self) -> None:
        self._next = self.first

    def restart_delay(self, ran_for: float | None) -> float:
        """The delay before restarting a run that copied for ``ran_for`` seconds (None: it never began):
        doubling across failures in a row, from ``first`` again after a healthy run (an error hours after
        the last one is not a flap)."""
        if ran_for is not None and ran_for >= HEALTHY_RUN_S:
            self.reset()
        return self.next()
