"""``--wan`` specs: parsed into toxics, every bad spec refused with one line naming the bad part."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mirror_core.devcluster.toxiproxy import TOXIPROXY_VERSION
from mirror_core.devcluster.wan_spec import WanSpec, WanSpecError, parse_wan_spec


def test_full_spec_becomes_round_trip_toxics_split_over_both_directions():
    spec = parse_wan_spec("latency=80ms, jitter=10ms,bandwidth=10MB/s")
    assert spec == WanSpec(rtt_ms=80, jitter_ms=10, bandwidth_kb_s=10_000)
    by = {(t.type, t.stream): t.attributes for t in spec.toxics()}
    assert by[("latency", "upstream")] == by[("latency", "downstream")] == {"latency": 40, "jitter": 5}
    assert by[("bandwidth", "upstream")] == {"rate": 10_000}
    assert len({t.name for t in spec.toxics()}) == 4  # names unique on one proxy


@pytest.mark.parametrize(("text", "expected"), [
    ("latency=1.5s", WanSpec(rtt_ms=1500)),
    ("bandwidth=100Mbit/s", WanSpec(bandwidth_kb_s=12_500)),
    ("bandwidth=500kb/s", WanSpec(bandwidth_kb_s=500)),
    ("LATENCY=20ms", WanSpec(rtt_ms=20)),
])
def test_units(text, expected):
    assert parse_wan_spec(text) == expected


def test_no_bandwidth_means_no_cap():
    assert [t.type for t in parse_wan_spec("latency=20ms").toxics()] == ["latency", "latency"]


@pytest.mark.parametrize(("text", "names"), [
    ("latency=80", "latency=80: expected a duration"),
    ("latency=80ms,loss=1%", "unknown key 'loss'"),
    ("latency", "'latency' is not key=value"),
    ("latency=80ms,,jitter=1ms", "'' is not key=value"),
    ("bandwidth=fast", "bandwidth=fast: expected a rate"),
    ("bandwidth=1kbit/s", "below 1 KB/s"),
    ("latency=1ms,latency=2ms", "'latency' given twice"),
])
def test_bad_specs_are_one_clear_line(text, names):
    with pytest.raises(WanSpecError) as info:
        parse_wan_spec(text)
    message = str(info.value)
    assert names in message and "\n" not in message and message.startswith("--wan")


def test_script_and_module_pin_the_same_toxiproxy():
    script = (Path(__file__).resolve().parents[2] / "scripts" / "ensure-toxiproxy.sh").read_text()
    assert re.search(r'TOXIPROXY_VERSION:-(v[\d.]+)', script).group(1) == TOXIPROXY_VERSION  # type: ignore[union-attr]
