"""The mirror's /status and /healthz answer with error messages as they were raised; a secret the loaded config
holds (here a SASL password from a JAAS line) must come out masked, whatever message carries it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from mirror_core.config.loader import parse_text
from mirror_core.devcluster.local_cluster import free_port
from mirror_core.redaction import MASK, register_secret, scrub_json
from mirror_core.service import Service

PASSWORD = "Hunter2-pw-7f3a"
CONFIG = f"""clusters = dc1, dc2
dc1.bootstrap.servers = 127.0.0.1:9
dc2.bootstrap.servers = 127.0.0.1:9
dc1.security.protocol = SASL_PLAINTEXT
dc1.sasl.mechanism = PLAIN
dc1.sasl.jaas.config = org.apache.kafka.common.security.plain.PlainLoginModule required username="mirror" \
password="{PASSWORD}";
dc1->dc2.enabled = true
"""


def _get(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:  # /healthz answers 503 when unhealthy, with the same body
        return e.code, json.loads(e.read())


def test_status_and_healthz_mask_secrets_in_errors() -> None:
    config = parse_text(CONFIG, validate_clients=False)
    service = Service(config, metrics_port=free_port())
    runner = service.runners["dc1->dc2"]
    runner.fenced = f"SASL authentication failed for user mirror with password {PASSWORD}"
    assert PASSWORD in json.dumps(service.status())  # precondition: the answer is built with it
    service._start_http()
    try:
        for path in ("/status", "/healthz"):
            code, body = _get(f"http://127.0.0.1:{service.metrics_port}{path}")
            assert code in (200, 503), (path, code)
            [flow] = body["flows"]
            assert flow["state"] == f"stopped: SASL authentication failed for user mirror with password {MASK}", path
            assert "Hunter2" not in json.dumps(body), path
    finally:
        service.wait()


def test_scrub_json_masks_strings_at_any_depth_and_keeps_the_rest() -> None:
    """Masked before encoding: JSON would escape a quote or a backslash in the secret, and a scrub of the
    encoded text would miss it."""
    secret = 'Tr0ub4dor"&\\3'
    register_secret(secret)
    value = {"a": [1, 2.5, None, True, {secret: f"x {secret} y"}], "b": (secret,)}
    assert scrub_json(value) == {"a": [1, 2.5, None, True, {MASK: f"x {MASK} y"}], "b": [MASK]}
    assert secret not in json.dumps(scrub_json(value)) and "Tr0ub4dor" not in json.dumps(scrub_json(value))
