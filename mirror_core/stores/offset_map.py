"""The exact source -> target offset map of replicated partitions.

Stored as *runs*: an entry ``(source_offset, target_offset)`` is recorded whenever
``target - source`` changes (compaction gaps, transaction markers, filtered records, replays).
Between entries the mapping is linear, so every replicated source offset has an exact target
offset. Invariant (owned here): a later entry for a partition supersedes every earlier entry at or
after its source offset — a replay after a crash re-copies records at new target offsets, and a
consumer must resume in the newest copy (resuming in an older copy would re-read the newer one).

Positions are "next offset to read" on both sides: translating a consumer group's committed source
offset gives the target offset from which it reads exactly the records it had not yet processed.

Bounded (issue 18): :meth:`PartitionMap.prune` drops the runs wholly below the source partition's log
start (records no consumer can read any more); the run containing the log start is kept, so every
offset still readable on the source translates exactly. A position below the pruned horizon gets a
typed "beyond retention" result, never a guess. Runs are held in typed arrays (16 bytes a run).

Compact (issue 62): a topic kept forever (compacted, transactional) never prunes, and makes a run every
few offsets. Closed runs therefore fold into blocks (stores/offset_blocks.py: the copied source offsets
and their targets as compressed bitmaps, about a bit per gappy source offset); a partition's map is a
sequence of *pieces* — runs and blocks — with the same translation as the runs they replaced. The last
piece is always a run (the open one that new records extend).
"""

from __future__ import annotations

import bisect
from array import array
from dataclasses import dataclass

from mirror_core.stores.offset_blocks import Block, Folding


@dataclass(slots=True)  # not frozen: a frozen dataclass takes four times as long to build (200,000 per translate)
class Translation:
    source_offset: int
    target_offset: int | None
    exact: bool
    #: Why the result is not exact (or missing), for operators.
    note: str = ""
    #: The position is below the pruned horizon: the records after it are gone from the source and
    #: their runs from the map; no exact answer exists (``target_offset`` is None).
    beyond_retention: bool = False


def beyond_retention(source_offset: int, horizon: int) -> Translation:
    return Translation(source_offset, None, False,
                       f"beyond retention: the offset map starts at {horizon} (the source's log start when "
                       "it was pruned); the records after this position are gone from the source", True)


