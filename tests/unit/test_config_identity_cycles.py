"""The identity policy on the batches data path where its flows form a cycle of three clusters or more
(config/loader.py, check_identity_rings): batches copied whole tell only which flow wrote them, one hop."""

from __future__ import annotations

import pytest

from mirror_core.config.errors import ConfigError
from mirror_core.config.loader import parse_text

BASE = ("clusters = dc1, dc2, dc3\ndc1.bootstrap.servers = a:9092\ndc2.bootstrap.servers = b:9092\n"
        "dc3.bootstrap.servers = c:9092\nreplication.policy.class = IdentityReplicationPolicy\n")


def paths(text: str) -> dict[str, tuple[str, str]]:
    c = parse_text(BASE + text, validate_clients=False)
    return {f.name: (f.data_path, f.data_path_reason) for f in c.all_flows}


def test_pairs_chains_and_hubs_take_batches_on_auto() -> None:
    pair = paths("dc1->dc2.enabled = true\ndc2->dc1.enabled = true\nreplication.data.path = auto\n")
    assert pair == {"dc1->dc2": ("batches", "auto: batches"), "dc2->dc1": ("batches", "auto: batches")}
    chain = paths("dc1->dc2.enabled = true\ndc2->dc3.enabled = true\nreplication.data.path = auto\n")
    assert {p for p, _ in chain.values()} == {"batches"}
    hub = paths("dc1->dc3.enabled = true\ndc2->dc3.enabled = true\ndc3->dc1.enabled = true\ndc3->dc2.enabled = false\n"
                "replication.data.path = auto\n")
    assert {p for p, _ in hub.values()} == {"batches"}  # pairs through the hub, no cycle of three


def test_a_ring_or_a_mesh_goes_on_records_on_auto_and_is_refused_on_batches_in_one_line() -> None:
    ring = paths("dc1->dc2.enabled = true\ndc2->dc3.enabled = true\ndc3->dc1.enabled = false\n"
                 "replication.data.path = auto\n")
    assert {p for p, _ in ring.values()} == {"records"}
    assert ring["dc1->dc2"][1] == ("auto: records, because the identity policy's flows form the cycle "
                                   "dc1->dc2->dc3->dc1, around which batches copied whole would come back (they say "
                                   "only which cluster they were copied from)")
    mesh = paths("".join(f"{a}->{b}.enabled = true\n" for a in ("dc1", "dc2", "dc3") for b in ("dc1", "dc2", "dc3")
                         if a != b) + "replication.data.path = auto\n")
    assert {p for p, _ in mesh.values()} == {"records"}
    unset = paths("dc1->dc2.enabled = true\ndc2->dc3.enabled = true\ndc3->dc1.enabled = false\n")  # the default
    assert unset["dc1->dc2"][1].startswith("auto (the default): records, because the identity policy's flows form")
    # The default policy's names stop cycles themselves: a ring of them stays on batches.
    default = paths("dc1->dc2.enabled = true\ndc2->dc3.enabled = true\ndc3->dc1.enabled = true\n"
                    "replication.data.path = auto\nreplication.policy.class = DefaultReplicationPolicy\n")
    assert {p for p, _ in default.values()} == {"batches"}
    with pytest.raises(ConfigError) as err:
        parse_text(BASE + "dc1->dc2.enabled = true\ndc2->dc3.enabled = true\ndc3->dc1.enabled = true\n"
                   "dc2->dc3.replication.data.path = batches\n", validate_clients=False)
    message = str(err.value)
    assert "cycle dc2->dc3->dc1->dc2" in message and "use replication.data.path = records" in message
    assert "\n" not in message and err.value.key == "dc2->dc3.replication.data.path" and err.value.line == 9
