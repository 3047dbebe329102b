"""One validator for the DAGs' Params, and the spec of every DAG's Params.

A spec is a frozen dataclass whose fields are the Params. A field's type says how its value is
checked — ``bool``, ``int``, ``float``, ``str``, ``tuple[str, ...]`` (a list of names: non-empty
strings, no duplicates; a comma-separated string is accepted), ``Mapping[str, int]`` (``{"topic:partition":
source offset}``), ``X | None`` (may be empty) — and :func:`param` adds bounds, choices, or a name the
mirror config must know (``of="flow"``: an enabled flow; ``of="cluster"``: a cluster alias). Rules
across Params go in the spec's ``check()``. :func:`validate_params` returns the filled-in spec or
raises one :class:`ParamError` naming the Param.

Airflow's Param schema already refuses malformed values when a run is created from the form; the
first task of a run still validates, against the mirror config of now (it may have changed since the
DAG was parsed), before any cluster is touched.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, get_args, get_type_hints

from mirror_core.config.model import MirrorConfig
from mirror_core.workflows.errors import ParamError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

S = TypeVar("S", bound="DataclassInstance")
_RULE = "mirror_core.param"
_NONE = type(None)


@dataclass(frozen=True)
class Rule:
    """How one Param is checked beyond its type."""

    minimum: float | None = None
    maximum: float | None = None
    positive: bool = False  # a number > 0
    what: str = ""  # words after "a positive number" in the error ("of records per second")
    choices: tuple[str, ...] = ()
    of: str | None = None  # "flow" (an enabled flow of the config) | "cluster" (a cluster alias)
    empty_means_all: bool = False  # of="flow": "" stands for every enabled flow
    required: bool = False  # a list of names: at least one


def param(default: Any = dataclasses.MISSING, default_factory: Any = dataclasses.MISSING, **rule: Any) -> Any:
    """A Param field of a spec: its default (used when the Param is absent) and its :class:`Rule`."""
    return dataclasses.field(default=default, default_factory=default_factory, metadata={_RULE: Rule(**rule)})


def validate_params(spec: type[S], params: Mapping[str, Any], config: MirrorConfig) -> S:
    """The Params of a run as ``spec``, every field checked; raises ParamError naming the first bad Param."""
    hints = get_type_hints(spec)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(spec):
        rule = f.metadata.get(_RULE, Rule())
        if f.name in params:
            value = params[f.name]
        elif f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
        else:
            value = None if f.default is dataclasses.MISSING else f.default
        values[f.name] = _check(f.name, hints[f.name], value, rule, config)
    out = spec(**values)
    check = getattr(out, "check", None)
    if check is not None:
        check()
    return out


def check_int(name: str, value: Any, low: int | float | None = None, high: int | float | None = None) -> int:
    """An integer Param within ``[low, high]`` (either bound may be open)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParamError(f"Param '{name}' must be an integer, got {value!r}")
    if (low is not None and value < low) or (high is not None and value > high):
        bound = (f"between {low} and {high}" if low is not None and high is not None
                 else f">= {low}" if low is not None else f"<= {high}")
        raise ParamError(f"Param '{name}' must be {bound}, got {value}")
    return value


def _check(name: str, hint: Any, value: Any, rule: Rule, config: MirrorConfig) -> Any:
    args = get_args(hint)
    if _NONE in args:  # X | None
        if value is None:
            return None
        hint = next(a for a in args if a is not _NONE)
    if hint is bool:
        if not isinstance(value, bool):
            raise ParamError(f"Param '{name}' must be true or false, got {value!r}")
        return value
    if hint is int:
        return check_int(name, value, rule.minimum, rule.maximum)
    if hint is float:
        return _number(name, value, rule)
    if hint is str:
        return _text(name, value, rule, config)
    if hint == tuple[str, ...]:
        return _names(name, value, rule.required)
    if hint == Mapping[str, int]:
        return _offsets(name, value)
    raise TypeError(f"Param '{name}': no rule for values of type {hint}")


def _number(name: str, value: Any, rule: Rule) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or (rule.positive and value <= 0):
        kind = f"a positive number{' ' + rule.what if rule.what else ''}" if rule.positive else "a number"
        raise ParamError(f"Param '{name}' must be {kind}, got {value!r}")
    if (rule.minimum is not None and value < rule.minimum) or (rule.maximum is not None and value > rule.maximum):
        raise ParamError(f"Param '{name}' must be between {rule.minimum} and {rule.maximum}, got {value}")
    return float(value)


def _text(name: str, value: Any, rule: Rule, config: MirrorConfig) -> str:
    if rule.of == "flow":
        if rule.empty_means_all and value in ("", None):
            return ""
        try:
            config.flow(value, standby=False)  # Params name enabled flows only
        except KeyError as exc:
            raise ParamError(f"Param '{name}': {exc.args[0]}") from None
        return str(value)
    if rule.of == "cluster":
        if value not in config.clusters:
            raise ParamError(f"Param '{name}': unknown cluster {value!r} (clusters: {', '.join(config.clusters)})")
        return str(value)
    if rule.choices and value not in rule.choices:
        raise ParamError(f"Param '{name}' must be one of {', '.join(rule.choices)}, got {value!r}")
    if not isinstance(value, str):
        raise ParamError(f"Param '{name}' must be a string, got {value!r}")
    return value


