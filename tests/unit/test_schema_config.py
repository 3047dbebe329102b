"""<alias>.schema.registry.*: parsed, the credentials kept secret; schema.ids = translate needs both registries and
runs the records path; preserve refused for now. The translation between reading and producing, on fake records."""

from __future__ import annotations

import pytest

from mirror_core.config.errors import ConfigError
from mirror_core.config.loader import parse_text
from mirror_core.redaction import scrub

BASE = "clusters = dc1, dc2\ndc1.bootstrap.servers = localhost:1\ndc2.bootstrap.servers = localhost:2\n"


def test_registry_settings_and_schema_ids() -> None:
    c = parse_text(BASE + "dc1.schema.registry.url = http://registry:8081\n"
                   "dc1.schema.registry.basic.auth.user.info = mirror:registry-pass-1\n"
                   "dc1->dc2.enabled = true\n")
    dc1 = c.clusters["dc1"]
    assert dict(dc1.schema_registry) == {"url": "http://registry:8081",
                                         "basic.auth.user.info": "mirror:registry-pass-1"}
    assert "registry-pass-1" not in repr(dc1) and "registry-pass-1" not in scrub("auth mirror:registry-pass-1")
    assert c.flows[0].schema_ids == "off"
    # translate needs both registries, named in one line; preserve is refused.
    with pytest.raises(ConfigError) as refused:
        parse_text(BASE + "dc1.schema.registry.url = http://r:1\ndc1->dc2.enabled = true\n"
                   "dc1->dc2.schema.ids = translate\n")
    assert "dc2.schema.registry.url" in str(refused.value) and "dc1.schema" not in str(refused.value)
    assert "\n" not in str(refused.value)
    with pytest.raises(ConfigError) as refused:
        parse_text(BASE + "dc1->dc2.enabled = true\ndc1->dc2.schema.ids = preserve\n")
    assert "schema.ids = preserve" in str(refused.value)
    both = parse_text(BASE + "dc1.schema.registry.url = http://r:1\ndc2.schema.registry.url = http://r:2\n"
                      "dc1->dc2.enabled = true\ndc1->dc2.schema.ids = translate\n").flows[0]
    assert (both.schema_ids, both.data_path, both.data_path_reason) == (
        "translate", "records", "auto (the default): records, because schema.ids = translate")


class Rec:
    """As much of confluent_kafka.Message as the translation reads and writes."""

    def __init__(self, offset: int, key: bytes | None, value: bytes | None) -> None:
        self._offset, self._key, self._value = offset, key, value

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def set_key(self, key: bytes | None) -> None:
        self._key = key

    def set_value(self, value: bytes | None) -> None:
        self._value = value

    def offset(self) -> int:
        return self._offset

    def topic(self) -> str:
        return "orders"

    def partition(self) -> int:
        return 2


def framed(schema_id: int, payload: bytes = b"p") -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + payload


def test_a_run_is_rewritten_up_to_an_unknown_id_which_pauses_its_partition_after_one_more_reading() -> None:
    from mirror_core.replication.schema_ids import REFRESH_S, SchemaIdTranslation

    config = parse_text(BASE + "dc1.schema.registry.url = http://r:1\ndc2.schema.registry.url = http://r:2\n"
                        "dc1->dc2.enabled = true\ndc1->dc2.schema.ids = translate\n")
    maps = [{1: 101}, {1: 101, 2: 102}, {1: 101, 2: 102}]
    now = [0.0]
    t = SchemaIdTranslation("dc1->dc2", config.clusters["dc1"], config.clusters["dc2"], read_map=lambda: maps.pop(0),
                            clock=lambda: now[0])
    from mirror_core.replication.batch import PartitionState

    st = PartitionState("orders", 2, "dc1.orders", 0, False, None)
    produced: list[list[tuple[bytes | None, bytes | None]]] = []
    paused: list[str] = []
    run = t.wrap(lambda st, run: produced.append([(m.key(), m.value()) for m in run]),
                 lambda st, why: paused.append(why))
    # Read at the first framed record; unframed keys and values pass as they are.
    run(st, [Rec(0, b"k", framed(1)), Rec(1, None, b"plain")])  # type: ignore[list-item]
    assert produced == [[(b"k", framed(101)), (None, b"plain")]] and not paused
    # Id 2 appeared on the source and was synced: read again, taken.
    now[0] += REFRESH_S
    run(st, [Rec(2, framed(2, b"key"), framed(1))])  # type: ignore[list-item]
    assert produced[-1] == [(framed(102, b"key"), framed(101))] and not paused
    # Id 3 is unknown right after a reading: the record before it goes, then the partition pauses at it.
    now[0] += 1
    run(st, [Rec(3, None, framed(2)), Rec(4, None, framed(3)), Rec(5, None, framed(1))])  # type: ignore[list-item]
    assert produced[-1] == [(None, framed(102))] and len(paused) == 1
    assert "orders[2] offset 4 names schema id 3" in paused[0] and "mirror-core partitions resume" in paused[0]
    assert len(maps) == 1  # no reading within REFRESH_S of the last


