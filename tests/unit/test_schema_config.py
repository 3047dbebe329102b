"""<alias>.schema.registry.*: parsed, the credentials kept secret; schema.ids other than off refused for now."""

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
    # The mirror does not translate ids yet: a flow asking for it is refused in one line, not run with wrong ids.
    with pytest.raises(ConfigError) as refused:
        parse_text(BASE + "dc1->dc2.enabled = true\ndc1->dc2.schema.ids = translate\n")
    assert "schema.ids = translate" in str(refused.value) and "\n" not in str(refused.value)
