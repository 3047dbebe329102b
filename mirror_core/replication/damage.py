"""Damaged source batches and what an operator decides about them.

A source batch that fails its checks (its CRC, the order of its offsets) pauses its partition at that batch, on
either data path: nothing of it or after it is copied and progress never passes it. An operator then either
resumes the partition (a replica with an intact copy leads by then: the batch is read again) or records a skip
of the damaged range; both are actions in the state store, handed to the flow by the service's control loop
(:meth:`OperatorActions.offer`) and applied in the flow's own thread (:meth:`OperatorActions.apply`). A skip is
armed when it is applied and taken only when the damage is met again at exactly that range, so that the batches
before it still land and nothing outside the range is passed over.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from mirror_core.replication.batch import PartitionMode, PartitionState

log = logging.getLogger(__name__)
RESUME, SKIP = "resume", "skip"


def _stops_at(first: int) -> str:
    return f"nothing from offset {first} on is copied"


def paused_at_damage(reason: str | None, first: int) -> bool:
    """Whether a partition's pause reason is :func:`damaged_line`'s for the damaged batch at ``first``."""
    return reason is not None and _stops_at(first) in reason


def damaged_line(flow: str, source: str, topic: str, partition: int, what: str, first: int, last: int | None) -> str:
    """Why the partition paused and the operator's two remedies (its flow/topic/partition prefix is the pause's)."""
    offsets = f"{first}-{last}" if last is not None else f"{first}-<the batch's last offset>"
    where = f"--flow '{flow}' --topic {topic} --partition {partition}"
    return (f"source cluster {source}: {what}; brokers do not check it when they serve a fetch, so "
            f"{_stops_at(first)}. Make a replica whose copy is intact the leader and run `mirror-core "
            f"partitions resume {where} --reason ...`, or skip the damaged batch (its records never reach the "
            f"target): `mirror-core partitions skip {where} --offsets {offsets} --reason ...` (the mirror applies "
            "either within seconds when it runs with --state-db)")


class Unpauses(Protocol):
    """What applying an action needs of the acknowledgement side (acks.Acks)."""

    def unpause(self, st: PartitionState, to: int, past: int | None = None) -> None: ...


@dataclass(frozen=True)
class PartitionAction:
    """An operator's action on one source partition of the flow, as recorded in the state store."""

    id: int
    topic: str
    partition: int
    kind: str  # RESUME or SKIP
    first: int | None  # SKIP: the range, both ends included
    last: int | None
    requested_by: str
    reason: str

    def describe(self) -> str:
        what = f"skip of offsets {self.first}-{self.last}" if self.kind == SKIP else "resume"
        return f"{what} requested by {self.requested_by} ({self.reason}; action {self.id})"


class ActionOutcome(NamedTuple):
    """What became of an action: applied (``ok``) or refused, in one line."""

    id: int
    ok: bool
    line: str


class PassOver(NamedTuple):
    """A damaged batch an operator's skip covers: offsets ``first``..``end - 1`` are passed over; ``again``: the skip
    was taken (and reported) before."""

    first: int
    end: int
    again: bool


def _covers(action: PartitionAction | None, first: int, last: int | None) -> bool:
    return (action is not None and action.first == first and action.last is not None
            and (last is None or action.last >= last))