def test_a_partition_paused_at_an_unknown_id_goes_on_by_itself_once_the_id_maps() -> None:
    from mirror_core.replication.batch import PartitionMode, PartitionState
    from mirror_core.replication.schema_ids import RETRY_S, SchemaIdTranslation

    config = parse_text(BASE + "dc1.schema.registry.url = http://r:1\ndc2.schema.registry.url = http://r:2\n"
                        "dc1->dc2.enabled = true\ndc1->dc2.schema.ids = translate\n")
    maps = [{1: 101}, {1: 101}, {1: 101}, {1: 101, 3: 103}]
    now = [0.0]
    t = SchemaIdTranslation("dc1->dc2", config.clusters["dc1"], config.clusters["dc2"], read_map=lambda: maps.pop(0),
                            clock=lambda: now[0])
    st = PartitionState("orders", 2, "dc1.orders", 3, False, None)  # type: ignore[arg-type]
    states = {("orders", 2): st}

    class Acks:
        unpaused: list[int] = []

        def unpause(self, s: PartitionState, to: int) -> None:
            assert s is st
            s.mode, s.paused_reason = PartitionMode.COPYING, None
            self.unpaused.append(to)

    def pause(s: PartitionState, why: str) -> None:
        s.mode, s.paused_reason = PartitionMode.PAUSED, why

    acks = Acks()
    run = t.wrap(lambda s, run: None, pause)
    run(st, [Rec(3, None, framed(1)), Rec(4, None, framed(3))])  # type: ignore[list-item]
    assert st.mode is PartitionMode.PAUSED and "within 30 s once the id maps" in (st.paused_reason or "")
    st.acked = 4  # the record before the unknown id landed
    t.retry_paused(states, acks, lambda s: False)
    assert acks.unpaused == [] and len(maps) == 3  # not before RETRY_S
    now[0] += RETRY_S
    t.retry_paused(states, acks, lambda s: False)
    assert acks.unpaused == [] and len(maps) == 2  # read again: still unknown, still paused
    now[0] += RETRY_S
    t.retry_paused(states, acks, lambda s: False)  # (the map of this reading still lacks it)
    now[0] += RETRY_S
    t.retry_paused(states, acks, lambda s: False)
    assert acks.unpaused == [4] and st.mode is PartitionMode.COPYING and not maps
    now[0] += RETRY_S
    t.retry_paused(states, acks, lambda s: False)  # nothing waits: no more readings
    assert acks.unpaused == [4]


def test_a_partition_resumed_by_an_operator_is_no_longer_retried() -> None:
    from mirror_core.replication.batch import PartitionMode, PartitionState
    from mirror_core.replication.schema_ids import RETRY_S, SchemaIdTranslation

    config = parse_text(BASE + "dc1.schema.registry.url = http://r:1\ndc2.schema.registry.url = http://r:2\n"
                        "dc1->dc2.enabled = true\ndc1->dc2.schema.ids = translate\n")
    reads: list[int] = []
    now = [0.0]
    t = SchemaIdTranslation("dc1->dc2", config.clusters["dc1"], config.clusters["dc2"],
                            read_map=lambda: reads.append(1) or {1: 101}, clock=lambda: now[0])
    st = PartitionState("orders", 2, "dc1.orders", 3, False, None)  # type: ignore[arg-type]

    def pause(s: PartitionState, why: str) -> None:
        s.mode, s.paused_reason = PartitionMode.PAUSED, why

    t.wrap(lambda s, run: None, pause)(st, [Rec(3, None, framed(7))])  # type: ignore[list-item]
    st.mode, st.paused_reason = PartitionMode.COPYING, None  # an operator's resume (or skip) since
    now[0] += RETRY_S
    t.retry_paused({("orders", 2): st}, None, lambda s: False)  # type: ignore[arg-type]
    now[0] += RETRY_S
    before = len(reads)
    t.retry_paused({("orders", 2): st}, None, lambda s: False)  # type: ignore[arg-type]
    assert len(reads) == before, "nothing waits: the registries are not read again"


def test_a_new_partition_paused_at_its_first_record_goes_on_there_once_nothing_is_in_flight_or_held() -> None:
    from mirror_core.replication.batch import PartitionMode, PartitionState
    from mirror_core.replication.schema_ids import RETRY_S, SchemaIdTranslation

    config = parse_text(BASE + "dc1.schema.registry.url = http://r:1\ndc2.schema.registry.url = http://r:2\n"
                        "dc1->dc2.enabled = true\ndc1->dc2.schema.ids = translate\n")
    now = [0.0]
    t = SchemaIdTranslation("dc1->dc2", config.clusters["dc1"], config.clusters["dc2"], read_map=lambda: {3: 103},
                            clock=lambda: now[0])
    t._read_at = 0.0  # (as if read just before: the first record's id 3 was unknown then)
    t.ids = {}
    st = PartitionState("orders", 2, "dc1.orders", None, False, None)  # a new flow: no progress yet
    unpaused: list[int] = []

    class Acks:
        def unpause(self, s: PartitionState, to: int) -> None:
            s.mode, s.paused_reason = PartitionMode.COPYING, None
            unpaused.append(to)

    def pause(s: PartitionState, why: str) -> None:
        s.mode, s.paused_reason = PartitionMode.PAUSED, why

    t.wrap(lambda s, run: None, pause)(st, [Rec(40, None, framed(3))])  # type: ignore[list-item]
    assert st.mode is PartitionMode.PAUSED and st.acked is None
    now[0] += RETRY_S
    st.pending.append(object())  # type: ignore[arg-type]  # something of it still in flight
    t.retry_paused({("orders", 2): st}, Acks(), lambda s: False)  # type: ignore[arg-type]
    assert unpaused == []
    st.pending.clear()
    now[0] += RETRY_S
    t.retry_paused({("orders", 2): st}, Acks(), lambda s: True)  # type: ignore[arg-type]  # an operator's pause
    assert unpaused == []
    now[0] += RETRY_S
    t.retry_paused({("orders", 2): st}, Acks(), lambda s: False)  # type: ignore[arg-type]
    assert unpaused == [40] and st.mode is PartitionMode.COPYING
