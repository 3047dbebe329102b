"""What copying whole record batches would reach: a prototype copier (bench only, not product code) that
fetches raw record batches from the source leader and produces the same bytes to the target, with no
per-record work in Python at all. The target broker assigns offsets; each produce response's base offset
would give an exact offset map per batch.

It speaks the Kafka protocol itself (Metadata v4, ListOffsets v1, Fetch v11, Produce v8,
InitProducerId v1, AddPartitionsToTxn v1, EndTxn v1: non-flexible versions Kafka 4.x still serves). Three
modes:

- plain: copies only non-idempotent, non-transactional batches, compressed or not, whose CRC it leaves as it
  is (only the base offset and leader epoch change, and the CRC does not cover them); anything else stops it
  with a clear error;
- idempotent: produces as an idempotent producer of its own (InitProducerId, a sequence per partition), so
  every batch gets its producer id, epoch and base sequence rewritten and its CRC32C recomputed (C code:
  google-crc32c). It takes any source then: idempotent and transactional producers' batches, with aborted
  transactions dropped batch by batch from the fetch response's aborted list and control batches (the
  commit and abort markers) not copied. Since 2026-11-28 this mode runs on the product's batch path
  (mirror_core.wire: fetcher and sender, with leaders found and transient failures retried), not on the
  code below;
- transactional: as idempotent, but as a transactional producer that commits every ``commit_interval``
  seconds (1 s: mirror_core's ``offset.flush.interval.ms`` under backlog) and when a fetch finds nothing
  more, as mirror_core's exactly-once mode does; it drains its in-flight requests before each commit. Its
  coordinator is found once: a coordinator that moves mid-run stops it (NOT_COORDINATOR).

Its connections are the product's (mirror_core.wire: TLS and SASL PLAIN/SCRAM from a cluster's settings),
and so are its record-batch steps (split, read_committed filter, restamp). A product copier would also need
leader changes, retries, and the offset map and progress written in the same transactions; this one answers
"how fast could it go on this host".

Run by ``bench.copy_ceiling`` as its third copier.
"""

from __future__ import annotations

import queue
import struct
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from mirror_core.config.loader import load_config
from mirror_core.wire import fetch as wire_fetch
from mirror_core.wire import produce as wire_produce
from mirror_core.wire.codec import Reader, string
from mirror_core.wire.connection import Connection
from mirror_core.wire.errors import name
from mirror_core.wire.fetch import API_FETCH
from mirror_core.wire.fetcher import BatchFetcher
from mirror_core.wire.metadata import Brokers
from mirror_core.wire.produce import API_INIT_PRODUCER_ID, API_PRODUCE, init_producer_id_request
from mirror_core.wire.recode import contiguous_copy
from mirror_core.wire.records import (
    CONTROL,
    TRANSACTIONAL,
    attributes,
    committed,
    contiguous,
    next_offset,
    next_sequence,
    producer_id,
    restamp,
)
from mirror_core.wire.sender import BatchSender, Outgoing

API_LIST_OFFSETS, API_FIND_COORDINATOR, API_ADD_PARTITIONS_TO_TXN, API_END_TXN = 2, 10, 24, 26
# Answered while a coordinator loads, moves or finishes the previous transaction's markers: asked again.
RETRIABLE = frozenset({14, 15, 51})  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, CONCURRENT_TRANSACTIONS
NOT_COORDINATOR = 16  # the coordinator moved or is not ready yet: found again, then asked again
MODES = ("plain", "idempotent", "transactional")



class BrokerError(RuntimeError):
    def __init__(self, what: str, code: int) -> None:
        super().__init__(f"{what}: {name(code)}")
        self.code = code


@dataclass
class ProducerStamp:
    """The copier as an idempotent (or transactional) producer: its producer id and epoch, and each
    partition's next sequence. Every batch it sends is restamped with them."""

    producer_id: int
    epoch: int
    transactional: bool = False
    sequences: dict[int, int] = field(default_factory=dict)

    def stamp(self, partition: int, batch: memoryview | bytes) -> bytes:
        """``batch`` as this producer's next batch to ``partition`` (:func:`restamp`)."""
        sequence = self.sequences.get(partition, 0)
        self.sequences[partition] = next_sequence(sequence, batch)
        return b"".join(restamp(batch, self.producer_id, self.epoch, sequence, self.transactional))


@dataclass(frozen=True)
class Leaders:
    brokers: dict[int, tuple[str, int]]
    partitions: dict[int, int]  # partition -> leader node id


