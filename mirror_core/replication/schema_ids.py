"""``schema.ids = translate`` on the records path: each record's key and value in the Confluent wire format get the
target registry's id of their schema before they are produced (mirror_core/schemas/ids.py).

The id map (source id -> target id, schemas.sync.id_map) is read from both registries when the first framed record
needs it, and again when a record names an id it lacks (at most every :data:`REFRESH_S`): a schema registered on
the source since, once synced to the target (``mirror-core schemas sync``), is taken without a restart. A record
whose id is still unknown is never produced: its partition pauses at it with one line saying what to do, and looks
at the registries again every :data:`RETRY_S` by itself: once the id maps (synced, or the registries readable again),
it goes on from where it paused, as an operator's resume would.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from confluent_kafka import Message

from mirror_core.config.model import ClusterConfig
from mirror_core.replication.batch import PartitionMode, PartitionState
from mirror_core.replication.damage import Unpauses
from mirror_core.schemas.ids import UnknownSchemaId, translate
from mirror_core.schemas.registry import Registry, RegistryError
from mirror_core.schemas.sync import id_map

log = logging.getLogger(__name__)

#: the shortest time between two readings of the registries for an unknown id
REFRESH_S = 5.0
#: how often a partition paused at an unknown id looks at the registries again by itself (a reading lists every
#: subject's versions: not to be done often against a registry of thousands of subjects)
RETRY_S = 30.0

ProduceRun = Callable[[PartitionState, list[Message]], None]
Pause = Callable[[PartitionState, str], None]


@dataclass
class Waiting:
    """A partition paused at a record whose schema id did not map."""

    schema_id: int
    why: str  # the pause line
    offset: int  # the record's (where copying goes on if nothing before it was acknowledged)
    due: float  # when to look again


class SchemaIdTranslation:
    """One flow's schema-id rewrite, between reading a run of records and producing it."""

    def __init__(self, flow: str, source: ClusterConfig, target: ClusterConfig,
                 read_map: Callable[[], dict[int, int]] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.flow, self.source, self.target = flow, source, target
        self._read_map = read_map or self._read_registries
        self._clock = clock
        self.ids: dict[int, int] = {}
        self._read_at = -math.inf
        self._problem: str | None = None  # the last reading's failure, for the pause line
        self._unknown: tuple[int, int] | None = None  # (the id, the offset of the record) rewrite() stopped at
        #: partitions paused at an unknown id, each looked at again RETRY_S after its pause and then every RETRY_S
        self._waiting: dict[tuple[str, int], Waiting] = {}

    def _read_registries(self) -> dict[int, int]:
        with Registry(self.source.alias, self.source.schema_registry) as src, \
                Registry(self.target.alias, self.target.schema_registry) as dst:
            return id_map(src, dst)

    def _refresh(self) -> None:
        self._read_at = self._clock()
        try:
            self.ids = self._read_map()
            self._problem = None
            log.info("flow %s: schema ids: %d of the source registry's ids map to the target registry's", self.flow,
                     len(self.ids))
        except (RegistryError, KeyError, TypeError, ValueError) as exc:  # (an answer not shaped as the API says)
            self._problem = str(exc) if isinstance(exc, RegistryError) else f"an answer not understood ({exc!r})"
            log.error("flow %s: schema ids: %s", self.flow, exc)

    def _rewrite(self, m: Message) -> None:
        key, value = translate(m.key(), self.ids), translate(m.value(), self.ids)
        m.set_key(key)
        m.set_value(value)

    def rewrite(self, run: list[Message]) -> tuple[int, str | None]:
        """Rewrite ``run``'s keys and values in place up to the first record whose schema id stays unknown:
        (how many records were rewritten, why the next one cannot go: one line; None when all were)."""
        for i, m in enumerate(run):
            try:
                self._rewrite(m)
            except UnknownSchemaId as exc:
                unknown = exc.schema_id
                if self._clock() - self._read_at >= REFRESH_S:
                    self._refresh()
                    try:
                        self._rewrite(m)
                        continue
                    except UnknownSchemaId as again:  # (the key's id may map now and the value's not)
                        unknown = again.schema_id
                self._unknown = (unknown, m.offset())
                return i, self._unknown_line(m, unknown)
        return len(run), None

    def _unknown_line(self, m: Message, schema_id: int) -> str:
        where = f"{m.topic()}[{m.partition()}] offset {m.offset()}"
        why = (f"the registries could not be read: {self._problem}" if self._problem else
               f"the target registry of {self.target.alias} holds no schema of the source registry's id {schema_id} "
               f"(not registered on the source, or not synced yet)")
        return (f"source cluster {self.source.alias}: the record at {where} names schema id {schema_id} and {why}; it "
                f"is not copied with an id that may mean another schema there: run `mirror-core schemas sync "
                f"--config ... --flow '{self.flow}'` (the partition goes on by itself within {RETRY_S:.0f} s once the "
                f"id maps), or `mirror-core partitions resume --flow '{self.flow}' --topic {m.topic()} --partition "
                f"{m.partition()} --reason ...`")

    def wrap(self, produce_run: ProduceRun, pause: Pause) -> ProduceRun:
        """``produce_run`` with each run rewritten first; the records before an unknown id are produced, then the
        partition pauses at it (what is in flight before it still lands)."""
        def produce_translated(st: PartitionState, run: list[Message]) -> None:
            done, why = self.rewrite(run)
            if done:
                produce_run(st, run[:done] if why is not None else run)
            if why is not None:
                pause(st, why)
                if self._unknown is not None:
                    schema_id, offset = self._unknown
                    self._waiting[(st.topic, st.partition)] = Waiting(schema_id, why, offset,
                                                                      self._clock() + RETRY_S)
        return produce_translated

    def retry_paused(self, states: Mapping[tuple[str, int], PartitionState], acks: Unpauses,
                     held: Callable[[PartitionState], bool]) -> None:
        """Go on with the partitions paused at an id that maps now (in the flow's thread). ``held``: a partition an
        operator's pause covers as well (left paused)."""
        now = self._clock()
        due = [key for key, w in self._waiting.items() if now >= w.due]
        if not due:
            return
        if now - self._read_at >= REFRESH_S:
            self._refresh()
        for key in due:
            w, st = self._waiting[key], states.get(key)
            if st is None or st.mode is not PartitionMode.PAUSED or st.paused_reason != w.why:
                del self._waiting[key]  # no longer ours, resumed by an operator, or paused since for another reason
                continue
            w.due = now + RETRY_S
            to = st.acked if st.acked is not None else st.origin if st.origin is not None else w.offset
            # (records before it still in flight: once they land, or the rewind would copy them twice)
            if w.schema_id not in self.ids or st.pending or held(st):
                continue
            del self._waiting[key]
            acks.unpause(st, to)
            log.warning("flow %s: %s[%d] goes on from offset %d: schema id %d maps to the target registry's id %d now",
                        self.flow, st.topic, st.partition, to, w.schema_id, self.ids[w.schema_id])
