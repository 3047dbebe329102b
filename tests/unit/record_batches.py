"""Record batches (v2) built by hand for the unit tests of the wire client and the batch-forwarding prototype."""

from __future__ import annotations

import struct

import google_crc32c

from mirror_core.wire.recode import varint

# These batches are stamped 1 ms after the epoch: on a real broker a topic holding them needs this, or the broker's
# next time-retention check deletes them (the whole log, the active segment included) while the test reads it.
KEPT = {"retention.ms": "-1"}


def batch(base: int, last_delta: int, records: bytes = b"r" * 10, attributes: int = 0, producer_id: int = -1,
          count: int | None = None) -> bytes:
    """A batch with a valid CRC (restamp corrects a CRC, it does not compute one); ``count``: its record count
    (``last_delta + 1`` unless given: a compacted batch holds fewer)."""
    count = last_delta + 1 if count is None else count
    tail = struct.pack(">hiqqqhii", attributes, last_delta, 1, 1, producer_id, -1, -1, count) + records
    return struct.pack(">qiibI", base, 4 + 1 + 4 + len(tail), 7, 2, google_crc32c.value(tail)) + tail


def marker(base: int, producer_id: int, kind: int) -> bytes:
    """A control batch holding one commit (1) or abort (0) marker, as a transaction coordinator writes it."""
    key, value = struct.pack(">hh", 0, kind), struct.pack(">hi", 0, 3)
    body = b"\x00" + varint(0) + varint(0) + varint(len(key)) + key + varint(len(value)) + value + varint(0)
    return batch(base, 0, varint(len(body)) + body, attributes=0x30, producer_id=producer_id)
