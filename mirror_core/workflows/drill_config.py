"""The DR drill's own mirror configuration, generated from the production one.

The drill flow must never touch production state, so the generated file gives the drill its own
*source alias* (``drill-<source>``, the same cluster with every ``<source>.*`` setting copied,
security included). Everything mirror_core keeps per source alias is therefore the drill's own:
the progress topic, the offset-sync topic, the checkpoints topic and the remote topic name
(``drill-dc1.mirror-core.drill.<run>`` with the default policy). The drill flow copies the
production flow's settings (policy, replication factors, client overrides), then narrows them to
the drill topic and the canary group, emits checkpoints every second, emits no heartbeats, syncs no
group offsets, runs at-least-once (exactly-once slots and transactional ids are per flow name and
would fence production) and uses its own worker group. Every production flow is disabled in it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from mirror_core.config.model import MirrorConfig
from mirror_core.config.properties import load_properties

DRILL_TOPIC_PREFIX = "mirror-core.drill."
CANARY_GROUP_PREFIX = "dr-drill.canary."  # must not start with "mirror-core": those groups are never checkpointed


@dataclass(frozen=True)
class DrillNames:
    """Names of everything one drill run creates; unique per run (``stamp``)."""

    stamp: str
    source: str
    target: str

    @property
    def alias(self) -> str:
        return f"drill-{self.source}"

    @property
    def flow(self) -> str:
        return f"{self.alias}->{self.target}"

    @property
    def topic(self) -> str:
        return f"{DRILL_TOPIC_PREFIX}{self.stamp}"

    @property
    def canary_group(self) -> str:
        return f"{CANARY_GROUP_PREFIX}{self.stamp}"

    def worker_group(self, phase: str) -> str:
        """The drill mirror's group on the source; a fresh one for the failback mirror, so it need not
        wait for the killed member's session to expire."""
        return f"mirror-core.drill.{self.stamp}.{phase}"


def _escape_value(value: str) -> str:
    """A properties value as written: backslashes doubled (the reader unescapes them)."""
    return value.replace("\\", "\\\\")


def drill_properties(config: MirrorConfig, properties_path: str | Path, names: DrillNames, phase: str) -> str:
    """The production file followed by the drill overrides (the last occurrence of a key wins)."""
    if names.alias in config.clusters:
        raise ValueError(f"cluster alias '{names.alias}' already exists in the mirror config; the drill needs it")
    text = Path(properties_path).read_text(encoding="utf-8")
    props = load_properties(properties_path)
    src, flow = names.source, f"{names.source}->{names.target}"
    lines = ["", "# ---- DR drill overrides (generated; never used by the production mirror) ----",
             f"clusters = {', '.join([*config.clusters, names.alias])}"]
    latest: dict[str, str] = {}
    for p in props:
        latest[p.key] = p.value
    for key, value in latest.items():
        if key.startswith(f"{src}.") and not key.startswith(f"{src}->"):
            lines.append(f"{names.alias}.{key[len(src) + 1:]} = {_escape_value(value)}")
        elif key.startswith(f"{flow}.") and key != f"{flow}.enabled":
            lines.append(f"{names.flow}.{key[len(flow) + 1:]} = {_escape_value(value)}")
    lines += [f"{f.name}.enabled = false" for f in config.all_flows]
    d = names.flow
    lines += [
        f"{d}.enabled = true",
        f"{d}.topics = {_escape_value(re.escape(names.topic))}",
        f"{d}.topics.exclude = ",
        f"{d}.groups = {_escape_value(re.escape(names.canary_group))}",
        f"{d}.groups.exclude = ",
        f"{d}.emit.checkpoints.enabled = true",
        f"{d}.emit.checkpoints.interval.seconds = 1",
        f"{d}.emit.heartbeats.enabled = false",
        f"{d}.sync.group.offsets.enabled = false",
        f"{d}.exactly.once.enabled = false",
        f"{d}.sync.topic.configs.enabled = false",
        f"{d}.refresh.topics.interval.seconds = 5",
        f"{d}.source.start.position = earliest",
        f"{d}.consumer.group.id = {names.worker_group(phase)}",
        # the killed drill mirror leaves its group soon, so the drill can delete the group afterwards
        f"{d}.consumer.session.timeout.ms = 6000",
        f"{d}.consumer.heartbeat.interval.ms = 1000",
    ]
    return text + "\n".join(lines) + "\n"


def write_drill_properties(config: MirrorConfig, properties_path: str | Path, names: DrillNames, phase: str,
                           out_dir: Path) -> Path:
    """Write the drill config (it holds the production secrets: owner-only permissions)."""
    out = out_dir / f"drill-{phase}.properties"
    out.touch(mode=0o600)
    out.write_text(drill_properties(config, properties_path, names, phase), encoding="utf-8")
    return out
