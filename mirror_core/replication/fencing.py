"""After FENCED_INSTANCE_ID: was this process fenced by another one, or by itself?

A static member is fenced when its group's coordinator gives its group.instance.id to a newer join. That
is usually another process started with the same --instance-id; one of the two must then stop (taking the
id back would fence the other in turn, and the two would flap). But the coordinator can also give the
id to a join of this very process: librdkafka rejoins under a new member id after a coordinator change or a
session it timed out itself, while the coordinator still counts the old one, and a request under the old id
is then answered FENCED_INSTANCE_ID (librdkafka#3437; the broker fix, apache/kafka#23542, is open). Seen in
tests/system: two of three mirrors stopped for good after a source broker restart, with nobody else
holding their ids. Stopping then leaves the flow down until someone restarts the process.

The group's description tells the two apart: the member holding the id carries the client.id of the
process that joined. Each process gives its static consumers a client.id of its own (:func:`own_client_id`)
unless the user set one; with a user's client.id (shared by every process) the description cannot tell,
and :class:`FenceJudge` rejoins once per :data:`REJOIN_WINDOW_S` (a real duplicate fences this
process again within it, and this one then stops).

Two processes given one --instance-id: one of them stops with a line naming the other's client.id. In
our runs (tests/integration/test_faults.py) it is the newer: the older's librdkafka rejoins under the id
before it reports the fence, so the older finds its own join holding the id and stays, and the newer,
displaced in turn, finds the older's.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient

from mirror_core.clients import make_admin
from mirror_core.config.model import ClusterConfig, FlowConfig, MirrorConfig
from mirror_core.errors import FencedInstance
from mirror_core.wire.groups import leave_static
from mirror_core.wire.metadata import Brokers

log = logging.getLogger(__name__)

#: the part of the static consumers' client.id that is this process's own (the same for each of its flows:
#: a flow restarted in this process is still this process)
PROCESS_TOKEN = uuid.uuid4().hex[:8]
#: the window of FenceJudge's caps: rejoins after fences of this process's own, and after one of unknown origin
REJOIN_WINDOW_S = 600.0
#: the most rejoins per window (two processes each taking the other's fence for their own would flap)
MAX_REJOINS = 5
#: the end of the line of a flow stopped by a fence
STOPS = "give every mirror process its own --instance-id; this one stops the flow and leaves it to the other"


def own_client_id(instance_id: str, token: str = PROCESS_TOKEN) -> str:
    """The client.id of this process's static consumers when the user set none."""
    return f"mirror-core-{instance_id}-{token}"


@dataclass(frozen=True)
class StaticMember:
    """This process's static membership in the groups of one cluster."""

    instance_id: str
    #: the client.id of its consumers there (None: librdkafka's default, which the user left)
    client_id: str | None
    #: False: ``client_id`` is the user's, which every process shares, so it does not tell them apart
    unique: bool

    @classmethod
    def of(cls, instance_id: str, user_settings: dict[str, str]) -> StaticMember:
        """``user_settings``: the user's consumer settings for the cluster (ClusterConfig.client_settings)."""
        if "client.id" in user_settings:
            return cls(instance_id, user_settings["client.id"], False)
        return cls(instance_id, own_client_id(instance_id), True)

    @property
    def settings(self) -> dict[str, str]:
        """What the consumer must be given (over the user's settings)."""
        own = {"client.id": self.client_id} if self.unique and self.client_id is not None else {}
        return {"group.instance.id": self.instance_id, **own}


@dataclass(frozen=True)
class Holder:
    """The member a group's description lists under an instance id."""

    member_id: str
    client_id: str
    host: str

    def __str__(self) -> str:
        return f"member {self.member_id} (client.id {self.client_id}, host {self.host.lstrip('/')})"


class Verdict(enum.Enum):
    OTHER = "another process holds the id"
    SELF = "this process holds the id, or nobody does"
    UNKNOWN = "the group's description cannot tell"


