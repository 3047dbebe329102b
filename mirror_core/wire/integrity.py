"""Fetched record batches checked before any field of theirs is trusted.

Brokers do not check a stored batch's CRC when they serve a fetch, so a bit flipped on a source disk reaches
the reader as it is. A reader that drops control batches, aborted transactions and empty batches on the word of
header fields the CRC covers would drop a damaged batch silently, and move its position past it. So each batch's
CRC32C (attributes to end) is checked first, and the offsets outside the CRC (the base offset) must follow one
another and stay within the partition's log. The batches up to the first damaged one are handed on; that one is
reported as a :class:`Damage`, never skipped.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import crc32c

from mirror_core.wire.records import CRC_FROM

#: base offset, batch length (at 0 and 8), then the stored CRC at 17 and the last offset delta at 23
_BASE = struct.Struct(">q")
_CRC = struct.Struct(">I")
_LAST_DELTA = struct.Struct(">i")


class Damage(NamedTuple):
    """A batch that may not be read: where it starts (its base offset as stored), how many bytes, and why."""

    first: int
    #: its last offset: what it claims when its CRC matched; else where the next batch begins, less one (None with
    #: no batch after it: its own last offset delta is not trusted)
    last: int | None
    size: int
    reason: str
    #: it may be sound after all: the broker captures an answer's high watermark before it reads the log, so under
    #: concurrent writes a sound batch can end past it; asked again, it is damage only if it still does
    settles: bool = False

    def describe(self) -> str:
        span = f"offsets {self.first}-{self.last}" if self.last is not None else f"offset {self.first}"
        return f"record batch at {span} ({self.size} bytes) is damaged: {self.reason}"


def crc_of(batch: memoryview) -> int:
    """The CRC32C of ``batch`` from its attributes on: what its CRC field must hold (read in place, the GIL let go
    for large batches)."""
    return int(crc32c.crc32c(batch[CRC_FROM:]))


def intact(batches: list[memoryview], log_end: int) -> tuple[list[memoryview], Damage | None]:
    """``batches`` (whole batches of one partition, in order) up to the first one that fails a check, and that
    one's damage (None when all pass). ``log_end``: the partition's high watermark in the same answer (a batch
    claiming offsets at or past it has a damaged base offset; -1: unknown, not checked)."""
    previous_end = -1
    for i, batch in enumerate(batches):
        first = _BASE.unpack_from(batch, 0)[0]
        stored, computed = _CRC.unpack_from(batch, 17)[0], crc_of(batch)
        if stored != computed:
            after = _BASE.unpack_from(batches[i + 1], 0)[0] - 1 if i + 1 < len(batches) else None
            return batches[:i], Damage(first, after if after is not None and after >= first else None, len(batch),
                                       f"its CRC32C 0x{stored:08x} does not match its bytes (0x{computed:08x})")
        last = first + _LAST_DELTA.unpack_from(batch, 23)[0]
        if last < first or first < previous_end:
            return batches[:i], Damage(first, None, len(batch),
                                       f"its offsets {first}-{last} do not follow the batch before it (ending at "
                                       f"{previous_end - 1}): its base offset, outside the CRC, is wrong")
        if log_end >= 0 and last >= log_end:
            return batches[:i], Damage(first, last, len(batch),
                                       f"it claims offsets up to {last}, past the partition's end ({log_end}): its "
                                       "base offset, outside the CRC, is wrong", settles=True)
        previous_end = last + 1
    return batches, None