def leaders(bootstrap: str, topic: str, settings: Mapping[str, str]) -> Leaders:
    brokers = Brokers(bootstrap, settings, bootstrap)
    meta = brokers.metadata([topic])
    found = meta.topics[topic]
    if found.error or any(found.errors.values()):
        raise RuntimeError(f"metadata for {topic}: {name(found.error)} {sorted(set(found.errors.values()))}")
    return Leaders({n: (b.host, b.port) for n, b in meta.brokers.items()}, found.leaders)


def await_leadership(wire: Connection, topic: str, partitions: int, timeout: float = 60) -> None:
    """Until every partition's leader answers as leader: a topic just created is in the metadata a moment
    before its leader takes writes (NOT_LEADER_OR_FOLLOWER), and this copier does not retry."""
    body = (struct.pack(">ii", -1, 1) + string(topic) + struct.pack(">i", partitions)
            + b"".join(struct.pack(">iq", p, -1) for p in range(partitions)))
    deadline = time.monotonic() + timeout
    while True:
        r = Reader(wire.call(API_LIST_OFFSETS, 1, body))
        errors = set()
        for _ in range(r.int32()):
            r.string()
            for _ in range(r.int32()):
                errors.add(r.take(">ihqq")[1])
        if errors == {0}:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{topic}: partitions not led after {timeout:.0f} s (errors {sorted(errors)})")
        time.sleep(0.2)


def fetch_request(topic: str, offsets: dict[int, int], partition_max: int, max_bytes: int) -> bytes:
    return wire_fetch.fetch_request({(topic, p): off for p, off in offsets.items()}, 500, 1, max_bytes, partition_max)


def plain_only(batches: list[memoryview]) -> list[memoryview]:
    """The plain mode copies batches as they are: one whose producer fields would need rewriting (the CRC
    covers them) stops the copy."""
    for batch in batches:
        if attributes(batch) & (CONTROL | TRANSACTIONAL) or producer_id(batch) != -1:
            raise RuntimeError("a transactional, idempotent or control batch: the plain mode does not rewrite "
                               "producer ids (the CRC covers them); use a plain source or the idempotent mode")
    return batches


def top_level_error(r: Reader) -> set[int]:
    """The error code after the throttle time, where most responses carry theirs."""
    r.int32()
    return {r.int16()} - {0}


def partition_errors(r: Reader) -> set[int]:
    """AddPartitionsToTxn v1's errors: one per partition of each topic, none at the top level."""
    r.int32()
    errors: set[int] = set()
    for _ in range(r.int32()):
        r.string()
        errors.update(r.take(">ih")[1] for _ in range(r.int32()))
    return errors - {0}


def retrying(wire: Connection, api: int, version: int, body: bytes, what: str,
             errors: Callable[[Reader], set[int]] = top_level_error, timeout: float = 30) -> Reader:
    """``wire.call`` until the answer has no error (``errors`` reads them), asked again while all its errors
    are ``RETRIABLE`` ones; the rest of the answer is left to read."""
    deadline = time.monotonic() + timeout
    while True:
        r = Reader(wire.call(api, version, body))
        found = errors(r)
        if not found:
            return r
        fatal = found - RETRIABLE
        if fatal or time.monotonic() > deadline:
            raise BrokerError(what, min(fatal or found))
        time.sleep(0.02)


def init_producer_id(wire: Connection, transactional_id: str | None = None) -> ProducerStamp:
    """A producer id and epoch (InitProducerId v1), for an idempotent producer or, with ``transactional_id``,
    a transactional one. A broker answers COORDINATOR_LOAD_IN_PROGRESS until it has a block of ids from the
    controller, and a transaction coordinator while it loads its log."""
    producer_id, epoch = retrying(wire, API_INIT_PRODUCER_ID, 1, init_producer_id_request(transactional_id),
                                  "InitProducerId").take(">qh")
    return ProducerStamp(producer_id, epoch, transactional=transactional_id is not None)


def transaction_coordinator(wire: Connection, transactional_id: str) -> tuple[str, int]:
    """Where ``transactional_id``'s coordinator runs (FindCoordinator v1, key type 1). A cluster creates its
    transaction state topic on the first such request and answers COORDINATOR_NOT_AVAILABLE until then."""
    r = retrying(wire, API_FIND_COORDINATOR, 1, string(transactional_id) + b"\x01", "FindCoordinator")
    r.string()  # error message
    r.int32()  # node id
    host = r.string() or ""
    return host, r.int32()


