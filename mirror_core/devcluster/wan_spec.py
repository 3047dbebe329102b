"""``--wan latency=80ms,jitter=10ms,bandwidth=10MB/s``: the link ``mirror-core dev up --wan`` puts in front
of a local cluster, parsed into toxiproxy toxics. ``latency`` and ``jitter`` are round-trip figures
(half each way); ``bandwidth`` caps each direction of each connection (toxiproxy shapes connections,
not the link: a client with several connections gets several times the figure)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from mirror_core.devcluster.toxiproxy import Stream, Toxic

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s)$")
_RATE = re.compile(r"^(\d+(?:\.\d+)?)(KB/s|MB/s|GB/s|kbit/s|Mbit/s|Gbit/s)$", re.IGNORECASE)
# Toxiproxy's bandwidth unit is KB/s of 1000 bytes (it sleeps len/rate milliseconds per chunk).
_KB_PER = {"kb/s": 1.0, "mb/s": 1e3, "gb/s": 1e6, "kbit/s": 1 / 8, "mbit/s": 125.0, "gbit/s": 125e3}
KEYS = ("latency", "jitter", "bandwidth")
USAGE = "expected key=value pairs separated by commas, e.g. latency=80ms,jitter=10ms,bandwidth=10MB/s"


class WanSpecError(ValueError):
    """One line naming the bad part of a ``--wan`` spec and what is expected."""


@dataclass(frozen=True)
class WanSpec:
    rtt_ms: int = 0
    jitter_ms: int = 0
    #: per direction, in toxiproxy's KB/s (1000 bytes); None: unlimited
    bandwidth_kb_s: int | None = None

    def toxics(self) -> list[Toxic]:
        out: list[Toxic] = []
        streams: tuple[Stream, ...] = ("upstream", "downstream")
        for stream in streams:
            if self.rtt_ms or self.jitter_ms:
                out.append(Toxic.latency(self.rtt_ms // 2, self.jitter_ms // 2, stream))
            if self.bandwidth_kb_s is not None:
                out.append(Toxic.bandwidth(self.bandwidth_kb_s, stream))
        return out

    def describe(self) -> str:
        bw = "unlimited" if self.bandwidth_kb_s is None else f"{self.bandwidth_kb_s} KB/s each way per connection"
        return f"RTT {self.rtt_ms} ms ± {self.jitter_ms} ms, bandwidth {bw}"


def _duration_ms(key: str, text: str) -> int:
    m = _DURATION.match(text)
    if not m:
        raise WanSpecError(f"--wan {key}={text}: expected a duration such as 80ms or 1.5s")
    return round(float(m.group(1)) * (1000 if m.group(2) == "s" else 1))


def _rate_kb_s(text: str) -> int:
    m = _RATE.match(text)
    if not m:
        raise WanSpecError(f"--wan bandwidth={text}: expected a rate such as 500KB/s, 10MB/s or 100Mbit/s")
    kb = round(float(m.group(1)) * _KB_PER[m.group(2).lower()])
    if kb < 1:
        raise WanSpecError(f"--wan bandwidth={text}: below 1 KB/s, the smallest cap toxiproxy knows")
    return kb


def parse_wan_spec(text: str) -> WanSpec:
    values: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.strip().partition("=")
        key, value = key.strip().lower(), value.strip()
        if not sep or not key or not value:
            raise WanSpecError(f"--wan: '{part.strip()}' is not key=value; {USAGE}")
        if key not in KEYS:
            raise WanSpecError(f"--wan: unknown key '{key}'; known keys: {', '.join(KEYS)}")
        if key in values:
            raise WanSpecError(f"--wan: '{key}' given twice")
        values[key] = value
    return WanSpec(
        rtt_ms=_duration_ms("latency", values["latency"]) if "latency" in values else 0,
        jitter_ms=_duration_ms("jitter", values["jitter"]) if "jitter" in values else 0,
        bandwidth_kb_s=_rate_kb_s(values["bandwidth"]) if "bandwidth" in values else None,
    )
