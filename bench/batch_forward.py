"""What copying whole record batches would reach: a prototype copier (bench only, not product code) that
fetches raw record batches from the source leader and produces the same bytes to the target, with no
per-record work in Python at all. The target broker assigns offsets; each produce response's base offset
would give an exact offset map per batch.

It speaks the Kafka protocol over plain sockets (Metadata v4, ListOffsets v1, Fetch v11, Produce v8,
InitProducerId v1, AddPartitionsToTxn v1, EndTxn v1: non-flexible versions Kafka 4.x still serves). Three
modes:

- plain: copies only non-idempotent, non-transactional batches, compressed or not, whose CRC it leaves as it
  is (only the base offset and leader epoch change, and the CRC does not cover them); anything else stops it
  with a clear error;
- idempotent: produces as an idempotent producer of its own (InitProducerId, a sequence per partition), so
  every batch gets its producer id, epoch and base sequence rewritten and its CRC32C recomputed (C code:
  google-crc32c). It takes any source then: idempotent and transactional producers' batches, with aborted
  transactions dropped batch by batch from the fetch response's aborted list and control batches (the
  commit and abort markers) not copied;
- transactional: as idempotent, but as a transactional producer that commits every ``commit_interval``
  seconds (1 s: mirror_core's ``offset.flush.interval.ms`` under backlog) and when a fetch finds nothing
  more, as mirror_core's exactly-once mode does; it drains its in-flight requests before each commit. Its
  coordinator is found once: a coordinator that moves mid-run stops it (NOT_COORDINATOR).

A product version would also need TLS and SASL, leader changes, retries, and the offset map and progress
written in the same transactions; this one answers only "how fast could it go on this host".

Run by ``bench.copy_ceiling`` as its third copier.
"""

from __future__ import annotations

import queue
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import google_crc32c

API_PRODUCE, API_FETCH, API_LIST_OFFSETS, API_METADATA = 0, 1, 2, 3
API_FIND_COORDINATOR, API_INIT_PRODUCER_ID, API_ADD_PARTITIONS_TO_TXN, API_END_TXN = 10, 22, 24, 26
# Answered while a coordinator loads, moves or finishes the previous transaction's markers: asked again.
RETRIABLE = {14: "COORDINATOR_LOAD_IN_PROGRESS", 15: "COORDINATOR_NOT_AVAILABLE", 51: "CONCURRENT_TRANSACTIONS"}
NOT_COORDINATOR = 16  # the coordinator moved or is not ready yet: found again, then asked again
MODES = ("plain", "idempotent", "transactional")

TRANSACTIONAL, CONTROL = 0x10, 0x20  # record batch attributes bits 4 and 5
CONTROL_OR_TXN = CONTROL | TRANSACTIONAL
BATCH_HEADER = 61  # bytes of a v2 record batch header before its records
CRC_FROM = 21  # the CRC32C covers a batch from its attributes to its end
ABORT_MARKER = 0  # a control record's type (its key: version int16, type int16); 1 is a commit


class BrokerError(RuntimeError):
    def __init__(self, what: str, code: int) -> None:
        super().__init__(f"{what}: error {code} {RETRIABLE.get(code, '')}".rstrip())
        self.code = code


class Wire:
    """One connection speaking request header v1 / response header v0 (non-flexible versions)."""

    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
        self.correlation = 0

    def send(self, api: int, version: int, body: bytes) -> int:
        self.correlation += 1
        header = struct.pack(">hhih", api, version, self.correlation, 2) + b"bf"
        self.sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
        return self.correlation

    def receive(self) -> memoryview:
        size = struct.unpack(">i", self._exactly(4))[0]
        return memoryview(self._exactly(size))[4:]  # drop the correlation id: answers come in order

    def call(self, api: int, version: int, body: bytes) -> memoryview:
        self.send(api, version, body)
        return self.receive()

    def _exactly(self, n: int) -> bytearray:
        buf = bytearray(n)
        view, got = memoryview(buf), 0
        while got < n:
            k = self.sock.recv_into(view[got:], n - got)
            if not k:
                raise ConnectionError("broker closed the connection")
            got += k
        return buf


class Reader:
    def __init__(self, data: memoryview) -> None:
        self.data, self.at = data, 0

    def take(self, fmt: str) -> tuple[int, ...]:
        values = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return values

    def int(self, fmt: str) -> int:
        return self.take(fmt)[0]

    def string(self) -> str | None:
        n = self.int(">h")
        if n < 0:
            return None
        self.at += n
        return bytes(self.data[self.at - n:self.at]).decode()

    def blob(self) -> memoryview | None:
        n = self.int(">i")
        if n < 0:
            return None
        self.at += n
        return self.data[self.at - n:self.at]


