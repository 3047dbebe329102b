"""schema.ids and <alias>.schema.registry.*: parsed, the credentials kept secret, translation on the records path."""

from __future__ import annotations

from mirror_core.config.loader import parse_text
from mirror_core.redaction import scrub

BASE = "clusters = dc1, dc2\ndc1.bootstrap.servers = localhost:1\ndc2.bootstrap.servers = localhost:2\n"


def test_registry_settings_and_schema_ids() -> None:
    c = parse_text(BASE + "dc1.schema.registry.url = http://registry:8081\n"
                   "dc1.schema.registry.basic.auth.user.info = mirror:registry-pass-1\n"
                   "dc1->dc2.enabled = true\ndc1->dc2.schema.ids = translate\nreplication.data.path = auto\n")
    dc1 = c.clusters["dc1"]
    assert dict(dc1.schema_registry) == {"url": "http://registry:8081",
                                         "basic.auth.user.info": "mirror:registry-pass-1"}
    assert "registry-pass-1" not in repr(dc1) and "registry-pass-1" not in scrub("auth mirror:registry-pass-1")
    f = c.flows[0]
    assert (f.schema_ids, f.data_path, f.data_path_reason) == (
        "translate", "records", "auto: records, because schema.ids = translate")
    assert parse_text(BASE + "dc1->dc2.enabled = true\n").flows[0].schema_ids == "off"