def judge(member: StaticMember, holder: Holder | None, fenced_member_id: str) -> Verdict:
    """Who fenced ``member``, from the ``holder`` of its instance id after the fence (None: no member
    holds it any more). ``fenced_member_id``: the member id the fenced consumer last had."""
    if holder is None or (fenced_member_id and holder.member_id == fenced_member_id):
        return Verdict.SELF
    if holder.client_id != member.client_id:
        return Verdict.OTHER
    return Verdict.SELF if member.unique else Verdict.UNKNOWN


def describe_holder(admin: Callable[[], AdminClient], group: str, instance_id: str, timeout_s: float = 10.0,
                    attempts: int = 5, wait: Callable[[float], bool | None] = time.sleep) -> Holder | None:
    """The member of ``group`` holding ``instance_id`` (None: none does). Right after the coordinator moved
    the answer is NOT_COORDINATOR for a while, and one AdminClient went on getting it for 30 s (it does not
    look the coordinator up again): each attempt, up to ``attempts``, has a new client from ``admin``.
    ``wait`` sleeps between attempts and returns True when the caller stopped (no more attempts).
    Raises the last error if no attempt succeeded."""
    for attempt in range(1, attempts + 1):
        try:
            client = admin()
            description = client.describe_consumer_groups([group], request_timeout=timeout_s)[group].result()
            break
        except Exception:  # the coordinator moving, the cluster not answering: ask again
            if attempt == attempts or wait(1.0):
                raise
    return next((Holder(m.member_id, m.client_id, m.host) for m in description.members
                 if m.group_instance_id == instance_id), None)


def error_text(err: BaseException) -> str:
    """One line for an error of the describe: librdkafka's own text when it has one."""
    first = err.args[0] if err.args else None
    return first.str() if isinstance(first, KafkaError) else (str(err) or type(err).__name__)


@dataclass(frozen=True)
class Ruling:
    """What a flow does after a fence: rejoin (after at least ``wait_s``, 0: the usual restart backoff), or
    stop for good (``stop`` says why)."""

    stop: str | None = None
    wait_s: float = 0.0
    #: why it waits longer than the usual backoff ("" when it does not)
    capped: str = ""


@dataclass
class FenceJudge:
    """Decides, fence by fence, whether a flow rejoins: after its own fences (:data:`Verdict.SELF`) always,
    but at most :data:`MAX_REJOINS` times per window (past the cap it waits until the oldest rejoin leaves the
    window: a flap of two processes that each take the other's fence for their own is slowed down, a healthy
    process is never stopped for good by its own joins); after one that cannot be told
    (:data:`Verdict.UNKNOWN`) once per window; after another process's (:data:`Verdict.OTHER`) never."""

    clock: Callable[[], float] = time.monotonic
    window_s: float = REJOIN_WINDOW_S
    #: when each counted rejoin happens (or will, after its wait), and after what verdict
    _rejoined: list[tuple[float, Verdict]] = field(default_factory=list, init=False)

    def rule(self, verdict: Verdict) -> Ruling:
        """The ruling after a fence judged ``verdict`` (a rejoin is counted)."""
        if verdict is Verdict.OTHER:
            return Ruling(stop="another process joined with this instance id")
        now = self.clock()
        self._rejoined = [(t, v) for t, v in self._rejoined if now - t < self.window_s]
        if verdict is Verdict.UNKNOWN and any(v is Verdict.UNKNOWN for _, v in self._rejoined):
            return Ruling(stop=f"fenced again within {self.window_s:.0f}s by a member with the same client.id "
                               "(another process with this --instance-id, taken for this one once)")
        if len(self._rejoined) < MAX_REJOINS:
            self._rejoined.append((now, verdict))
            return Ruling()
        # At the cap: rejoin when the oldest rejoin leaves the window (that one is no longer counted then).
        at = self._rejoined.pop(0)[0] + self.window_s
        self._rejoined.append((at, verdict))
        return Ruling(wait_s=at - now, capped=f"past {MAX_REJOINS} rejoins within {self.window_s:.0f}s: rejoining "
                                              "when the oldest of them leaves that window")