class OperatorActions:
    """The flow's side of operator actions: offered by the control thread, applied by the flow's thread (which owns
    the partition states), outcomes collected by the control thread. Outlives a run of the pipeline (a restarted
    pipeline meets the damage again and takes an armed skip)."""

    def __init__(self, flow: str) -> None:
        self.flow = flow
        self._lock = threading.Lock()
        self._offered: dict[int, PartitionAction] = {}  # not yet applied (the partition may not be ours)
        self._seen: set[int] = set()  # offered once already: a control poll offers pending actions again
        self._outcomes: list[ActionOutcome] = []
        #: skips applied and not yet taken, by partition: taken when the damage is met at their range
        self._armed: dict[tuple[str, int], PartitionAction] = {}
        #: skips taken whose range progress has not passed yet: the damage met there again (a rewind before it, a
        #: read from before the seek past it) is the same batch, passed over again without a second report
        self._taken: dict[tuple[str, int], PartitionAction] = {}
        #: each partition paused at a damaged batch: its first and (when known) last offset
        self._damage: dict[tuple[str, int], tuple[int, int | None]] = {}
        self.pending = False  # offered actions wait (read without the lock by the flow's loop: a hint)

    def offer(self, actions: list[PartitionAction]) -> None:
        """The flow's pending actions as the store lists them now: new ones are taken, and those no longer listed
        (another process applied them) are let go."""
        listed = {a.id for a in actions}
        with self._lock:
            for action in actions:
                if action.id not in self._seen:
                    self._seen.add(action.id)
                    self._offered[action.id] = action
            self._offered = {i: a for i, a in self._offered.items() if i in listed}
            self._armed = {tp: a for tp, a in self._armed.items() if a.id in listed}
            self.pending = bool(self._offered)

    def forget(self, topic: str, partition: int | None = None) -> dict[tuple[str, int], int]:
        """``topic`` (or only its ``partition``) was deleted and recreated: its offsets name other records now.
        Skips applied to it and not taken are refused (the damage they cover is gone), taken ones and noted damage
        forgotten (a damaged batch of the new topic at the same offsets is another one: reported and paused). The
        damage noted on it, by partition: its first offset (a partition may have paused there; see
        :func:`paused_at_damage`)."""
        def gone(tp: tuple[str, int]) -> bool:
            return tp[0] == topic and partition in (None, tp[1])

        with self._lock:
            dropped = [a for tp, a in self._armed.items() if gone(tp)]
            damaged = {tp: d[0] for tp, d in self._damage.items() if gone(tp)}
            self._armed = {tp: a for tp, a in self._armed.items() if not gone(tp)}
            self._taken = {tp: a for tp, a in self._taken.items() if not gone(tp)}
            self._damage = {tp: d for tp, d in self._damage.items() if not gone(tp)}
        for action in dropped:
            self._done(action, False, f"flow {self.flow}: {topic}[{action.partition}] was recreated: the "
                                      f"{action.describe()} applies to the deleted topic's offsets; nothing skipped")
        return damaged

    def outcomes(self) -> list[ActionOutcome]:
        with self._lock:
            out, self._outcomes = self._outcomes, []
            return out

    def apply(self, states: dict[tuple[str, int], PartitionState], acks: Unpauses) -> None:
        """The offered actions on partitions this process owns (others stay offered: their owner applies them), once
        nothing of the partition is in flight (a resume rewinds to the acknowledged position: a batch still in flight
        would be sent twice, in an exactly-once flow's open transaction too)."""
        with self._lock:
            mine = [a for a in self._offered.values()
                    if (st := states.get((a.topic, a.partition))) is not None and not st.pending]
            for action in mine:
                del self._offered[action.id]
            self.pending = bool(self._offered)
        for action in mine:
            self._apply(action, states[(action.topic, action.partition)], acks)

    def _apply(self, action: PartitionAction, st: PartitionState, acks: Unpauses) -> None:
        key = (st.topic, st.partition)
        where = f"flow {self.flow}: {st.topic}[{st.partition}]"
        if st.mode is not PartitionMode.PAUSED:
            self._done(action, False, f"{where} is not paused ({st.mode.value}): nothing to {action.kind}")
            return
        damage = self._damage.get(key)
        if action.kind == SKIP:
            assert action.first is not None and action.last is not None
            if damage is None:
                self._done(action, False, f"{where} is paused for another reason than a damaged batch "
                                          f"({st.paused_reason}): only a damaged range is skipped")
                return
            first, last = damage
            if action.first != first or (last is not None and action.last < last):
                shown = f"{first}-{last}" if last is not None else f"{first}-<its last offset>"
                self._done(action, False, f"{where}: the skip of offsets {action.first}-{action.last} does not "
                                          f"cover the damaged batch at offsets {shown} from its first offset: "
                                          "nothing skipped")
                return
        to = st.acked if st.acked is not None else st.origin if st.origin is not None else (
            damage[0] if damage is not None else None)  # (the damage was the first thing read)
        if to is None:
            self._done(action, False, f"{where}: no position to resume from yet; try again")
            return
        self._damage.pop(key, None)
        if action.kind == RESUME:
            acks.unpause(st, to)
            self._done(action, True, f"{where}: resumed at offset {to} ({action.describe()})")
            return
        assert action.first is not None and action.last is not None
        if to == action.first:
            # Nothing before the damage to read again: passed over now, the damaged batch not fetched again (past
            # one, librdkafka's parse of the rest of an answer has been seen to jump to garbage offsets and reset)
            with self._lock:
                self._taken[key] = action
            acks.unpause(st, to, past=action.last + 1)
            self._report_skip(st, action)
            return
        with self._lock:
            self._armed[key] = action
        acks.unpause(st, to)
        log.warning("%s: resumed at offset %d; the %s is taken when the damaged batch is met again", where, to,
                    action.describe())

    def damaged(self, st: PartitionState, first: int, last: int | None, ready: bool = True) -> PassOver | None:
        """The damaged batch at ``first`` (its last offset, when known) is met on ``st``: what to pass over when an
        operator's skip covers it (armed: taken and reported now; taken before, met again after a rewind to before
        it), else None (the caller pauses; noted here so that a skip can be checked against it). ``ready``: False
        while records read before the damage still wait to be sent (produce.py's parked records): an armed skip is
        then applied again from the acknowledged position (the caller pauses meanwhile) rather than taken ahead of
        them."""
        key = (st.topic, st.partition)
        with self._lock:  # (the control thread lets go of actions another process applied)
            taken = self._taken.get(key)
            if taken is not None and (taken.last is None or (st.committed is not None and st.committed > taken.last)):
                del self._taken[key]  # durable progress passed it: damage met now is another batch
                taken = None
            armed = self._armed.get(key)
            if _covers(armed, first, last):
                assert armed is not None
                del self._armed[key]
                if not ready:
                    self._offered[armed.id] = armed  # (applied again by the flow's next round: apply)
                    self.pending = True
                    armed = None
                else:
                    self._taken[key] = armed
            elif ready and _covers(taken, first, last) and st.next is not None and st.next <= first:
                assert taken is not None and taken.last is not None
                return PassOver(first, taken.last + 1, again=True)
            else:
                armed = None
        if armed is None:
            self._damage[key] = (first, last)
            return None
        self._report_skip(st, armed)
        assert armed.last is not None
        return PassOver(first, armed.last + 1, again=False)

    def repeated(self, st: PartitionState, first: int, last: int | None) -> bool:
        """The damage at ``first`` is the batch a skip was taken over, read again from before the seek past it: the
        skip covers the whole batch (its last offset known) and the read position is past it. Nothing to do."""
        taken = self._taken.get((st.topic, st.partition))
        return (taken is not None and taken.first == first and taken.last is not None and last is not None
                and last <= taken.last and st.next is not None and st.next > taken.last)

    def _report_skip(self, st: PartitionState, action: PartitionAction) -> None:
        assert action.first is not None and action.last is not None
        line = (f"flow {self.flow}: {st.topic}[{st.partition}]: skipped offsets {action.first}-{action.last} "
                f"({action.last - action.first + 1} offsets; their records are not on the target): "
                f"{action.describe()}")
        log.warning("%s", line)
        self._done(action, True, line)

    def _done(self, action: PartitionAction, ok: bool, line: str) -> None:
        if not ok:
            log.error("%s", line)
        with self._lock:
            self._outcomes.append(ActionOutcome(action.id, ok, line))