class Transaction:
    """This copier's transactions, on a connection of their own to the transaction coordinator (found through
    ``bootstrap``): the partitions a transaction writes are added before the first produce request that
    writes them, and a commit ends it (the next begins with the next add)."""

    def __init__(self, bootstrap: Connection, transactional_id: str, topic: str, settings: Mapping[str, str],
                 timeout: float = 60) -> None:
        self.id, self.topic = transactional_id, topic
        deadline = time.monotonic() + timeout
        while True:
            self.wire = Connection(*transaction_coordinator(bootstrap, transactional_id), settings,
                                   "the transaction coordinator")
            try:
                self.producer = init_producer_id(self.wire, transactional_id)
                break
            except BrokerError as e:
                self.wire.sock.close()
                if e.code != NOT_COORDINATOR or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        self.added: set[int] = set()
        self.began = 0.0

    def _header(self) -> bytes:
        return string(self.id) + struct.pack(">qh", self.producer.producer_id, self.producer.epoch)

    def add(self, partitions: Iterable[int]) -> None:
        new = sorted(set(partitions) - self.added)
        if not new:
            return
        body = (self._header() + struct.pack(">i", 1) + string(self.topic)
                + struct.pack(f">i{len(new)}i", len(new), *new))
        # CONCURRENT_TRANSACTIONS while the coordinator finishes the last commit's markers: asked again.
        retrying(self.wire, API_ADD_PARTITIONS_TO_TXN, 1, body, f"AddPartitionsToTxn {self.topic}", partition_errors)
        if not self.added:
            self.began = time.monotonic()
        self.added.update(new)

    def commit(self) -> None:
        if self.added:
            retrying(self.wire, API_END_TXN, 1, self._header() + b"\x01", "EndTxn")
            self.added.clear()


def produce_request(remote: str, batches: dict[int, memoryview] | dict[int, bytes],
                    transactional_id: str | None = None) -> bytes:
    return b"".join(wire_produce.produce_request({(remote, p): (b,) for p, b in batches.items()}, 30_000,
                                                 transactional_id))


def parse_fetch(response: memoryview, topic: str, any_producer: bool = False
                ) -> dict[int, tuple[list[memoryview], list[tuple[int, int]]]]:
    """Per partition that returned whole batches: those batches and the aborted transactions (producer id,
    first offset) the broker listed for the fetched range. Any error stops the prototype (it never retries)."""
    out: dict[int, tuple[list[memoryview], list[tuple[int, int]]]] = {}
    for part in wire_fetch.parse_fetch(response, f"fetch {topic}"):
        if part.error:
            raise RuntimeError(f"fetch {topic}[{part.partition}]: {name(part.error)}")
        if not any_producer:
            plain_only(part.batches)
        if part.batches:
            out[part.partition] = (part.batches, part.aborted)
    return out


def check_produce(response: memoryview) -> None:
    for part in wire_produce.parse_produce(response):
        if part.error:
            raise RuntimeError(f"produce to {part.topic}[{part.partition}]: {name(part.error)} {part.message or ''}")


def cluster_settings(config: str, source: str, target: str) -> tuple[dict[str, str], dict[str, str]]:
    """The source's consumer and the target's producer settings from an mm2.properties (TLS, SASL)."""
    loaded = load_config(Path(config))
    return (loaded.cluster(source).client_settings("consumer"), loaded.cluster(target).client_settings("producer"))


def copy_batches(source: str, target: str, topic: str, remote: str, partitions: int,
                 source_settings: Mapping[str, str], target_settings: Mapping[str, str],
                 max_in_flight: int = 20_000) -> None:
    """The idempotent mode on the product's own batch path (mirror_core.wire's fetcher and sender): committed
    batches of every partition, resumed as soon as they are handed over, until killed; at most
    ``max_in_flight`` batches handed over and not yet answered. Any failure the sender hands back stops it."""
    fetcher = BatchFetcher(Brokers(source, source_settings, "the source"))
    sender = BatchSender(Brokers(target, target_settings, "the target"))
    fetcher.assign({(topic, p): 0 for p in range(partitions)})
    waiting = 0
    while True:
        for part in fetcher.poll(0.05 if waiting < max_in_flight else 0):
            if part.error or part.problem:
                raise RuntimeError(part.problem or f"fetch {topic}[{part.partition}]: {name(part.error)}")
            kept = committed(part.batches, part.aborted)
            sender.send(Outgoing(remote, part.partition, b if contiguous(b) else contiguous_copy(b)[0]) for b in kept)
            waiting += len(kept)
            fetcher.resume((topic, part.partition), next_offset(part.batches[-1]))
        for result in sender.poll(0.05 if waiting >= max_in_flight else 0):
            waiting -= 1
            if result.error:
                raise RuntimeError(result.describe())