def string(s: str) -> bytes:
    raw = s.encode()
    return struct.pack(">h", len(raw)) + raw


@dataclass(frozen=True)
class Leaders:
    brokers: dict[int, tuple[str, int]]
    partitions: dict[int, int]  # partition -> leader node id


def leaders(bootstrap: str, topic: str) -> Leaders:
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    wire = Wire(host, int(port))
    r = Reader(wire.call(API_METADATA, 4, struct.pack(">i", 1) + string(topic) + b"\x00"))
    wire.sock.close()
    r.int(">i")
    brokers: dict[int, tuple[str, int]] = {}
    for _ in range(r.int(">i")):
        node = r.int(">i")
        broker_host, broker_port = r.string() or "", r.int(">i")
        r.string()
        brokers[node] = (broker_host, broker_port)
    r.string()
    r.int(">i")
    partitions: dict[int, int] = {}
    for _ in range(r.int(">i")):
        error, name, _internal = r.int(">h"), r.string(), r.int(">b")
        if error:
            raise RuntimeError(f"metadata for {name}: error {error}")
        for _ in range(r.int(">i")):
            p_error, index, leader = r.take(">hii")
            if p_error:
                raise RuntimeError(f"metadata for {name}[{index}]: error {p_error}")
            for _ in range(2):  # replicas, then in-sync replicas
                skip = 4 * r.int(">i")  # read before `r.at +=` loads r.at
                r.at += skip
            partitions[index] = leader
    return Leaders(brokers, partitions)


def await_leadership(wire: Wire, topic: str, partitions: int, timeout: float = 60) -> None:
    """Until every partition's leader answers as leader: a topic just created is in the metadata a moment
    before its leader takes writes (NOT_LEADER_OR_FOLLOWER), and this copier does not retry."""
    body = (struct.pack(">ii", -1, 1) + string(topic) + struct.pack(">i", partitions)
            + b"".join(struct.pack(">iq", p, -1) for p in range(partitions)))
    deadline = time.monotonic() + timeout
    while True:
        r = Reader(wire.call(API_LIST_OFFSETS, 1, body))
        errors = set()
        for _ in range(r.int(">i")):
            r.string()
            for _ in range(r.int(">i")):
                errors.add(r.take(">ihqq")[1])
        if errors == {0}:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{topic}: partitions not led after {timeout:.0f} s (errors {sorted(errors)})")
        time.sleep(0.2)


def fetch_request(topic: str, offsets: dict[int, int], partition_max: int, max_bytes: int) -> bytes:
    parts = b"".join(struct.pack(">iiqqi", p, -1, off, -1, partition_max) for p, off in offsets.items())
    return (struct.pack(">iiiibii", -1, 500, 1, max_bytes, 1, 0, -1) + struct.pack(">i", 1) + string(topic)
            + struct.pack(">i", len(offsets)) + parts + struct.pack(">i", 0) + string(""))


def split_batches(records: memoryview, any_producer: bool = False) -> list[memoryview]:
    """The whole v2 batches in a fetched record set (a fetch may end in a partial one), as they are. Without
    ``any_producer`` (the plain mode) a batch whose producer fields would need rewriting stops the copy."""
    out: list[memoryview] = []
    at, end = 0, len(records)
    while at + 12 <= end:
        size = 12 + struct.unpack_from(">i", records, at + 8)[0]
        if at + size > end:
            break
        batch = records[at:at + size]
        magic = batch[16]
        if magic != 2:
            raise RuntimeError(f"record batch of magic {magic}: the prototype copies v2 batches only")
        if not any_producer and (attributes(batch) & CONTROL_OR_TXN or producer_id(batch) != -1):
            raise RuntimeError("a transactional, idempotent or control batch: the prototype does not rewrite "
                               "producer ids (the CRC covers them); use a plain source")
        out.append(batch)
        at += size
    return out


def attributes(batch: memoryview | bytes | bytearray) -> int:
    return int(struct.unpack_from(">h", batch, 21)[0])


def producer_id(batch: memoryview | bytes | bytearray) -> int:
    return int(struct.unpack_from(">q", batch, 43)[0])


def _varint(data: memoryview, at: int) -> tuple[int, int]:
    """A zigzag varint at ``at``: its value and where the next field starts."""
    raw, shift = 0, 0
    while True:
        b = data[at]
        raw |= (b & 0x7F) << shift
        at, shift = at + 1, shift + 7
        if not b & 0x80:
            return (raw >> 1) ^ -(raw & 1), at


