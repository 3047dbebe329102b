"""The Kafka protocol's primitive types, read from a response and written into a request (non-flexible
versions: int16-prefixed strings, int32-prefixed bytes and arrays)."""

from __future__ import annotations

import struct
from collections.abc import Iterable

from mirror_core.errors import MirrorError

#: what a request is written from: its parts need not be joined into one buffer
Buffer = bytes | bytearray | memoryview


class ProtocolError(MirrorError):
    """A response that does not parse as the request's version says it should."""


class Reader:
    """Reads a response body from its start; each read moves past what it read."""

    __slots__ = ("at", "data")

    def __init__(self, data: memoryview | bytes) -> None:
        self.data = memoryview(data)
        self.at = 0

    def take(self, fmt: str) -> tuple[int, ...]:
        """Fixed-size fields (a ``struct`` format, big-endian)."""
        try:
            values = struct.unpack_from(fmt, self.data, self.at)
        except struct.error as exc:
            raise ProtocolError(f"response ends at byte {self.at} inside a field ({fmt}): {exc}") from None
        self.at += struct.calcsize(fmt)
        return values

    def int8(self) -> int:
        return self.take(">b")[0]

    def int16(self) -> int:
        return self.take(">h")[0]

    def int32(self) -> int:
        return self.take(">i")[0]

    def string(self) -> str | None:
        n = self.int16()
        if n < 0:
            return None
        at = self.at
        try:
            return bytes(self._span(n)).decode()
        except UnicodeDecodeError as exc:
            raise ProtocolError(f"a string of {n} bytes at byte {at} is not UTF-8 ({exc.reason} at its byte "
                                f"{exc.start})") from None

    def blob(self) -> memoryview | None:
        """BYTES / RECORDS: a view into the response, not a copy."""
        n = self.int32()
        return None if n < 0 else self._span(n)

    def count(self, item_size: int = 1) -> int:
        """An array's length (-1, a null array, reads as empty), checked against the bytes left: each item takes at
        least ``item_size`` bytes, so a length no answer can hold is refused before anything loops over it."""
        n = max(self.int32(), 0)
        if n * item_size > len(self.data) - self.at:
            raise ProtocolError(f"an array of {n} items at byte {self.at - 4} does not fit in the {len(self.data)} "
                                "bytes of the response")
        return n

    def skip(self, n: int) -> None:
        self._span(n)

    def _span(self, n: int) -> memoryview:
        if n < 0 or self.at + n > len(self.data):
            raise ProtocolError(f"response of {len(self.data)} bytes ends inside a field of {n} at byte {self.at}")
        self.at += n
        return self.data[self.at - n:self.at]


def int16(v: int) -> bytes:
    return struct.pack(">h", v)


def int32(v: int) -> bytes:
    return struct.pack(">i", v)


def int64(v: int) -> bytes:
    return struct.pack(">q", v)


def string(s: str | None) -> bytes:
    """STRING / NULLABLE_STRING."""
    if s is None:
        return int16(-1)
    raw = s.encode()
    return int16(len(raw)) + raw


def blob(b: bytes | None) -> bytes:
    """BYTES / NULLABLE_BYTES."""
    return int32(-1) if b is None else int32(len(b)) + b


def array(items: Iterable[bytes]) -> bytes:
    parts = list(items)
    return int32(len(parts)) + b"".join(parts)
