"""What a quota copy changes on the target (no brokers)."""

from __future__ import annotations

from mirror_core.quotas import Entity, QuotaChange, quota_changes


def test_the_sources_quotas_are_set_and_target_only_ones_stay() -> None:
    app = (("client-id", "app"),)
    default_user = (("user", None),)
    other = (("user", "other"),)
    source: dict[Entity, dict[str, float]] = {app: {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0},
                                              default_user: {"request_percentage": 5.0}}
    target: dict[Entity, dict[str, float]] = {app: {"producer_byte_rate": 1024.0, "consumer_byte_rate": 99.0},
                                              other: {"producer_byte_rate": 1.0}}
    assert quota_changes(source, target) == [
        QuotaChange("client-id=app", "consumer_byte_rate", 99.0, 2048.0),
        QuotaChange("user=<default>", "request_percentage", None, 5.0)]
    assert quota_changes(source, {**target, **source}) == []
    change = QuotaChange("user=<default>", "request_percentage", None, 5.0)
    assert change.describe() == "request_percentage: (none) -> 5"
