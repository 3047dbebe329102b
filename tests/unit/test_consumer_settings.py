"""Which fetch wait each consumer gets: a standing consumer (the replicating one) asks an idle broker
again every 500 ms, short readers every 20 ms, and a user's setting beats both."""
from mirror_core.clients import consumer_settings
from mirror_core.config.loader import parse_text

BASE = "clusters = dc1, dc2\ndc1.bootstrap.servers = a:1\ndc2.bootstrap.servers = b:2\ndc1->dc2.enabled = true\n"


def test_standing_consumers_wait_longer_and_user_settings_win() -> None:
    config = parse_text(BASE, validate_clients=False)
    dc1 = config.cluster("dc1")
    assert consumer_settings(dc1, "g", standing=True)["fetch.wait.max.ms"] == "500"
    assert consumer_settings(dc1, "g")["fetch.wait.max.ms"] == "20"
    assert consumer_settings(dc1, "g", standing=True)["fetch.min.bytes"] == "1"  # a record ends the wait
    tuned = parse_text(BASE + "dc1.consumer.fetch.wait.max.ms = 100\n", validate_clients=False).cluster("dc1")
    assert consumer_settings(tuned, "g", standing=True)["fetch.wait.max.ms"] == "100"
    assert consumer_settings(dc1, "g", {"fetch.wait.max.ms": "50"}, standing=True)["fetch.wait.max.ms"] == "50"
