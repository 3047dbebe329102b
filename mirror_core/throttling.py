"""Repeated warnings said at a bounded rate: a link that is down is probed (or a broker reconnected to) every
second or so, and each failure is the same line."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

#: librdkafka's counters in its error text ("577 identical error(s) suppressed", "after 0ms in state
#: CONNECT"): they change on every probe and do not make a new reason (the cluster alias, host and port do)
_COUNTERS = re.compile(r"\d+(?= identical error)|(?<=after )\d+(?=ms)")
#: texts remembered before those said longer than ``every_s`` ago are forgotten
_KEPT = 256


@dataclass
class ThrottledLine:
    """Whether to log a repeated warning now: a text (librdkafka's counters aside) the first time, and then
    the same text at most every ``every_s`` seconds (a five-minute outage probed every 5 s is one line a
    minute, not sixty; reasons that alternate are each throttled on their own)."""

    every_s: float = 60.0
    _logged: dict[str, float] = field(default_factory=dict, init=False, repr=False)
    #: the wire client's workers share one (Brokers.line): rebuilding the dict while another thread adds to it
    #: would raise in that thread
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def due(self, text: str, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        shape = _COUNTERS.sub("#", text)
        with self._lock:
            if len(self._logged) > _KEPT:  # texts that carry changing numbers must not grow this without end
                self._logged = {k: t for k, t in self._logged.items() if now - t < self.every_s}
            if now - self._logged.get(shape, float("-inf")) >= self.every_s:
                self._logged[shape] = now
                return True
            return False

    def forget(self, texts: Iterable[str]) -> None:
        """These texts are due again: what they said is over."""
        with self._lock:
            for text in texts:
                self._logged.pop(_COUNTERS.sub("#", text), None)
