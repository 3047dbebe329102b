"""What each remote topic takes (its max.message.bytes on the target), and how many record bytes a partition of it
may have with librdkafka at a time: its *budget*.

librdkafka does not split a batch the target refuses as too large; each would be replayed record by record (careful
mode). So a remote topic that takes less than librdkafka would put in a batch gets its records handed over a batch
at a time, cut to its budget (produce.py). Limits are read when a topic's records first flow, followed from the
topic-config sync's reads, and read again when the target refuses a batch as too large
(:meth:`TopicLimits.after_refusal`): a limit lowered on the target between two syncs then costs the batches in flight,
not careful mode until the next sync.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from mirror_core.config.client_defaults import KAFKA_DEFAULT_MESSAGE_MAX_BYTES
from mirror_core.config.model import FlowConfig
from mirror_core.stores.internal_topics import ask_until_known

log = logging.getLogger(__name__)

#: the produce request's and batch's own headers (topic name, ids), generously (a quarter of a batch smaller than
#: 16 KiB)
REQUEST_SLACK = 4096
#: a remote topic's limit is read again after a refusal at most this often (a record larger than the topic takes
#: is refused again and again, whatever its limit: careful mode pins it down, then pauses its partition)
RELEARN_EVERY_S = 30.0


@dataclass(frozen=True)
class LimitRead:
    """A remote topic's max.message.bytes as read from the target, and when (time.monotonic)."""

    limit: int
    at: float


