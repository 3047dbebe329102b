"""Cycle prevention on the batches data path (identity policy): the source batches a mirror wrote there copying from
this flow's target are not copied back.

Two kinds of mirror writes are recognised:

* a batches-path mirror's: by its producer id, which it recorded on the cluster before writing any batch with it
  (stores/producer_ids.py), with the flow it copies for; skipped when that flow's source is this flow's target;
* a records-path mirror's (the other direction on records, which tags every record with the provenance header but
  whose producer id librdkafka does not say): by that header, read from the records of batches whose producer's
  first batch carried it; skipped when every record's chain holds this flow's target.

Where the reverse flow copies on the records path (it cannot see producer ids: librdkafka does not say them), the
batches this flow copies get its hop in their records' provenance chains (a rewrite of each batch, as the records
path's producer tags each record), so that flow recognises them too.

A skipped batch is not copied and its offsets are passed (batch_path.BatchCopier: an offset-map entry where the next
copy lands, as for offsets compaction removed).
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum

from confluent_kafka import Consumer

from mirror_core.clients import ClusterHealth, make_consumer, make_producer
from mirror_core.config.model import FlowConfig, MirrorConfig
from mirror_core.kafka_io import QUIET
from mirror_core.replication.produce import PROVENANCE_HEADER
from mirror_core.stores.producer_ids import MAX_FOREIGN, MirrorProducerIds, register
from mirror_core.wire.headers import header_values, with_hop
from mirror_core.wire.records import HEADER, PRODUCER_ID

_KEY = PROVENANCE_HEADER.encode()


class Verdict(Enum):
    COPY = "copy"
    SKIP = "skip"
    #: some of its records came from the target, some not: copied whole it would loop, dropped it would lose
    MIXED = "mixed"


class MirrorWrites:
    """Which source batches of a flow (``source->target``) are the mirrors' copies of the target's records."""

    def __init__(self, ids: MirrorProducerIds, target: str, reader: Consumer | None = None,
                 hop: str | None = None) -> None:
        self.ids, self.target = ids, target
        #: this flow's source, added to each copied record's provenance chain where the reverse flow copies on the
        #: records path (which knows a record's provenance only by that header): None, batches go as they are
        self.hop = hop.encode() if hop is not None else None
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
        if pid in self._tagging and all(c is None for c in chains):
            # A producer that tagged its records writes untagged ones now: an exactly-once slot's transactional id
            # taken over by the batches path from the records path (the same id keeps its producer id), recorded
            # since: the registry decides, read again for it. Not recorded: still a tagging producer's (copied).
            self.ids.forget(pid)
            if self.ids.source_of(pid) is None:
                return Verdict.COPY
            self._tagging.discard(pid)
            return self.verdict(raw, h)
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

    def tagged(self, data: memoryview | bytearray) -> memoryview | bytearray:
        """What to send of a batch to copy: as it is, or with this flow's hop in its records' provenance chains."""
        return data if self.hop is None else with_hop(data, _KEY, self.hop)

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None


def cycle_guard(config: MirrorConfig, flow: FlowConfig, instance: str, source_health: ClusterHealth,
                target_health: ClusterHealth) -> tuple[MirrorWrites, Callable[[int, float], None]]:
    """A batches flow's side of the identity policy's cycle prevention: the source's mirror writes recognised (where
    the reverse flow, in this configuration, copies on the records path, the copies carry the provenance header
    too), and how a producer id the flow's senders get (the idempotent sender's, or each exactly-once slot's) is
    recorded on the target before they write with it."""
    source, target = config.cluster(flow.source), config.cluster(flow.target)
    reverse_on_records = any(f.source == flow.target and f.target == flow.source and f.data_path == "records"
                             for f in config.all_flows)
    registrar = make_producer(target, flow.producer_overrides, target_health,
                              enforced={"linger.ms": "0"})  # (acks=all, as every producer)
    reader = make_consumer(source, f"{flow.worker_group_id}.producer-ids", QUIET, health=source_health)
    writes = MirrorWrites(MirrorProducerIds(reader), flow.target, reader, flow.source if reverse_on_records else None)
    return writes, lambda pid, timeout: register(registrar, pid, flow.source, flow.target, instance, timeout)