def control_type(batch: memoryview) -> int:
    """A control batch's marker type, from its one record's key (control batches are never compressed)."""
    at = _varint(batch, BATCH_HEADER)[1] + 1  # record length, then its attributes byte
    at = _varint(batch, _varint(batch, at)[1])[1]  # timestamp delta, offset delta
    at = _varint(batch, at)[1]  # key length
    return int(struct.unpack_from(">h", batch, at + 2)[0])


def committed(batches: list[memoryview], aborted: list[tuple[int, int]]) -> list[memoryview]:
    """The batches a read_committed consumer would hand out, as whole batches: control batches dropped, and
    a transactional batch dropped while its producer is in an aborted transaction of the fetch response's
    list (``(producer id, first offset)``) whose abort marker has not come yet."""
    pending = sorted(aborted, key=lambda a: a[1])
    aborting: set[int] = set()
    out: list[memoryview] = []
    for batch in batches:
        last = next_offset(batch) - 1
        while pending and pending[0][1] <= last:
            aborting.add(pending.pop(0)[0])
        if attributes(batch) & CONTROL:
            if control_type(batch) == ABORT_MARKER:
                aborting.discard(producer_id(batch))
        elif not (attributes(batch) & TRANSACTIONAL and producer_id(batch) in aborting):
            out.append(batch)
    return out


@dataclass
class Idempotence:
    """This copier as an idempotent (or transactional) producer: its producer id and epoch, and each
    partition's next sequence."""

    producer_id: int
    epoch: int
    transactional: bool = False
    sequences: dict[int, int] = field(default_factory=dict)

    def stamp(self, partition: int, batch: memoryview) -> bytearray:
        """``batch`` as this producer's next batch to ``partition``: producer id, epoch and base sequence
        rewritten, the transactional bit set as this producer is (the source's transaction was committed),
        the CRC recomputed. Base offset and leader epoch are left to ``produce_request``."""
        out = bytearray(batch)
        sequence = self.sequences.get(partition, 0)
        count = struct.unpack_from(">i", out, 57)[0]
        kept = attributes(out) & ~TRANSACTIONAL
        struct.pack_into(">h", out, 21, kept | (TRANSACTIONAL if self.transactional else 0))
        struct.pack_into(">qhi", out, 43, self.producer_id, self.epoch, sequence)
        # google_crc32c takes read-only buffers only: one copy of the covered bytes.
        struct.pack_into(">I", out, 17, google_crc32c.value(bytes(memoryview(out)[CRC_FROM:])))
        self.sequences[partition] = (sequence + count) & 0x7FFFFFFF  # sequences wrap at int32's maximum
        return out


def top_level_error(r: Reader) -> set[int]:
    """The error code after the throttle time, where most responses carry theirs."""
    r.int(">i")
    return {r.int(">h")} - {0}


def partition_errors(r: Reader) -> set[int]:
    """AddPartitionsToTxn v1's errors: one per partition of each topic, none at the top level."""
    r.int(">i")
    errors: set[int] = set()
    for _ in range(r.int(">i")):
        r.string()
        errors.update(r.take(">ih")[1] for _ in range(r.int(">i")))
    return errors - {0}


def retrying(wire: Wire, api: int, version: int, body: bytes, what: str,
             errors: Callable[[Reader], set[int]] = top_level_error, timeout: float = 30) -> Reader:
    """``wire.call`` until the answer has no error (``errors`` reads them), asked again while all its errors
    are ``RETRIABLE`` ones; the rest of the answer is left to read."""
    deadline = time.monotonic() + timeout
    while True:
        r = Reader(wire.call(api, version, body))
        found = errors(r)
        if not found:
            return r
        fatal = found - RETRIABLE.keys()
        if fatal or time.monotonic() > deadline:
            raise BrokerError(what, min(fatal or found))
        time.sleep(0.02)


def init_producer_id(wire: Wire, transactional_id: str | None = None) -> Idempotence:
    """A producer id and epoch (InitProducerId v1), for an idempotent producer or, with ``transactional_id``,
    a transactional one. A broker answers COORDINATOR_LOAD_IN_PROGRESS until it has a block of ids from the
    controller, and a transaction coordinator while it loads its log."""
    tid = string(transactional_id) if transactional_id is not None else struct.pack(">h", -1)
    producer_id, epoch = retrying(wire, API_INIT_PRODUCER_ID, 1, tid + struct.pack(">i", 60_000),
                                  "InitProducerId").take(">qh")
    return Idempotence(producer_id, epoch, transactional=transactional_id is not None)


