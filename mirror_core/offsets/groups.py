"""Consumer-group offsets on one cluster: read, check for members, commit (AdminClient only)."""

from __future__ import annotations

import concurrent.futures
import threading
import time

from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConsumerGroupDescription

Offsets = dict[tuple[str, int], int]  # (topic, partition) -> next offset to read
# A group coordinator loading or moving (fresh cluster, broker restart): worth another try.
_COORDINATOR = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                KafkaError.COORDINATOR_NOT_AVAILABLE}


def _retriable(err: object) -> bool:
    return isinstance(err, KafkaError) and (err.retriable() or err.code() in _COORDINATOR)


def committed_offsets(admin: AdminClient, group: str, timeout: float = 15) -> Offsets:
    """A group's committed offsets on one cluster; empty if it has none.

    Retriable errors (a coordinator loading or moving) are retried within ``timeout``.
    """
    deadline = time.monotonic() + timeout
    # Ask the coordinator first: listing the offsets of a group whose coordinator is still loading
    # (a fresh cluster) crashes confluent-kafka 2.16 with no partitions given; describing it fails cleanly.
    if _describe(admin, group, deadline).state == ConsumerGroupState.DEAD:
        return {}
    while True:
        futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=timeout)
        try:
            result = futures[group].result(timeout)
            break
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if not _retriable(err) or time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions or [] if tp.offset >= 0}


#: Groups asked at once by :func:`committed_offsets_of`: each group is two round trips to its coordinator.
PARALLEL_GROUPS = 16


def committed_offsets_of(admin: AdminClient, groups: list[str], timeout: float = 15,
                         stop: threading.Event | None = None) -> dict[str, Offsets | Exception]:
    """:func:`committed_offsets` of each of ``groups``, up to :data:`PARALLEL_GROUPS` in flight at once (one after
    another, 100 groups cost 100 x 2 round trips). A group whose offsets cannot be read (a coordinator gone, a
    timeout, an id the client refuses) maps to that exception, so one group's failure neither hides nor stops the
    others. Once ``stop`` is set, the groups not yet asked map to :class:`InterruptedError` at once (a flow stopping
    for a failover is not held up by rounds of timeouts against a source that is gone)."""
    def one(group: str) -> Offsets | Exception:
        if stop is not None and stop.is_set():
            return InterruptedError("stopping")
        try:
            return committed_offsets(admin, group, timeout)
        except Exception as exc:  # the group's own failure, whatever it is
            return exc

    if len(groups) < 2:
        return {g: one(g) for g in groups}
    with concurrent.futures.ThreadPoolExecutor(min(PARALLEL_GROUPS, len(groups)), "group-offsets") as pool:
        return dict(zip(groups, pool.map(one, groups), strict=True))


def _describe(admin: AdminClient, group: str, deadline: float) -> ConsumerGroupDescription:
    while True:
        remaining = max(1.0, deadline - time.monotonic())
        try:
            return admin.describe_consumer_groups([group], request_timeout=remaining)[group].result(remaining + 5)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if not _retriable(err) or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def active_members(admin: AdminClient, group: str, timeout: float = 15) -> int:
    return len(_describe(admin, group, time.monotonic() + timeout).members or [])


def commit_offsets(admin: AdminClient, group: str, offsets: Offsets, timeout: float = 15) -> None:
    """Commit ``offsets`` for ``group``; every partition must succeed (errors are per partition,
    so they are checked one by one; retriable ones are retried within ``timeout``)."""
    deadline = time.monotonic() + timeout
    pending = dict(offsets)
    while True:
        tps = [TopicPartition(t, p, o) for (t, p), o in sorted(pending.items())]
        result = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, tps)],
                                                    request_timeout=timeout)[group].result(timeout)
        failed = {(tp.topic, tp.partition): tp.error for tp in result.topic_partitions or [] if tp.error}
        if not failed:
            return
        retriable = all(_retriable(e) for e in failed.values())
        if not retriable or time.monotonic() > deadline:
            raise KafkaException(next(iter(failed.values()))) if len(failed) == 1 else RuntimeError(
                f"group {group}: offsets not committed for " + ", ".join(
                    f"{t}[{p}]: {e}" for (t, p), e in sorted(failed.items())))
        pending = {k: pending[k] for k in failed}
        time.sleep(0.5)
