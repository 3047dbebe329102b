"""PartitionFacts: the per-partition lookups shared by ``offsets translate`` and the checkpoint round."""

from __future__ import annotations

from mirror_core.config.loader import parse_text
from mirror_core.config.model import FlowConfig
from mirror_core.offsets.partition_facts import PartitionFacts
from mirror_core.stores.offset_map import OffsetMap


def _flow() -> FlowConfig:
    config = parse_text("clusters = dc1, dc2\ndc1.bootstrap.servers = a:9092\ndc2.bootstrap.servers = b:9092\n"
                        "dc1->dc2.enabled = true\ndc1->dc2.topics = orders\n", validate_clients=False)
    return config.flows[0]


def _map() -> OffsetMap:
    m = OffsetMap()
    m.add("orders", 0, 0, 0)      # source 0.. -> target 0..
    m.add("orders", 0, 100, 90)   # a gap of 10 on the source (transaction markers)
    m.add("orders", 1, 0, 0)
    return m


def test_ends_are_asked_once_for_the_remote_partitions_and_cap_the_answer() -> None:
    asked: list[set[tuple[str, int]]] = []

    def ends_of(keys: set[tuple[str, int]]) -> dict[tuple[str, int], int]:
        asked.append(keys)
        return {("dc1.orders", 0): 150, ("dc1.orders", 1): 5}

    facts = PartitionFacts(_flow(), _map(), {("orders", 0): 200, ("orders", 1): 50},
                           [("orders", 0), ("orders", 1), ("orders", 2)], ends_of)
    assert asked == [{("dc1.orders", 0), ("dc1.orders", 1), ("dc1.orders", 2)}]
    remote, tr = facts.translate("orders", 0, 120)
    assert (remote, tr.target_offset, tr.exact) == ("dc1.orders", 110, True)
    # the same source offset for the same partition, asked by another group: the same answer
    assert facts.translate("orders", 0, 120)[1].target_offset == 110
    # past the remote log end: capped there, never beyond (a consumer would reset)
    assert facts.translate("orders", 1, 40)[1].target_offset == 5


def test_a_partition_with_no_map_says_so() -> None:
    facts = PartitionFacts(_flow(), _map(), {}, [("orders", 2)], lambda keys: {})
    remote, tr = facts.translate("orders", 2, 7)
    assert remote == "dc1.orders" and tr.target_offset is None and not tr.exact
    assert "no offset map" in tr.note


def test_past_the_replicated_progress_is_not_exact_and_no_end_means_no_cap() -> None:
    facts = PartitionFacts(_flow(), _map(), {("orders", 1): 50}, [("orders", 1)], lambda keys: {})
    remote, tr = facts.translate("orders", 1, 80)  # the group read 30 records the mirror has not copied yet
    assert (remote, tr.target_offset, tr.exact) == ("dc1.orders", 50, False)
    assert "30 records not replicated yet" in tr.note
    assert facts.translate("orders", 1, 40)[1].target_offset == 40  # no remote end read: no cap