def transaction_coordinator(wire: Wire, transactional_id: str) -> tuple[str, int]:
    """Where ``transactional_id``'s coordinator runs (FindCoordinator v1, key type 1). A cluster creates its
    transaction state topic on the first such request and answers COORDINATOR_NOT_AVAILABLE until then."""
    r = retrying(wire, API_FIND_COORDINATOR, 1, string(transactional_id) + b"\x01", "FindCoordinator")
    r.string()  # error message
    r.int(">i")  # node id
    host = r.string() or ""
    return host, r.int(">i")


class Transaction:
    """This copier's transactions, on a connection of their own to the transaction coordinator (found through
    ``bootstrap``): the partitions a transaction writes are added before the first produce request that
    writes them, and a commit ends it (the next begins with the next add)."""

    def __init__(self, bootstrap: Wire, transactional_id: str, topic: str, timeout: float = 60) -> None:
        self.id, self.topic = transactional_id, topic
        deadline = time.monotonic() + timeout
        while True:
            self.wire = Wire(*transaction_coordinator(bootstrap, transactional_id))
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


def next_offset(batch: memoryview) -> int:
    base = struct.unpack_from(">q", batch, 0)[0]
    return int(base + struct.unpack_from(">i", batch, 23)[0] + 1)


def produce_request(remote: str, batches: dict[int, memoryview] | dict[int, bytearray],
                    transactional_id: str | None = None) -> bytes:
    """One batch per partition (Kafka takes exactly one v2 batch per partition in a produce request), its base
    offset set to 0 and leader epoch to -1 as a client sends them (outside the CRC, so the CRC stays valid)."""
    parts = []
    for p, batch in batches.items():
        head = bytearray(batch[:12])
        struct.pack_into(">q", head, 0, 0)
        parts.append(struct.pack(">ii", p, len(batch)) + bytes(head) + struct.pack(">i", -1) + bytes(batch[16:]))
    tid = string(transactional_id) if transactional_id is not None else struct.pack(">h", -1)
    return (tid + struct.pack(">hi", -1, 30_000) + struct.pack(">i", 1) + string(remote)
            + struct.pack(">i", len(parts)) + b"".join(parts))


def parse_fetch(response: memoryview, topic: str, any_producer: bool = False
                ) -> dict[int, tuple[list[memoryview], list[tuple[int, int]]]]:
    """A Fetch v11 response for one topic: per partition that returned whole batches, those batches and the
    aborted transactions (producer id, first offset) the broker listed for the fetched range."""
    r = Reader(response)
    _throttle, error, _session = r.take(">ihi")
    if error:
        raise RuntimeError(f"fetch {topic}: error {error}")
    out: dict[int, tuple[list[memoryview], list[tuple[int, int]]]] = {}
    for _ in range(r.int(">i")):
        r.string()
        for _ in range(r.int(">i")):
            index, p_error = r.take(">ih")
            r.at += 24  # high watermark, last stable offset, log start offset
            aborted = [(pid, first) for pid, first in (r.take(">qq") for _ in range(max(r.int(">i"), 0)))]
            r.int(">i")  # preferred read replica
            records = r.blob()
            if p_error:
                raise RuntimeError(f"fetch {topic}[{index}]: error {p_error}")
            batches = split_batches(records, any_producer) if records is not None else []
            if batches:
                out[index] = (batches, aborted)
    return out


def check_produce(response: memoryview) -> None:
    r = Reader(response)
    for _ in range(r.int(">i")):
        name = r.string()
        for _ in range(r.int(">i")):
            index, error = r.take(">ih")
            r.at += 24
            for _ in range(r.int(">i")):
                r.int(">i")
                r.string()
            message = r.string()
            if error:
                raise RuntimeError(f"produce to {name}[{index}]: error {error} {message or ''}")


def forward(source: str, target: str, topic: str, remote: str, partitions: int, in_flight: int = 8,
            mode: str = "plain", commit_interval: float = 1.0) -> None:
    """Copy ``topic`` to ``remote`` until killed: one fetching thread, this one producing, one reading acks.
    Requests to the target are processed one at a time per connection, in the order sent, so the sequences
    stamped here in sending order arrive in order."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}: one of {', '.join(MODES)}")
    idempotent = mode != "plain"
    src, dst = leaders(source, topic), leaders(target, remote)
    if len(set(src.partitions.values())) != 1 or len(set(dst.partitions.values())) != 1:
        raise RuntimeError("the prototype expects one leader per cluster (the bench's single-node clusters)")
    fetch_wire = Wire(*src.brokers[next(iter(src.partitions.values()))])
    produce_wire = Wire(*dst.brokers[next(iter(dst.partitions.values()))])
    await_leadership(produce_wire, remote, partitions)
    txn = Transaction(produce_wire, f"batch-forward-{remote}", remote) if mode == "transactional" else None
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
