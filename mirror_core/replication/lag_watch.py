"""Keeps a flow's lag current while its loop cannot.

The loop publishes the lag gauges and /status every ``offset.flush.interval.ms``. Across a cut link it can
wait a minute and more in one call (an exactly-once commit or abort, a probe of the target), and partitions
released while the target does not answer (stranded, reporting.py) are no longer the loop's at all. Their
lag is the source's end minus the last position made visible, and only the source has to answer for it:
this thread asks it every SOURCE_REFRESH_S, in one ListOffsets per source broker, with its own admin client
(created the first time it is needed, so a flow whose loop never stops publishing opens no connection).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any

from mirror_core.kafka_io import log_ends_batch
from mirror_core.replication.reporting import SOURCE_REFRESH_S, Reporter
from mirror_core.throttling import ThrottledLine

log = logging.getLogger(__name__)
#: How long one question to the source may take (the source answers: only the target is cut off).
ASK_TIMEOUT_S = 2.0


class LagWatch:
    """A thread that runs :meth:`Reporter.refresh_from_source` every ``interval`` while it is needed."""

    def __init__(self, reporter: Reporter, make_admin: Callable[[], Any], interval: float = SOURCE_REFRESH_S) -> None:
        self.reporter = reporter
        self._make_admin = make_admin
        self._admin: Any = None
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lag-watch {reporter.flow_name}", daemon=True)
        self._line = ThrottledLine()
        self._held_gauge = reporter.metrics.loop_held.labels(reporter.flow_name)

    def __enter__(self) -> LagWatch:
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(ASK_TIMEOUT_S + 1)
        self._held_gauge.set(0)  # the flow stopped: nothing waits

    def _ends(self, keys: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        if self._admin is None:
            self._admin = self._make_admin()
        try:
            return log_ends_batch(self._admin, keys, ASK_TIMEOUT_S, committed=True)
        finally:
            self._admin.poll(0)  # its error and log callbacks (cluster health) run here, and do not pile up

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._held_gauge.set(self.reporter.held_for() or 0)
            if not self.reporter.needs_source():
                continue
            try:
                self.reporter.refresh_from_source(self._ends)
            except Exception as exc:  # a gauge left as it was is the worst outcome: never end the thread for it
                if self._line.due(f"{type(exc).__name__}: {exc}"):
                    log.warning("flow %s: could not refresh the lag from the source (%s); the lag gauge keeps its "
                                "last values until it answers", self.reporter.flow_name, exc)