class PartitionMap:
    """Pieces of one source partition: ``sources``/``targets`` hold each piece's start (for a run, the
    run itself); ``blocks`` the pieces that are blocks, by their source start. A block's records end
    before the next piece, whose target is the answer for positions after its last record."""

    __slots__ = ("_settled", "blocks", "folding", "horizon", "sources", "targets")
    default_folding = Folding()

    def __init__(self, folding: Folding | None = None) -> None:
        self.sources = array("q")
        self.targets = array("q")
        self.blocks: dict[int, Block] = {}
        #: Source offsets below this were pruned (0: nothing pruned).
        self.horizon = 0
        self.folding = folding or self.default_folding
        self._settled = 0  # pieces before this one were considered for folding

    def add(self, source: int, target: int) -> None:
        """Record a run starting at ``source`` -> ``target`` (supersedes entries at or after it)."""
        sources, targets = self.sources, self.targets
        cut = bisect.bisect_left(sources, source)
        if cut < len(sources):
            if self.blocks:
                for s in sources[cut:]:
                    self.blocks.pop(s, None)
            del sources[cut:]
            del targets[cut:]
            self._settled = min(self._settled, max(cut - 1, 0))
            if cut and sources[-1] in self.blocks and not self._cut_block(source, target):
                return
        if sources and targets[-1] - sources[-1] == target - source and sources[-1] not in self.blocks:
            return  # same run continues: nothing new to record
        sources.append(source)
        targets.append(target)
        if len(sources) - self._settled > self.folding.at:
            self._fold()

    def _cut_block(self, source: int, target: int) -> bool:
        """The last piece is a block and ``(source, target)`` supersedes its records from ``source`` on.
        Returns whether the run still has to be appended."""
        start, base = self.sources[-1], self.targets[-1]
        block = self.blocks[start]
        rel, rel_target = source - start, target - base
        block.keep_below(rel)
        if block.n == 0:
            del self.blocks[start]  # nothing left: the piece is a plain run again
            return True
        last_s, last_t = block.last()
        # As runs, the last run would go on linearly up to the new one: the block does the same.
        end = min(rel, rel_target - (last_t - last_s))
        if rel_target <= last_t or rel_target - rel == last_t - last_s or end - last_s > self.folding.long_run:
            # Targets going back (a recreated remote topic), the new run continuing the block's last one, or
            # a long stretch to fill (none of which a mirror writes, short of a replay that starts inside a
            # source gap): as runs, exactly.
            self._unfold(len(self.sources) - 1)
            self.add(source, target)
            return False
        if end > last_s + 1:
            block.append(last_s + 1, last_t + 1, end - last_s - 1)
        return True

    def _unfold(self, index: int) -> None:
        """Put the block at piece ``index`` back as runs."""
        start = self.sources[index]
        runs = self.blocks.pop(start).runs(start, self.targets[index])
        self.sources[index:index + 1] = array("q", (s for s, _ in runs))
        self.targets[index:index + 1] = array("q", (t for _, t in runs))
        self._settled = min(self._settled, index)

    def compact(self) -> None:
        """Fold every closed run that can be (after loading runs written by an older version)."""
        self._settled = 0
        self._fold()

    def _fold(self) -> None:
        """Fold the closed runs after the settled pieces into blocks (the open last run stays a run).

        A run folds when it holds at least one record and the next piece's target is above its own
        (so records and targets ascend together); a long run stays a run (cheaper as one).
        """
        sources, targets, blocks, f = self.sources, self.targets, self.blocks, self.folding
        first, end = self._settled, len(sources) - 1
        out_s: list[int] = []
        out_t: list[int] = []
        touched: dict[int, Block] = {}

        def foldable(k: int) -> bool:
            step = targets[k + 1] - targets[k]
            return step >= 1 and min(sources[k + 1] - sources[k], step) < f.long_run

        block: Block | None = blocks.get(sources[first - 1]) if first > 0 else None
        b_s, b_t = (sources[first - 1], targets[first - 1]) if first > 0 else (0, 0)
        k = first
        while k < end:
            s, t = sources[k], targets[k]
            if s in blocks:
                block, b_s, b_t = blocks[s], s, t
                out_s.append(s)
                out_t.append(t)
                k += 1
                continue
            if not foldable(k):
                block = None
                out_s.append(s)
                out_t.append(t)
                k += 1
                continue
            count = min(sources[k + 1] - s, targets[k + 1] - t)
            if block is not None and s + count - b_s <= f.span and t + count - b_t <= f.span:
                block.append(s - b_s, t - b_t, count)
                touched[id(block)] = block
                k += 1
                continue
            j = k
            while j < end and j - k < f.min_runs and foldable(j):
                j += 1
            if j - k < f.min_runs:
                if j == end:
                    break  # a short stretch at the end may grow: decided at the next fold
                out_s.extend(sources[k:j])
                out_t.extend(targets[k:j])
                block, k = None, j
                continue
            block, b_s, b_t = Block(), s, t
            blocks[s] = block
            block.append(0, 0, count)
            touched[id(block)] = block
            out_s.append(s)
            out_t.append(t)
            k += 1
        if k > first:
            sources[first:k] = array("q", out_s)
            targets[first:k] = array("q", out_t)
        self._settled = first + len(out_s)
        for b in touched.values():
            b.optimize()

    def __len__(self) -> int:
        """Pieces (runs and blocks)."""
        return len(self.sources)

    def runs(self) -> list[tuple[int, int]]:
        """Every run, blocks expanded (tools that want runs; costs what the runs would)."""
        out: list[tuple[int, int]] = []
        for s, t in zip(self.sources, self.targets, strict=True):
            block = self.blocks.get(s)
            out.extend(block.runs(s, t) if block is not None else [(s, t)])
        return out

    def nbytes(self) -> int:
        """Bytes the map holds (its snapshot form: runs 16 bytes each, blocks their bitmaps)."""
        return 16 * len(self.sources) + sum(b.nbytes() for b in self.blocks.values())

    def prune(self, log_start: int) -> int:
        """Drop what no offset at or after ``log_start`` needs; returns how many pieces were dropped or cut.

        The run containing ``log_start`` stays (it translates the log start itself), so the horizon
        is that run's first offset; a block containing it loses its records below it and starts there.
        """
        keep = bisect.bisect_right(self.sources, log_start) - 1
        if keep < 0:
            return 0
        if keep:
            for s in self.sources[:keep]:
                self.blocks.pop(s, None)
            del self.sources[:keep]
            del self.targets[:keep]
            self._settled = max(0, self._settled - keep)
        start = self.sources[0]
        block = self.blocks.get(start)
        if block is not None and log_start > start:
            del self.blocks[start]
            first = block.drop_below(log_start - start)
            self.sources[0] = log_start
            if first is None:  # no record left in it: the next piece's first record is next
                self.targets[0] = self.targets[1]
            else:
                self.targets[0] += first
                self.blocks[log_start] = block
            keep += 1
        if keep:
            self.horizon = self.sources[0]
        return keep

    def translate(self, source_offset: int, replicated_next: int | None = None,
                  target_end: int | None = None) -> Translation:
        """Target offset of the next record after ``source_offset - 1``.

        ``replicated_next`` is the partition's replication progress (next source offset to copy);
        offsets at or beyond it are not on the target yet. ``target_end`` (the remote partition's
        end offset) caps the result: a position past the log end would make a consumer reset.
        """
        result = self._translate(source_offset, replicated_next)
        if target_end is not None and result.target_offset is not None and result.target_offset > target_end:
            result.target_offset = target_end
        return result

    def _translate(self, source_offset: int, replicated_next: int | None) -> Translation:
        if self.horizon and source_offset < self.horizon:
            return beyond_retention(source_offset, self.horizon)
        if not self.sources or source_offset < self.sources[0]:
            return Translation(source_offset, None, False, "before the offset map (or not replicated)")
        i = bisect.bisect_right(self.sources, source_offset) - 1
        if self.blocks:
            block = self.blocks.get(self.sources[i])
            if block is not None:  # never the last piece
                rel = block.next_target(source_offset - self.sources[i])
                return Translation(source_offset, self.targets[i + 1] if rel is None else self.targets[i] + rel,
                                   True)
        target = self.targets[i] + (source_offset - self.sources[i])
        if i + 1 < len(self.sources):
            # Inside a gap before the next run, the next record to read starts that run.
            target = min(target, self.targets[i + 1])
        elif replicated_next is not None and source_offset > replicated_next:
            end = self.targets[i] + (replicated_next - self.sources[i])
            return Translation(source_offset, end, False,
                               f"{source_offset - replicated_next} records not replicated yet")
        return Translation(source_offset, target, True)

    def source_of(self, target_offset: int) -> int | None:
        """The inverse: the source position a target position corresponds to (for failback).

        A consumer at ``target_offset`` on the target has processed the copies of every source
        record before the returned offset; None when the position is before the map.
        """
        if not self.targets or target_offset < self.targets[0]:
            return None
        i = bisect.bisect_right(self.targets, target_offset) - 1
        block = self.blocks.get(self.sources[i]) if self.blocks else None
        if block is not None:
            rel = block.next_source(target_offset - self.targets[i])
            return self.sources[i + 1] if rel is None else self.sources[i] + rel
        source = self.sources[i] + (target_offset - self.targets[i])
        if i + 1 < len(self.sources):
            source = min(source, self.sources[i + 1])
        return source


class OffsetMap:
    """Runs for every replicated partition of one flow."""

    def __init__(self) -> None:
        self.partitions: dict[tuple[str, int], PartitionMap] = {}

    def add(self, topic: str, partition: int, source: int, target: int) -> None:
        self.partitions.setdefault((topic, partition), PartitionMap()).add(source, target)

    def translate(self, topic: str, partition: int, source_offset: int, replicated_next: int | None = None,
                  target_end: int | None = None) -> Translation:
        pm = self.partitions.get((topic, partition))
        if pm is None:
            return Translation(source_offset, None, False, "no offset map for this partition")
        return pm.translate(source_offset, replicated_next, target_end)

    def entries(self) -> int:
        """Pieces (runs and blocks) of every partition."""
        return sum(len(p) for p in self.partitions.values())

    def nbytes(self) -> int:
        return sum(p.nbytes() for p in self.partitions.values())
