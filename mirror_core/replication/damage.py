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


def damaged_line(flow: str, source: str, topic: str, partition: int, what: str, first: int, last: int | None) -> str:
    """Why the partition paused and the operator's two remedies (its flow/topic/partition prefix is the pause's)."""
    offsets = f"{first}-{last}" if last is not None else f"{first}-<the batch's last offset>"
    where = f"--flow '{flow}' --topic {topic} --partition {partition}"
    return (f"source cluster {source}: {what}; brokers do not check it when they serve a fetch, so nothing from "
            f"offset {first} on is copied. Make a replica whose copy is intact the leader and run `mirror-core "
            f"partitions resume {where} --reason ...`, or skip the damaged batch (its records never reach the "
            f"target): `mirror-core partitions skip {where} --offsets {offsets} --reason ...` (the mirror applies "
            "either within seconds when it runs with --state-db)")


class Unpauses(Protocol):
    """What applying an action needs of the acknowledgement side (acks.Acks)."""

    def unpause(self, st: PartitionState, to: int) -> None: ...


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

    def outcomes(self) -> list[ActionOutcome]:
        with self._lock:
            out, self._outcomes = self._outcomes, []
            return out

    def apply(self, states: dict[tuple[str, int], PartitionState], acks: Unpauses) -> None:
        """The offered actions on partitions this process owns (others stay offered: their owner applies them)."""
        with self._lock:
            mine = [a for a in self._offered.values() if (a.topic, a.partition) in states]
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
            with self._lock:
                self._armed[key] = action
        to = st.acked if st.acked is not None else st.origin
        if to is None:
            self._done(action, False, f"{where}: no position to resume from yet; try again")
            return
        self._damage.pop(key, None)
        acks.unpause(st, to)
        if action.kind == RESUME:
            self._done(action, True, f"{where}: resumed at offset {to} ({action.describe()})")
        else:
            log.warning("%s: resumed at offset %d; the %s is taken when the damaged batch is met again", where, to,
                        action.describe())

    def damaged(self, st: PartitionState, first: int, last: int | None) -> int | None:
        """The damaged batch at ``first`` (its last offset, when known) is met on ``st``: where to go on from when an
        armed skip covers it (the skip is taken and reported), else None (the caller pauses; noted here so that a
        skip can be checked against it)."""
        key = (st.topic, st.partition)
        with self._lock:  # (the control thread lets go of actions another process applied)
            action = self._armed.get(key)
            if action is not None and action.first == first and action.last is not None and (
                    last is None or action.last >= last):
                del self._armed[key]
            else:
                action = None
        if action is not None:
            assert action.first is not None and action.last is not None
            line = (f"flow {self.flow}: {st.topic}[{st.partition}]: skipped offsets {action.first}-{action.last} "
                    f"({action.last - action.first + 1} offsets; their records are not on the target): "
                    f"{action.describe()}")
            log.warning("%s", line)
            self._done(action, True, line)
            return action.last + 1
        self._damage[key] = (first, last)
        return None

    def _done(self, action: PartitionAction, ok: bool, line: str) -> None:
        if not ok:
            log.error("%s", line)
        with self._lock:
            self._outcomes.append(ActionOutcome(action.id, ok, line))
