"""Cycle prevention on the batches data path (identity policy): the source batches a mirror wrote there copying from
this flow's target are not copied back.

Two kinds of mirror writes are recognised:

* a batches-path mirror's: by its producer id, which it recorded on the cluster before writing any batch with it
  (stores/producer_ids.py), with the flow it copies for; skipped when that flow's source is this flow's target;
* a records-path mirror's (the other direction on records, which tags every record with the provenance header but
  whose producer id librdkafka does not say): by that header, read from the records of batches whose producer's
  first batch carried it; skipped when every record's chain holds this flow's target.

A skipped batch is not copied and its offsets are passed (batch_path.BatchCopier: an offset-map entry where the next
copy lands, as for offsets compaction removed).
"""

from __future__ import annotations

from enum import Enum

from confluent_kafka import Consumer

from mirror_core.clients import ClusterHealth, make_consumer, make_producer
from mirror_core.config.model import ClusterConfig, FlowConfig
from mirror_core.kafka_io import QUIET
from mirror_core.replication.produce import PROVENANCE_HEADER
from mirror_core.stores.producer_ids import MAX_FOREIGN, MirrorProducerIds, register
from mirror_core.wire.headers import header_values
from mirror_core.wire.records import HEADER, PRODUCER_ID
from mirror_core.wire.sender import BatchSender

_KEY = PROVENANCE_HEADER.encode()


class Verdict(Enum):
    COPY = "copy"
    SKIP = "skip"
    #: some of its records came from the target, some not: copied whole it would loop, dropped it would lose
    MIXED = "mixed"


class MirrorWrites:
    """Which source batches of a flow (``source->target``) are the mirrors' copies of the target's records."""

    def __init__(self, ids: MirrorProducerIds, target: str, reader: Consumer | None = None) -> None:
        self.ids, self.target = ids, target
        self._reader = reader  # the consumer ``ids`` reads with, closed by :meth:`close`
        #: producer ids whose first batch seen carried the provenance header (a records-path mirror's producer),
        #: and those whose first did not (an application's: never tagged)
        self._tagging: set[int] = set()
        self._plain: set[int] = set()
        #: batches skipped so far
        self.skipped = 0

    def verdict(self, raw: memoryview | bytes | bytearray, h: tuple[int, ...] | None = None) -> Verdict:
        h = h or HEADER.unpack_from(raw)
        pid = h[PRODUCER_ID]
        if pid < 0 or pid in self._plain:
            return Verdict.COPY
        if pid not in self._tagging:
            source = self.ids.source_of(pid)
            if source is not None:
                if source != self.target:
                    return Verdict.COPY
                self.skipped += 1
                return Verdict.SKIP
        chains = header_values(raw, _KEY)
        if pid not in self._tagging:
            if all(c is None for c in chains):
                if len(self._plain) >= MAX_FOREIGN:
                    self._plain.clear()
                self._plain.add(pid)
                return Verdict.COPY
            self._tagging.add(pid)
        back = [c is not None and self.target in c.decode(errors="replace").split(",") for c in chains]
        if all(back):
            self.skipped += 1
            return Verdict.SKIP
        return Verdict.COPY if not any(back) else Verdict.MIXED

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None


def cycle_guard(flow: FlowConfig, source: ClusterConfig, target: ClusterConfig, sender: BatchSender, instance: str,
                source_health: ClusterHealth, target_health: ClusterHealth) -> MirrorWrites:
    """A batches flow's side of the identity policy's cycle prevention: every producer id the sender gets is
    recorded on the target before it writes with it, and the source's mirror writes are recognised."""
    registrar = make_producer(target, flow.producer_overrides, target_health,
                              enforced={"linger.ms": "0"})  # (acks=all, as every producer)
    sender.on_producer_id = lambda pid: register(registrar, pid, flow.source, flow.target, instance)
    reader = make_consumer(source, f"{flow.worker_group_id}.producer-ids", QUIET, health=source_health)
    return MirrorWrites(MirrorProducerIds(reader), flow.target, reader)
