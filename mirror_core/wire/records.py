"""Record batches (magic v2) as the broker stores and serves them: split from a fetch, filtered as a
read_committed consumer would, and restamped for the copier's own producer id (its CRC corrected, not
computed again). Nothing here looks at a record's key or value.

Layout (KIP-98): base offset int64 @0, batch length int32 @8, partition leader epoch int32 @12, magic int8
@16, CRC32C uint32 @17 (over attributes to the end), attributes int16 @21, last offset delta int32 @23, base
and max timestamps int64 @27/@35, producer id int64 @43, producer epoch int16 @51, base sequence int32 @53,
record count int32 @57, then the records (@61).
"""

from __future__ import annotations

import struct

import google_crc32c

from mirror_core.wire.codec import ProtocolError

TRANSACTIONAL, CONTROL = 0x10, 0x20  # attributes bits 4 and 5
BATCH_HEADER = 61  # bytes of a v2 batch header before its records
LOG_OVERHEAD = 12  # base offset and batch length: the batch length counts from after them
CRC_FROM = 21  # the CRC32C covers a batch from its attributes to its end
RESTAMPED = 57  # a batch's bytes up to and with its base sequence: what a restamp rewrites
ABORT_MARKER = 0  # a control record's type (its key: version int16, type int16); 1 is a commit


#: a batch's header up to its record count: base offset, batch length, leader epoch, magic, CRC, attributes, last
#: offset delta, base and max timestamps, producer id, producer epoch, base sequence, record count (one unpack
#: where several fields are read: at thousands of partitions the copier reads a few for every batch)
HEADER = struct.Struct(">qiibIhiqqqhii")
BASE, CRC, ATTRIBUTES, LAST_DELTA, BASE_TIMESTAMP, MAX_TIMESTAMP, PRODUCER_ID, COUNT = 0, 4, 5, 6, 7, 8, 9, 12


def split_batches(records: memoryview) -> list[memoryview]:
    """The whole batches of a fetched record set, in order (a fetch may end inside a batch: that part is
    fetched again from the next offset)."""
    out: list[memoryview] = []
    at, end = 0, len(records)
    while at + LOG_OVERHEAD <= end:
        size = LOG_OVERHEAD + struct.unpack_from(">i", records, at + 8)[0]
        if size < BATCH_HEADER:  # (before the end check: a negative length is no partial batch)
            raise ProtocolError(f"record batch at byte {at} of a fetch is {size} bytes, shorter than its header")
        if at + size > end:
            break
        magic = records[at + 16]
        if magic != 2:
            raise ProtocolError(f"record batch of magic {magic} at offset {base_offset(records[at:at + 12])}: only "
                                "magic 2 (Kafka 0.11 and later) is copied as batches")
        out.append(records[at:at + size])
        at += size
    return out


def base_offset(batch: memoryview | bytes | bytearray) -> int:
    return int(struct.unpack_from(">q", batch, 0)[0])


def attributes(batch: memoryview | bytes | bytearray) -> int:
    return int(struct.unpack_from(">h", batch, 21)[0])


def producer_id(batch: memoryview | bytes | bytearray) -> int:
    return int(struct.unpack_from(">q", batch, 43)[0])


def max_timestamp(batch: memoryview | bytes | bytearray) -> int:
    """The newest record's timestamp (ms; the broker's under LogAppendTime)."""
    return int(struct.unpack_from(">q", batch, 35)[0])


def record_count(batch: memoryview | bytes | bytearray) -> int:
    return int(struct.unpack_from(">i", batch, 57)[0])


def next_offset(batch: memoryview | bytes | bytearray) -> int:
    """The offset after the batch's last one (its last record may have been removed by compaction: the
    batch keeps its last offset delta)."""
    return base_offset(batch) + int(struct.unpack_from(">i", batch, 23)[0]) + 1


def contiguous(batch: memoryview | bytes | bytearray) -> bool:
    """No offset inside the batch is missing (compaction removes records but keeps the batch's range): the
    target, assigning offsets one after another, maps the batch with a single offset-map run."""
    return next_offset(batch) - base_offset(batch) == record_count(batch)


#: bytes of the longest varint a record holds (a 64-bit varlong: its timestamp delta)
MAX_VARINT = 10


def read_varint(data: memoryview | bytes, at: int) -> tuple[int, int]:
    """A zigzag varint at ``at``: its value and where the next field starts. One that runs past ``data``'s end
    or past ``MAX_VARINT`` bytes is a ProtocolError."""
    raw, shift, start = 0, 0, at
    end = min(len(data), at + MAX_VARINT)
    while 0 <= at < end:
        b = data[at]
        raw |= (b & 0x7F) << shift
        at, shift = at + 1, shift + 7
        if not b & 0x80:
            return (raw >> 1) ^ -(raw & 1), at
    what = "longer than 10 bytes" if at - start >= MAX_VARINT else f"past the end of {len(data)} bytes"
    raise ProtocolError(f"a varint at byte {start} runs {what}")


def control_type(batch: memoryview) -> int:
    """A control batch's marker type, from its one record's key (control batches are never compressed): its key
    is a version int16 and the type int16; a key shorter than that, or cut by the batch's end, is a ProtocolError."""
    at = read_varint(batch, BATCH_HEADER)[1] + 1  # record length, then its attributes byte
    at = read_varint(batch, read_varint(batch, at)[1])[1]  # timestamp delta, offset delta
    key_length, at = read_varint(batch, at)
    if key_length < 4 or at + 4 > len(batch):
        raise ProtocolError(f"control batch at offset {base_offset(batch)}: its record's key of {key_length} bytes "
                            "holds no version and type")
    return int(struct.unpack_from(">h", batch, at + 2)[0])


