"""Closed runs of the offset map folded into a pair of compressed bitmaps (issue 62).

A compacted or transactional source makes a new run every few offsets, for as long as the topic lives
(its log start never moves, so pruning never drops them): 16 bytes a run in the run arrays. A
:class:`Block` holds the records of many such runs instead: the copied source offsets and the target
offsets they landed at, each a roaring bitmap relative to the block's start, paired in order — the
k-th copied source offset landed at the k-th target offset. An alternating pattern costs about a bit
per source offset, a run of a hundred records a few bytes, and translating is a rank and a select
(no scan of history).

A block replaces runs only when every one of them holds at least one record and their targets ascend
(what a mirror writes); :mod:`offset_map` keeps anything else as runs, so it translates exactly as
the runs it replaced (tests/unit/test_offset_map_compact.py checks that against the runs alone).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from pyroaring import BitMap

from mirror_core.stores.dense_bits import DENSE_SPAN, DenseBits

_ALL = 1 << 32  # the end of every relative range: pyroaring's values are 32-bit
_BLOCK = struct.Struct(">qBii")  # records, source kind (0 roaring, 1 dense bits), source bytes, target bytes
Sources = BitMap | DenseBits


@dataclass(frozen=True, slots=True)
class Folding:
    """When runs fold into blocks (tests make them small to fold short histories)."""

    #: Unfolded runs a partition may hold before they are folded (16 bytes each meanwhile).
    at: int = 32
    #: A new block needs this many consecutive foldable runs (a block costs a few hundred bytes).
    min_runs: int = 8
    #: A run this long stays a run: a bitmap holds a run as one interval per 65,536 offsets.
    long_run: int = 1 << 16
    #: Offsets a block spans on either side: its snapshot (both bitmaps, 2 x 128 KiB at most) fits a chunk.
    span: int = 1 << 20


class Block:
    """Records of folded runs. ``tgt`` None: the targets are ``0..n-1`` (the usual case, stored as nothing)."""

    __slots__ = ("n", "src", "tgt")

    def __init__(self, src: Sources | None = None, tgt: BitMap | None = None) -> None:
        self.src: Sources = src if src is not None else BitMap()
        self.tgt = tgt
        self.n = len(self.src)

    def next_target(self, rel: int) -> int | None:
        """Relative target of the first record at or after relative source ``rel``; None: past the block."""
        r = self.src.rank(rel - 1) if rel > 0 else 0
        if r >= self.n:
            return None
        return r if self.tgt is None else self.tgt[r]

    def next_source(self, rel_target: int) -> int | None:
        """The inverse: relative source of the first record copied at or after ``rel_target``."""
        r = 0 if rel_target <= 0 else rel_target if self.tgt is None else self.tgt.rank(rel_target - 1)
        return self.src[r] if r < self.n else None

    def last(self) -> tuple[int, int]:
        """Relative source and target of the last record (the block is not empty)."""
        return self.src.max(), self.n - 1 if self.tgt is None else self.tgt.max()

    def append(self, rel_source: int, rel_target: int, count: int) -> None:
        """``count`` records from ``rel_source`` landed from ``rel_target`` on (after every record held)."""
        if isinstance(self.src, DenseBits) and rel_source + count > DENSE_SPAN:
            self.src = self.src.to_bitmap()
        self.src.add_range(rel_source, rel_source + count)
        if self.tgt is None and rel_target != self.n:
            self.tgt = BitMap()
            self.tgt.add_range(0, self.n)
        if self.tgt is not None:
            self.tgt.add_range(rel_target, rel_target + count)
        self.n += count

    def keep_below(self, rel: int) -> None:
        """Forget the records at or after relative source ``rel`` (a replay supersedes them)."""
        self.src.remove_range(rel, _ALL)
        n = len(self.src)
        if self.tgt is not None and n < self.n:
            self.tgt.remove_range(self.tgt[n], _ALL)
        self.n = n

    def drop_below(self, rel: int) -> int | None:
        """Forget the records below relative source ``rel`` and make ``rel`` the block's start; returns
        the relative target its first remaining record had (the new target start), None if none remains."""
        r = self.src.rank(rel - 1)
        if r >= self.n:
            return None
        first = r if self.tgt is None else self.tgt[r]
        self.src = self.src.shift(-rel)  # values below zero fall off
        if self.tgt is not None:
            self.tgt = self.tgt.shift(-first)
        self.n -= r
        return first

    def optimize(self) -> None:
        """Run containers where they are smaller (a few long runs), spare capacity given back; a small
        block's sources as plain bits where they are smaller than roaring's containers."""
        for bitmap in (self.src, self.tgt):
            if isinstance(bitmap, BitMap):
                bitmap.run_optimize()
                bitmap.shrink_to_fit()
        if isinstance(self.src, BitMap) and self.n and self.src.max() < DENSE_SPAN:
            stats = self.src.get_statistics()
            held = stats["n_bytes_array_containers"] + stats["n_bytes_run_containers"] + \
                stats["n_bytes_bitset_containers"]
            if (self.src.max() >> 3) + 1 < held:
                self.src = DenseBits.of(self.src)

    def runs(self, source: int, target: int) -> list[tuple[int, int]]:
        """The runs this block stands for, starting at ``(source, target)`` (for tools that want runs)."""
        out = [(source, target)]
        src = self.src.to_array()
        tgt = range(self.n) if self.tgt is None else self.tgt.to_array()
        prev_s, prev_t = -2, -2
        for s, t in zip(src, tgt, strict=True):
            if s != prev_s + 1 or t != prev_t + 1:
                out.append((source + s, target + t))
            prev_s, prev_t = s, t
        if len(out) > 1 and out[1][0] == source:
            del out[0]  # the first record is at the start itself
        return out

    def encode(self) -> bytes:
        tgt = b"" if self.tgt is None else self.tgt.serialize()
        src = self.src.serialize()
        kind = 1 if isinstance(self.src, DenseBits) else 0
        return _BLOCK.pack(self.n, kind, len(src), len(tgt) if self.tgt is not None else -1) + src + tgt

    @classmethod
    def decode(cls, raw: memoryview | bytes, pos: int) -> tuple[Block, int]:
        """The block at ``pos`` of ``raw`` and where the next item begins."""
        n, kind, len_src, len_tgt = _BLOCK.unpack_from(raw, pos)
        pos += _BLOCK.size
        if kind not in (0, 1):
            raise ValueError(f"an offset-map block of an unknown kind ({kind})")
        body = bytes(raw[pos:pos + len_src])
        src: Sources = DenseBits(body) if kind else BitMap.deserialize(body)
        pos += len_src
        tgt = None
        if len_tgt >= 0:
            tgt = BitMap.deserialize(bytes(raw[pos:pos + len_tgt]))
            pos += len_tgt
        block = cls(src, tgt)
        if block.n != n or (tgt is not None and len(tgt) != n):
            raise ValueError(f"an offset-map block of {n} records holds {len(src)} source offsets")
        return block, pos

    def nbytes(self) -> int:
        """Bytes of its snapshot form (what it costs stored; in memory it costs about the same)."""
        return len(self.encode())
