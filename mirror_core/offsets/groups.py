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
    result = committed_offsets_of(admin, [group], timeout)[group]
    if isinstance(result, Exception):
        raise result
    return result


#: Groups asked at once by :func:`committed_offsets_of`: each group's offsets are a round trip to its coordinator.
PARALLEL_GROUPS = 16


def committed_offsets_of(admin: AdminClient, groups: list[str], timeout: float = 15,
                         stop: threading.Event | None = None) -> dict[str, Offsets | Exception]:
    """:func:`committed_offsets` of each of ``groups``: described together (one request per coordinator), then
    their offsets listed up to :data:`PARALLEL_GROUPS` at once (the client lists one group per request; one after
    another, 100 groups cost 200 round trips). A group whose offsets cannot be read (a coordinator gone, a timeout,
    an id the client refuses) maps to that exception, so one group's failure neither hides nor stops the others.
    Once ``stop`` is set, the groups not yet asked map to :class:`InterruptedError` at once (a flow stopping for a
    failover is not held up by rounds of timeouts against a source that is gone)."""
    deadline = time.monotonic() + timeout
    groups = list(dict.fromkeys(groups))  # the client refuses a group named twice in one request
    # Described first: listing the offsets of a group whose coordinator is still loading (a fresh cluster)
    # crashes confluent-kafka 2.16 with no partitions given; describing it fails cleanly.
    described = _describe_all(admin, groups, deadline) if groups and not (stop and stop.is_set()) else {}

    def one(group: str) -> Offsets | Exception:
        if stop is not None and stop.is_set():
            return InterruptedError("stopping")
        found = described[group]
        if isinstance(found, Exception):
            return found
        if found.state == ConsumerGroupState.DEAD:
            return {}
        try:
            return _listed_offsets(admin, group, timeout, deadline)
        except Exception as exc:  # the group's own failure, whatever it is
            return exc

    if len(groups) < 2:
        return {g: one(g) for g in groups}
    with concurrent.futures.ThreadPoolExecutor(min(PARALLEL_GROUPS, len(groups)), "group-offsets") as pool:
        return dict(zip(groups, pool.map(one, groups), strict=True))


def _listed_offsets(admin: AdminClient, group: str, timeout: float, deadline: float) -> Offsets:
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


def _describe_all(admin: AdminClient, groups: list[str], deadline: float
                  ) -> dict[str, ConsumerGroupDescription | Exception]:
    """Each group's description, or the exception that stands for it; a group whose coordinator is loading or
    moving is asked again (with the others in the same state) until ``deadline``."""
    out: dict[str, ConsumerGroupDescription | Exception] = {}
    pending = groups
    while pending:
        remaining = max(1.0, deadline - time.monotonic())
        try:
            futures = admin.describe_consumer_groups(pending, request_timeout=remaining)
        except Exception as exc:  # an id the client refuses fails the whole request: ask each on its own
            if len(pending) == 1:
                out[pending[0]] = exc
                return out
            for group in pending:
                out.update(_describe_all(admin, [group], deadline))
            return out
        retry = []
        for group in pending:
            try:
                out[group] = futures[group].result(remaining + 5)
            except KafkaException as exc:
                if _retriable(exc.args[0] if exc.args else None) and time.monotonic() <= deadline:
                    retry.append(group)
                else:
                    out[group] = exc
            except Exception as exc:
                out[group] = exc
        if retry:
            time.sleep(0.5)
        pending = retry
    return out


def _describe(admin: AdminClient, group: str, deadline: float) -> ConsumerGroupDescription:
    found = _describe_all(admin, [group], deadline)[group]
    if isinstance(found, Exception):
        raise found
    return found


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