def forward(source: str, target: str, topic: str, remote: str, partitions: int, in_flight: int = 8,
            mode: str = "plain", commit_interval: float = 1.0, source_settings: Mapping[str, str] | None = None,
            target_settings: Mapping[str, str] | None = None) -> None:
    """Copy ``topic`` to ``remote`` until killed: one fetching thread, this one producing, one reading acks.
    Requests to the target are processed one at a time per connection, in the order sent, so the sequences
    stamped here in sending order arrive in order. ``*_settings``: a cluster's librdkafka settings (TLS, SASL;
    the product's wire client reads them as librdkafka does), plaintext without."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}: one of {', '.join(MODES)}")
    idempotent = mode != "plain"
    src_settings, dst_settings = source_settings or {}, target_settings or {}
    if mode == "idempotent":
        copy_batches(source, target, topic, remote, partitions, src_settings, dst_settings)
        return
    src, dst = leaders(source, topic, src_settings), leaders(target, remote, dst_settings)
    if len(set(src.partitions.values())) != 1 or len(set(dst.partitions.values())) != 1:
        raise RuntimeError("the prototype expects one leader per cluster (the bench's single-node clusters)")
    fetch_wire = Connection(*src.brokers[next(iter(src.partitions.values()))], src_settings, "the source")
    produce_wire = Connection(*dst.brokers[next(iter(dst.partitions.values()))], dst_settings, "the target")
    await_leadership(produce_wire, remote, partitions)
    txn = Transaction(produce_wire, f"batch-forward-{remote}", remote, dst_settings) if mode == "transactional" \
        else None
    producer = txn.producer if txn else init_producer_id(produce_wire) if idempotent else None
    tid = txn.id if txn else None
    fetched: queue.Queue[dict[int, list[memoryview]]] = queue.Queue(maxsize=4)
    slots = threading.Semaphore(in_flight)
    failure: list[BaseException] = []

    def fetcher() -> None:
        offsets = dict.fromkeys(range(partitions), 0)
        try:
            while True:
                got: dict[int, list[memoryview]] = {}
                fetch = fetch_wire.call(API_FETCH, 11, fetch_request(topic, offsets, 4 << 20, 64 << 20))
                for index, (batches, aborted) in parse_fetch(fetch, topic, idempotent).items():
                    offsets[index] = next_offset(batches[-1])  # the next fetch starts after the last batch
                    kept = committed(batches, aborted) if idempotent else batches
                    if kept:
                        got[index] = kept
                fetched.put(got)  # empty: the source has nothing more for now (the transactional mode commits)
        except BaseException as e:  # handed to the producing thread, which raises it
            failure.append(e)
            fetched.put({})

    def acker() -> None:
        try:
            while True:
                check_produce(produce_wire.receive())
                slots.release()
        except BaseException as e:
            failure.append(e)

    threading.Thread(target=fetcher, daemon=True).start()
    threading.Thread(target=acker, daemon=True).start()

    def drain() -> None:
        """Until every request sent has its answer (a transaction commits only what was acknowledged)."""
        for _ in range(in_flight):
            while not slots.acquire(timeout=1):
                if failure:
                    raise failure[0]
        for _ in range(in_flight):
            slots.release()

    while not failure:
        try:
            got = fetched.get(timeout=1)
        except queue.Empty:
            continue
        if not got:  # a fetch found nothing more for now: what was copied becomes visible
            if txn and not failure:
                drain()
                txn.commit()
            continue
        depth = max((len(b) for b in got.values()), default=0)
        for i in range(depth):  # the i-th batch of every partition in one request, in order per partition
            while not slots.acquire(timeout=1):
                if failure:
                    raise failure[0]
            chosen = {p: b[i] for p, b in got.items() if i < len(b)}
            if txn:
                txn.add(chosen)
            produce_wire.send(API_PRODUCE, 8, produce_request(
                remote, {p: producer.stamp(p, b) for p, b in chosen.items()} if producer else chosen, tid))
        if txn and time.monotonic() - txn.began >= commit_interval:
            drain()
            txn.commit()
    time.sleep(0.5)
    raise failure[0]