def _names(name: str, value: Any, required: bool) -> tuple[str, ...]:
    value = value or []
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ParamError(f"Param '{name}' must be a list of names, got {value!r}")
    if len(set(value)) != len(value):
        raise ParamError(f"Param '{name}' lists a name twice: {list(value)}")
    if required and not value:
        raise ParamError(f"Param '{name}' needs at least one name")
    return tuple(v.strip() for v in value)


def _offsets(name: str, value: Any) -> dict[str, int]:
    if not isinstance(value, dict) or not all(
            isinstance(k, str) and ":" in k and k.rsplit(":", 1)[1].isdigit()
            and isinstance(v, int) and not isinstance(v, bool) and v >= 0 for k, v in value.items()):
        raise ParamError(f"Param '{name}' must map 'topic:partition' to a source offset, got {value!r}")
    return dict(value)


# -- the Params of each DAG ----------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class FailoverParams:
    flow: str = param(of="flow")
    apps: tuple[str, ...] = param(default=())
    groups: tuple[str, ...] = param(default=())
    mode: str = param(default="planned", choices=("planned", "unplanned"))
    drain_timeout_s: int = param(default=300, minimum=10, maximum=86400)
    topics: tuple[str, ...] = param(default=())  # source topics (names or patterns) that switch; () the whole flow

    @property
    def planned(self) -> bool:
        return self.mode == "planned"


@dataclass(frozen=True, kw_only=True)
class FailbackParams:
    flow: str = param(of="flow")
    apps: tuple[str, ...] = param(default=())
    groups: tuple[str, ...] = param(default=())
    max_reverse_lag: int = param(default=0, minimum=0)
    drain_timeout_s: int = param(default=300, minimum=10, maximum=86400)
    topics: tuple[str, ...] = param(default=())  # the topics a failover of some topics switched; () the whole flow


@dataclass(frozen=True, kw_only=True)
class CutoverParams:
    source: str = param(of="cluster")
    target: str = param(of="cluster")
    topics: tuple[str, ...] = param(required=True)
    groups: tuple[str, ...] = param(default=())
    apps: tuple[str, ...] = param(default=())
    max_lag: int = param(default=1000, minimum=0)
    deny_writes: bool = param(default=False)
    drain_timeout_s: int = param(default=300, minimum=10, maximum=86400)


@dataclass(frozen=True, kw_only=True)
class DrillParams:
    flow: str = param(of="flow")
    records: int = param(minimum=2, maximum=1_000_000)
    consume_before_failure: int = param(minimum=1)
    unreplicated_at_failure: int = param(minimum=-1)  # -1: natural lag
    seed: int | None = param(default=None, minimum=0)  # None: drawn at random
    partitions: int = param(minimum=1, maximum=64)
    rate: float = param(positive=True, what="of records per second")
    max_rpo_records: int = param(minimum=0)
    max_rto_seconds: float = param(positive=True)
    max_duplicates: int = param(minimum=0)
    max_losses: int = param(minimum=0)
    cleanup: bool = param(default=True)
    mode: str = param(default="canary", choices=("canary", "failover"))
    # failover mode: the drill application the production flow mirrors (its alias, topics, consumer groups)
    app: str = param(default="")
    topics: tuple[str, ...] = param(default=())
    groups: tuple[str, ...] = param(default=())
    drain_timeout_s: int = param(default=300, minimum=10, maximum=86400)

    def check(self) -> None:
        check_int("consume_before_failure", self.consume_before_failure, 1, self.records - 1)
        if self.mode == "failover":
            for name, value in (("app", self.app), ("topics", self.topics), ("groups", self.groups)):
                if not value:
                    raise ParamError(f"Param '{name}' is required with mode 'failover' (the drill application's "
                                     "alias, topics and consumer groups)")
        check_int("unreplicated_at_failure", self.unreplicated_at_failure, -1,
                  self.records - self.consume_before_failure)


@dataclass(frozen=True, kw_only=True)
class OneOrEveryFlow:
    flow: str = param(default="", of="flow", empty_means_all=True)

    def flows(self, config: MirrorConfig) -> list[str]:
        """The flows this run covers: the one named, or every enabled flow."""
        return [self.flow] if self.flow else [f.name for f in config.flows]


@dataclass(frozen=True, kw_only=True)
class TopicSyncParams(OneOrEveryFlow):
    dry_run: bool = param(default=False)


@dataclass(frozen=True, kw_only=True)
class SchemaSyncParams(TopicSyncParams):
    """The schema sync covers the flow named, or every enabled flow whose clusters both have a registry."""

    def flows(self, config: MirrorConfig) -> list[str]:
        if self.flow:
            return [self.flow]
        return [f.name for f in config.flows if not config.without_registry(f)]


@dataclass(frozen=True, kw_only=True)
class ReconciliationParams(OneOrEveryFlow):
    # mirror_core.reconciliation.WINDOWS (a sibling layer: not imported; the DAG's Param enum uses WINDOWS)
    window: str = param(default="since_last_success", choices=("since_last_success", "all_retained"))
    start_offsets: Mapping[str, int] = param(default_factory=dict)
    end_offsets: Mapping[str, int] = param(default_factory=dict)
    commit_corrections: bool = param(default=False)