def budget_for(limit: int) -> int:
    """Record bytes to hand over for one batch of at most ``limit`` bytes: the request's and batch's own headers
    left out (REQUEST_SLACK, a quarter of a limit under 16 KiB)."""
    return limit - min(REQUEST_SLACK, limit // 4)


class TopicLimits:
    def __init__(self, flow: FlowConfig, batch_bytes: int | None = None, one_batch_per_partition: bool = False,
                 describe: Callable[[list[str]], dict[str, int | None]] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.flow = flow
        #: the identity policy's records are produced with a report each (exact reports), never cut
        self.exact_reports = flow.policy.uses_provenance
        #: the most bytes librdkafka puts in one batch (batch.size, message.max.bytes)
        self.client_limit = batch_bytes
        self.one_batch_per_partition = one_batch_per_partition and bool(batch_bytes)
        #: one batch per partition (replication.one.batch.per.partition): the most record bytes (librdkafka's
        #: estimate) handed over at a time, so that they go in one produce request, for a remote topic whose
        #: limit is not known (yet): what a broker takes by default; None: hand over everything
        self.batch_bytes = budget_for(min(batch_bytes, KAFKA_DEFAULT_MESSAGE_MAX_BYTES)) \
            if self.one_batch_per_partition and batch_bytes else None
        #: per remote topic whose limit is known (:meth:`set`): its budget, as batch_bytes
        self.budgets: dict[str, int | None] = {}
        self._unknown: set[str] = set()  # remote topics whose limit the target did not give (said once)
        #: remote topic -> its max.message.bytes, None while the target does not know the topic (TopicConfigSync)
        self.describe = describe
        #: remote topic -> its max.message.bytes, as last read
        self.limits: dict[str, int] = {}
        #: remote topic -> when its limit was last read here (a sync's read older than that is not news)
        self._read_at: dict[str, float] = {}
        self._relearned: dict[str, float] = {}  # remote topic -> when its limit was last read after a refusal
        self.clock = clock

    def budget(self, remote: str) -> int | None:
        """The most record bytes a partition of ``remote`` may have with librdkafka at a time; None: no limit."""
        return self.budgets.get(remote, self.batch_bytes)

    def set(self, limits: Mapping[str, int], at: float | None = None) -> None:
        """The largest batch each remote topic accepts (its max.message.bytes on the target), read at ``at``
        (default: now). A topic that takes less than librdkafka would put in a batch gets one batch per partition,
        cut to its limit."""
        read_at = self.clock() if at is None else at
        for remote, limit in limits.items():
            self.limits[remote] = limit
            self._read_at[remote] = read_at
            if self.client_limit is not None and limit < self.client_limit:
                self.budgets[remote] = budget_for(limit)
            elif self.one_batch_per_partition and self.client_limit is not None:
                self.budgets[remote] = budget_for(self.client_limit)
            else:
                self.budgets[remote] = None  # librdkafka's own limit keeps its batches within the topic's

    def learn(self, remotes: Iterable[str], wait: Callable[[float], bool],
              synced: Mapping[str, LimitRead] | None = None) -> None:
        """Read the limits of ``remotes`` not known yet, in one request; one the target does not know yet (just
        created) is asked again for a while (ask_until_known; ``wait`` returns True to stop), one it does not answer
        for, at the next call. ``synced``: limits the topic-config sync read (it describes every remote topic): one
        read after this one's own read is followed from there (an older one, e.g. from before a limit read again
        after a refusal, is not). Not with the identity policy: its records are never cut."""
        if self.describe is None or self.exact_reports:
            return
        remotes = list(remotes)
        for r in remotes:
            read = synced.get(r) if synced else None
            if read is not None and read.at > self._read_at.get(r, float("-inf")):
                self.set({r: read.limit}, read.at)
        new = [remote for remote in remotes if remote not in self.budgets]
        try:
            asked = ask_until_known(self.describe, new, self.set, wait)
        except Exception as exc:  # the lookup must not stop the copy: the topics stay unknown
            log.warning("flow %s: max.message.bytes of the remote topics unknown (%s); asked again at the next "
                        "topic refresh", self.flow.name, exc)
            return
        for remote in sorted(set(new) - set(self.budgets) - self._unknown):
            self._unknown.add(remote)
            meanwhile = self.client_limit if self.batch_bytes is None else \
                min(self.client_limit or 0, KAFKA_DEFAULT_MESSAGE_MAX_BYTES)
            log.info("flow %s: max.message.bytes of remote topic %s unknown (%s): batches of up to %s bytes "
                     "meanwhile; asked again at each topic refresh", self.flow.name, remote,
                     asked.why_unknown(remote), meanwhile)

    def after_refusal(self, remote: str, count: int, wire: int) -> bool:
        """The target refused a batch of ``count`` records of ``remote`` as too large (``wire``: their bytes as
        handed over under a budget, 0 when none applied). True when a replay in batches lands: the batch was cut
        to more than the budget now (handed over before a lowered limit was read: the other partitions' batches
        in flight then), or the limit, read again (at most every RELEARN_EVERY_S), is lower now. False for a limit
        that did not change: careful mode pins down the record the topic does not take, and pauses its partition."""
        if self.describe is None or self.exact_reports:
            return False
        budget = self.budget(remote)
        if count > 1 and budget is not None and (wire == 0 or wire > budget):
            return True  # (a lone record goes alone whatever the budget: only a limit read anew says more)
        now = self.clock()
        if remote in self._relearned and now - self._relearned[remote] < RELEARN_EVERY_S:
            return False
        self._relearned[remote] = now
        try:
            limit = self.describe([remote]).get(remote)
        except Exception as exc:  # the refusal is handled as before (careful mode)
            log.warning("flow %s: max.message.bytes of remote topic %s not read again (%s)", self.flow.name, remote,
                        exc)
            return False
        was = self.limits.get(remote)
        if limit is None or limit == was:
            return False
        self.set({remote: limit})
        after = self.budget(remote)
        lowered = after is not None and (budget is None or after < budget)
        log.warning("flow %s: remote topic %s takes batches of up to %d bytes now (max.message.bytes; %s before)%s",
                    self.flow.name, remote, limit, was if was is not None else "not known",
                    ": its batches are cut to that from here" if lowered else "")
        return lowered