class StaticGroups:
    """The static memberships of one flow's groups (none without an instance id): its worker group on the
    source and exactly-once's slot group on the target; and, when one is fenced, whether the flow rejoins."""

    def __init__(self, config: MirrorConfig, flow: FlowConfig, static_id: str | None, stop: threading.Event,
                 admin: Callable[[ClusterConfig], AdminClient] = make_admin, retry_s: float = 1.0) -> None:
        self._config = config
        #: group -> (alias of the cluster coordinating it, this process's membership there)
        self._groups: dict[str, tuple[str, StaticMember]] = {} if not static_id else {
            group: (alias, StaticMember.of(static_id, config.cluster(alias).client_settings("consumer", overrides)))
            for group, alias, overrides in ((flow.worker_group_id, flow.source, flow.consumer_overrides),
                                            (f"{flow.worker_group_id}.slots", flow.target, None))}
        self._fences = FenceJudge()
        self._stop = stop  # the flow's: a stop ends the describe's attempts, and nothing is judged then
        self._admin = admin
        self._retry_s = retry_s  # between the describe's attempts

    def leave(self) -> None:
        """The process stops the flow for good: it leaves its static groups (wire/groups.py; librdkafka's static
        members do not leave when they close), so that the others take its partitions at once rather than after
        session.timeout.ms, as a dynamic member's leave would. Best effort: a leave that fails is said in one line
        (the partitions then move when the session times out)."""
        for group, (alias, member) in self._groups.items():
            cluster = self._config.cluster(alias)
            try:
                brokers = Brokers(cluster.bootstrap_servers, cluster.client_settings("consumer"), f"cluster {alias}",
                                  timeout=5.0)
                log.info("group %s: static member %s %s", group, member.instance_id,
                         leave_static(brokers, group, member.instance_id))
            except Exception as exc:  # (any: a stop must go on)
                log.warning("group %s: static member %s could not leave (%s); its partitions move to the others "
                            "when its session times out", group, member.instance_id, exc)

    def settings(self, group: str) -> dict[str, str]:
        """What ``group``'s consumer must be given (StaticMember.settings; nothing if not static)."""
        static = self._groups.get(group)
        return static[1].settings if static is not None else {}

    def rejoin_after(self, exc: FencedInstance) -> Ruling | None:
        """Whether the flow rejoins ``exc.group`` after the fence, and when (None: the flow was stopped meanwhile,
        nothing was judged). Either way ``exc``'s message becomes the line to log: who holds the id, and why
        the flow rejoins or stops."""
        static = self._groups.get(exc.group)
        if static is None:  # not a static member: nothing to judge (librdkafka fences only static members)
            exc.args = (f"{exc}; {STOPS}",)
            return Ruling(stop=str(exc))
        alias, member = static
        cluster = self._config.cluster(alias)
        if self._stop.is_set():
            return None
        try:
            holder = describe_holder(lambda: self._admin(cluster), exc.group, member.instance_id,
                                     wait=lambda _s: self._stop.wait(self._retry_s))
        except Exception as err:  # (any: the flow must go on to its ruling, not end its thread here)
            if self._stop.is_set():
                return None
            # Likely right after the broker restart that caused the fence: taken for a fence of its own, within
            # the cap (a real duplicate shows once a describe answers: OTHER, or UNKNOWN with a shared client.id).
            verdict, why = Verdict.SELF, "one taken for this process's own (who holds the id is not known)"
            seen = f"the group's description failed: {error_text(err)}"
        else:
            verdict = judge(member, holder, exc.member_id)
            why = {Verdict.SELF: "this process's own later join (as after a coordinator change)",
                   Verdict.UNKNOWN: "this process or another one with its client.id (taken as this one once "
                                    f"per {self._fences.window_s:.0f}s)", Verdict.OTHER: ""}[verdict]
            seen = f"it is held by {holder}" if holder is not None else "no member holds it now"
        if member.client_id is not None:
            seen += f", this process has client.id {member.client_id}"
        head = f"group {exc.group} on {alias} fenced instance id {member.instance_id} (FENCED_INSTANCE_ID)"
        ruling = self._fences.rule(verdict)
        if ruling.stop is not None:
            exc.args = (f"{head}: {ruling.stop}; {seen}; {STOPS}",)
            return ruling
        capped = f"; {ruling.capped}" if ruling.capped else ""
        exc.args = (f"{head} for {why}; {seen}{capped}",)
        return ruling
