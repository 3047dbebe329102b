"""Cycle prevention on the batches data path (identity policy): which source batches are a mirror's copies of the
target's records (replication/mirror_writes.py), the provenance header read from and added to whole batches
(wire/headers.py), and skipped offsets in the offset map."""

from __future__ import annotations

import struct
from typing import Any, cast

import google_crc32c
import pytest

from mirror_core.replication.batch import PartitionState
from mirror_core.replication.batch_path import BatchCopier
from mirror_core.replication.mirror_writes import MirrorWrites, Verdict
from mirror_core.stores.producer_ids import MirrorProducerIds
from mirror_core.wire.headers import header_values, with_hop
from mirror_core.wire.recode import compress, contiguous_copy, decompress, varint
from mirror_core.wire.records import computed_crc, read_varint, record_count

KEY = b"mirror-core.provenance"


def record(delta: int, value: bytes, headers: list[tuple[bytes, bytes]]) -> bytes:
    body = b"\x00" + varint(1) + varint(delta) + varint(-1) + varint(len(value)) + value + varint(len(headers))
    body += b"".join(varint(len(k)) + k + varint(len(v)) + v for k, v in headers)
    return varint(len(body)) + body


def batch(records: list[bytes], codec: int = 0, producer_id: int = 7, base: int = 100) -> bytes:
    tail = struct.pack(">hiqqqhii", codec, len(records) - 1, 1, 2, producer_id, 0, 0, len(records))
    tail += compress(codec, b"".join(records)) if codec else b"".join(records)
    return struct.pack(">qiibI", base, 4 + 1 + 4 + len(tail), 0, 2, google_crc32c.value(tail)) + tail


def values(raw: bytes | bytearray) -> list[bytes]:
    """Each record's value (to show the rest of a record is kept)."""
    codec = struct.unpack_from(">h", raw, 21)[0] & 7
    data = decompress(codec, bytes(raw[61:])) if codec else bytes(raw[61:])
    out, at = [], 0
    for _ in range(record_count(raw)):
        length, body = read_varint(data, at)
        p = read_varint(data, read_varint(data, body + 1)[1])[1]
        p = read_varint(data, p)[1]  # a null key
        size, p = read_varint(data, p)
        out.append(data[p:p + size])
        at = body + length
    return out


@pytest.mark.parametrize("codec", [0, 1, 4])
def test_the_provenance_chain_is_read_and_a_hop_added_to_every_record_of_a_whole_batch(codec: int) -> None:
    raw = batch([record(0, b"a", [(b"x", b"1"), (KEY, b"dc1")]), record(1, b"b", []),
                 record(2, b"c", [(KEY, b"dc3,dc1")])], codec)
    assert header_values(raw, KEY) == [b"dc1", None, b"dc3,dc1"]
    tagged = with_hop(raw, KEY, b"dc2")
    assert header_values(tagged, KEY) == [b"dc1,dc2", b"dc2", b"dc3,dc1,dc2"]
    assert header_values(tagged, b"x") == [b"1", None, None]  # other headers kept
    assert values(tagged) == [b"a", b"b", b"c"] and record_count(tagged) == 3
    assert struct.unpack_from(">I", tagged, 17)[0] == computed_crc(tagged)  # a CRC of its own: the target checks it
    assert contiguous_copy(tagged)[1] == []  # and it reads as a valid batch, offsets unchanged


class Ids:
    """The registry's answers (stores/producer_ids.MirrorProducerIds reads them from the cluster)."""

    def __init__(self, sources: dict[int, str]) -> None:
        self.sources, self.asked = sources, 0

    def source_of(self, producer_id: int) -> str | None:
        self.asked += 1
        return self.sources.get(producer_id)

    def forget(self, producer_id: int) -> None:
        """(the fake keeps no cache of producer ids found unrecorded)"""


def writes(sources: dict[int, str]) -> tuple[MirrorWrites, Ids]:
    ids = Ids(sources)
    return MirrorWrites(cast(MirrorProducerIds, ids), "dc1"), ids


def test_a_batch_a_mirror_wrote_copying_from_the_target_is_skipped_and_others_copied() -> None:
    w, ids = writes({5: "dc1", 6: "dc3"})
    plain = [record(0, b"v", [])]
    assert w.verdict(batch(plain, producer_id=5)) is Verdict.SKIP  # dc1->dc2's copy, read by dc2->dc1
    assert w.verdict(batch(plain, producer_id=6)) is Verdict.COPY  # dc3->dc2's copy: not from dc1
    assert w.verdict(batch(plain, producer_id=-1)) is Verdict.COPY  # no producer id: never a mirror's
    assert w.verdict(batch(plain, producer_id=9)) is Verdict.COPY  # an application's producer
    asked = ids.asked
    assert w.verdict(batch(plain, producer_id=9)) is Verdict.COPY and ids.asked == asked  # its verdict is kept
    assert w.skipped == 1


def test_a_records_path_mirrors_batches_are_judged_by_their_records_provenance() -> None:
    w, _ = writes({})
    assert w.verdict(batch([record(0, b"a", [(KEY, b"dc1")]), record(1, b"b", [(KEY, b"dc3,dc1")])],
                           producer_id=11)) is Verdict.SKIP
    assert w.verdict(batch([record(0, b"c", [(KEY, b"dc3")])], producer_id=11)) is Verdict.COPY
    mixed = batch([record(0, b"d", [(KEY, b"dc1")]), record(1, b"e", [(KEY, b"dc3")])], producer_id=11)
    assert w.verdict(mixed) is Verdict.MIXED


def test_a_transactional_id_taken_over_from_the_records_path_is_judged_by_the_registry_again() -> None:
    """Found in review: an exactly-once slot's transactional id keeps its producer id when the flow moves from the
    records path (every record tagged) to the batches path (untagged, the id recorded first): the reverse flow, which
    knew the id as a tagging producer's, would have copied the untagged batches back."""
    w, ids = writes({})
    assert w.verdict(batch([record(0, b"a", [(KEY, b"dc1")])], producer_id=21)) is Verdict.SKIP  # on records
    ids.sources[21] = "dc1"  # the same transactional id on batches: its producer id recorded before its batches
    assert w.verdict(batch([record(0, b"b", [])], producer_id=21)) is Verdict.SKIP
    assert w.verdict(batch([record(0, b"c", [])], producer_id=22)) is Verdict.COPY  # an application's: copied
    assert w.skipped == 2
    # a tagging producer's untagged batch whose id is not recorded is copied, and the id stays a tagging one's
    assert w.verdict(batch([record(0, b"d", [(KEY, b"dc1")])], producer_id=23)) is Verdict.SKIP
    assert w.verdict(batch([record(0, b"e", [])], producer_id=23)) is Verdict.COPY
    assert w.verdict(batch([record(0, b"f", [(KEY, b"dc1")])], producer_id=23)) is Verdict.SKIP


def test_skipped_offsets_translate_to_where_the_next_copy_lands() -> None:
    st = PartitionState("t", 0, "t", 100, False)
    first = BatchCopier._batch(st, memoryview(batch([record(0, b"a", []), record(1, b"b", [])])), 100)
    assert first is not None
    b = first[1]
    b.t_first, b.t_last, b.pending = 500, 501, 0
    st.map_landed(b)
    skip = st.pass_over(102, 110)  # a mirror's batch at 102-109, not copied
    assert skip.landed and skip.count == 0 and st.pending[-1] is skip
    st.map_landed(skip)
    # The run of 100-101 must not extend over 102-109: a group at 105 reads next what lands at 502.
    assert st.syncs == [(100, 500), (110, 502)]
    assert cast(Any, st).t_next == 502
