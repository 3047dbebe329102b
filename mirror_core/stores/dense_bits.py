"""A set of small offsets as a plain bit array: a bit per offset of its span, nothing more.

Roaring's smallest dense container costs 8 KiB (an array one 2 bytes a value), so a gappy partition whose
block spans a few thousand offsets paid a byte or more per offset (measured: 1.2 bytes at 5,000 offsets
per partition). A block that small holds its copied source offsets here instead (:class:`Block` chooses
whichever is smaller); rank is a popcount of a prefix (in C: ``int.bit_count``), select a binary search
of ranks. Offsets are only ever added after the largest one (a block appends runs in order).
"""

from __future__ import annotations

from array import array

from pyroaring import BitMap

#: The largest span held this way (8 KiB of bits): past it, roaring's containers are as dense.
DENSE_SPAN = 1 << 16


class DenseBits:
    """Bit ``i`` of byte ``i >> 3`` (least significant first) is offset ``i``."""

    __slots__ = ("_directory", "bits", "count")

    def __init__(self, bits: bytes | bytearray = b"") -> None:
        self.bits = bytearray(bits)
        self.count = int.from_bytes(self.bits, "little").bit_count()
        #: Offsets below each 512-byte stretch, so a rank counts at most 512 bytes (built when first asked,
        #: dropped by every change: 4 bytes per 4,096 offsets).
        self._directory: array[int] | None = None

    @classmethod
    def of(cls, bitmap: BitMap) -> DenseBits:
        out = cls()
        if len(bitmap):
            out.bits = bytearray((bitmap.max() >> 3) + 1)
            for v in bitmap:
                out.bits[v >> 3] |= 1 << (v & 7)
            out.count = len(bitmap)
        return out

    def to_bitmap(self) -> BitMap:
        return BitMap(self.to_array())

    def __len__(self) -> int:
        return self.count

    def rank(self, value: int) -> int:
        """How many offsets are at or below ``value``."""
        if value < 0:
            return 0
        end = value + 1
        full = end >> 3
        directory = self._directory if self._directory is not None else self._build_directory()
        stretch = min(full >> 9, len(directory) - 1)
        count = directory[stretch] + int.from_bytes(self.bits[stretch << 9:full], "little").bit_count()
        if end & 7 and full < len(self.bits):
            count += (self.bits[full] & ((1 << (end & 7)) - 1)).bit_count()
        return count

    def _build_directory(self) -> array[int]:
        directory, total = array("I", [0]), 0
        for start in range(0, len(self.bits) - 511, 512):
            total += int.from_bytes(self.bits[start:start + 512], "little").bit_count()
            directory.append(total)
        self._directory = directory
        return directory

    def __getitem__(self, index: int) -> int:
        """The ``index``-th offset (select)."""
        if not 0 <= index < self.count:
            raise IndexError(index)
        lo, hi = 0, 8 * len(self.bits) - 1
        while lo < hi:
            mid = (lo + hi) // 2
            if self.rank(mid) > index:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def max(self) -> int:
        return int.from_bytes(self.bits, "little").bit_length() - 1

    def add_range(self, start: int, end: int) -> None:
        """Offsets ``start..end-1``, all above the largest held."""
        self._directory = None
        need = (end + 7) >> 3
        if len(self.bits) < need:
            self.bits.extend(bytes(need - len(self.bits)))
        for i in range(start, min(end, (start + 7) & ~7)):
            self.bits[i >> 3] |= 1 << (i & 7)
        lo, hi = (start + 7) >> 3, end >> 3
        if lo < hi:
            self.bits[lo:hi] = b"\xff" * (hi - lo)
        for i in range(max(start, hi << 3), end):
            self.bits[i >> 3] |= 1 << (i & 7)
        self.count += end - start

    def remove_range(self, start: int, _end: int) -> None:
        """Every offset from ``start`` on."""
        self._directory = None
        value = int.from_bytes(self.bits, "little") & ((1 << start) - 1)
        self.bits = bytearray(value.to_bytes(len(self.bits), "little").rstrip(b"\x00"))
        self.count = value.bit_count()

    def shift(self, offset: int) -> DenseBits:
        """Every offset moved by ``offset`` (negative: those below zero fall off)."""
        value = int.from_bytes(self.bits, "little")
        value = value << offset if offset >= 0 else value >> -offset
        return DenseBits(value.to_bytes((value.bit_length() + 7) >> 3, "little"))

    def to_array(self) -> array[int]:
        return array("I", (i << 3 | k for i, byte in enumerate(self.bits) if byte for k in range(8) if byte >> k & 1))

    def serialize(self) -> bytes:
        return bytes(self.bits)

    def nbytes(self) -> int:
        return len(self.bits) + (4 * len(self._directory) if self._directory is not None else 0)