def committed(batches: list[memoryview], aborted: list[tuple[int, int]]) -> list[memoryview]:
    """The batches a read_committed consumer would hand out records of, as whole batches: control batches and
    batches left empty by compaction dropped, and a transactional batch dropped while its producer is in an
    aborted transaction of the fetch response's list (``(producer id, first offset)``) whose abort marker has
    not come yet (the Java consumer's rule)."""
    pending = sorted(aborted, key=lambda a: a[1])
    aborting: set[int] = set()
    out: list[memoryview] = []
    for batch in batches:
        h = HEADER.unpack_from(batch)
        last = h[BASE] + h[LAST_DELTA]
        while pending and pending[0][1] <= last:
            aborting.add(pending.pop(0)[0])
        if h[ATTRIBUTES] & CONTROL:
            if control_type(batch) == ABORT_MARKER:
                aborting.discard(h[PRODUCER_ID])
        elif not (h[ATTRIBUTES] & TRANSACTIONAL and h[PRODUCER_ID] in aborting) and h[COUNT]:
            out.append(batch)  # (compaction may leave a batch with no record: nothing to copy)
    return out


def computed_crc(batch: memoryview | bytes | bytearray) -> int:
    """The CRC32C of ``batch`` from its attributes on (what its CRC field must hold; google_crc32c reads bytes
    only, so that much is copied)."""
    return int(google_crc32c.value(bytes(memoryview(batch)[CRC_FROM:])))


#: what a restamp rewrites after the CRC: attributes, last offset delta, base and max timestamps, producer id,
#: producer epoch, base sequence (bytes 21 to 57)
_RESTAMPED_FIELDS = struct.Struct(">hiqqqhi")


def restamp(batch: memoryview | bytes | bytearray, producer_id: int, epoch: int, sequence: int,
            transactional: bool = False) -> tuple[bytes, memoryview]:
    """``batch`` as a producer's batch, in two parts: its header to the base sequence (57 bytes) with producer
    id, epoch and base sequence rewritten, the transactional bit set as that producer is (the source's
    transaction was committed) and the CRC brought along; then the rest (record count and records), a view of
    ``batch``. Two parts, so that a produce request carries the records without one more copy of them. Base
    offset and leader epoch are not covered by the CRC: the produce request sets them.

    The records are not copied: a CRC is linear, so the batch's own CRC is corrected for the 36 header bytes
    that changed (:func:`crc_moved`), and a batch whose CRC did not match its bytes still does not: the target
    refuses it (CORRUPT_MESSAGE), as it refuses a corrupt batch produced to it, instead of the copy vouching for
    bytes it never checked."""
    view = memoryview(batch)
    old = bytes(view[CRC_FROM:RESTAMPED])
    attrs, last_delta, base_ts, max_ts, _, _, _ = _RESTAMPED_FIELDS.unpack(old)
    attrs = attrs & ~TRANSACTIONAL | (TRANSACTIONAL if transactional else 0)
    new = _RESTAMPED_FIELDS.pack(attrs, last_delta, base_ts, max_ts, producer_id, epoch, sequence)
    moved = crc_moved(google_crc32c.value(old) ^ google_crc32c.value(new), len(view) - RESTAMPED)
    crc = struct.pack(">I", struct.unpack_from(">I", view, 17)[0] ^ moved)
    return bytes(view[:17]) + crc + new, view[RESTAMPED:]


#: zeros for :func:`crc_moved`: one block of each power of two up to a MiB, and a MiB used as often as needed
_ZEROS = [bytes(1 << k) for k in range(21)]
#: up to this many zeros a copy of them is cheaper than a call per set bit (google_crc32c reads bytes only, so a
#: view will not do): the small batches of many partitions (tens of KB at most) take one call
_SHORT = 1 << 14
_MASK = 0xFFFFFFFF


def crc_moved(difference: int, after: int) -> int:
    """How the CRC32C of a message changes when bytes followed by ``after`` more bytes change so that the CRC of
    the changed bytes alone changes by ``difference`` (CRC32C is linear over messages of one length: the
    change is ``difference`` carried through ``after`` zero bytes). google_crc32c extends a CRC over cached
    zeros at its C speed (about 20 GB/s here; as much work as a CRC over the records, without copying them):
    one call over a copy of up to 16 KiB of zeros, else one per MiB and per set bit of the rest."""
    crc = ~difference & _MASK  # extend() starts from and ends with a complemented register
    if after <= _SHORT:
        return ~int(google_crc32c.extend(crc, _ZEROS[14][:after])) & _MASK
    while after >= 1 << 20:
        crc = google_crc32c.extend(crc, _ZEROS[20])
        after -= 1 << 20
    while after:
        low = after & -after
        crc = google_crc32c.extend(crc, _ZEROS[low.bit_length() - 1])
        after ^= low
    return ~crc & _MASK


def next_sequence(sequence: int, batch: memoryview | bytes | bytearray) -> int:
    """The sequence after ``batch``'s records (sequences wrap at int32's maximum, as the broker expects)."""
    return (sequence + record_count(batch)) & 0x7FFFFFFF
