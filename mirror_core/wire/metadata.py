"""Where each partition's leader is (Metadata v4, declared in mirror_core/wire/messages.py), and one connection
per broker of a cluster, opened on first use with the cluster's settings."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from mirror_core.errors import MirrorError
from mirror_core.throttling import ThrottledLine
from mirror_core.wire.codec import ProtocolError
from mirror_core.wire.connection import Connection, WireError, broker_where
from mirror_core.wire.kerberos import KerberosLogin, login_for
from mirror_core.wire.messages import MetadataRequest, MetadataResponse, decode, encode
from mirror_core.wire.oauth import TokenSource
from mirror_core.wire.sasl import SaslError, speaks_gssapi, speaks_oauthbearer

API_METADATA = MetadataRequest.API_KEY
#: the Metadata versions this client speaks (the layout parse_metadata reads)
METADATA_VERSIONS = (4,)
NO_LEADER = -1
#: connections that cannot be set up mark the cluster down once they have failed this long with no answer between
DOWN_AFTER_S = 10.0


class Reachability(Protocol):
    """Told whether a cluster answers the wire client (the flow's cluster health, clients.ClusterHealth), as
    librdkafka's error callbacks tell it for its clients: a flow whose only clients of a cluster are the wire
    client's must still show that cluster down while it does not answer. Down is when no broker of it answers
    a metadata request (as librdkafka's "all brokers down"), or connections have failed for DOWN_AFTER_S with no
    broker answering in between: one broker out of reach while the others answer is a moved leader, not a
    cluster down."""

    def mark_ok(self) -> None: ...

    def mark_down(self, why: str) -> None: ...


class _Unwatched:
    """No one is told (a client outside a flow: the CLI, a benchmark)."""

    def mark_ok(self) -> None:
        pass

    def mark_down(self, why: str) -> None:
        pass


@dataclass(frozen=True)
class Broker:
    node: int
    host: str
    port: int


@dataclass(frozen=True)
class TopicMetadata:
    """One topic's partitions: the leader of each (``NO_LEADER`` while none is elected) and each one's error
    code (0, or e.g. LEADER_NOT_AVAILABLE); ``error``: the topic's own (UNKNOWN_TOPIC_OR_PARTITION...)."""

    name: str
    error: int
    leaders: dict[int, int] = field(default_factory=dict)
    errors: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ClusterMetadata:
    brokers: dict[int, Broker]
    topics: dict[str, TopicMetadata]


def metadata_request(topics: Iterable[str], version: int = METADATA_VERSIONS[-1]) -> bytes:
    """Metadata for these topics (none: the brokers only), never creating one."""
    return encode(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
                                  allow_auto_topic_creation=False), version)


def parse_metadata(data: memoryview, version: int = METADATA_VERSIONS[-1]) -> ClusterMetadata:
    answer = decode(MetadataResponse, version, data)
    brokers = {b.node_id: Broker(b.node_id, b.host or "", b.port) for b in answer.brokers or ()}
    topics: dict[str, TopicMetadata] = {}
    for t in answer.topics or ():
        topic = TopicMetadata(t.name or "", t.error_code)
        for p in t.partitions or ():
            topic.leaders[p.partition_index] = p.leader_id
            topic.errors[p.partition_index] = p.error_code
        topics[topic.name] = topic
    return ClusterMetadata(brokers, topics)


def address(server: str) -> tuple[str, int]:
    """``host:port`` of a bootstrap server as librdkafka reads it: an optional ``PROTOCOL://`` prefix, an IPv6
    address in brackets, port 9092 when none is given."""
    server = server.strip().rpartition("://")[2]
    host, port = server, "9092"
    if server.startswith("["):
        host, _, rest = server[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else port
    elif server.count(":") == 1:
        host, _, port = server.partition(":")
    try:
        return host, int(port)
    except ValueError:
        raise MirrorError(f"bootstrap server '{server}': the port is not a number") from None


class Brokers:
    """A cluster's brokers as the wire client reaches them: metadata through the bootstrap servers or any
    broker known since (``where`` names the cluster in error lines); the fetcher's and sender's workers open
    their own connection to each leader with :attr:`settings`."""

    def __init__(self, bootstrap: str, settings: Mapping[str, str], where: str, timeout: float = 30.0,
                 reachability: Reachability | None = None) -> None:
        self.bootstrap = [address(s) for s in bootstrap.split(",") if s.strip()]
        self.settings, self.where, self.timeout = settings, where, timeout
        #: told of every connection set up and metadata answer, and of a cluster that no longer answers
        self.reachability = reachability if reachability is not None else _Unwatched()
        #: since when connections fail with no broker answering in between (None: one answered since)
        self._failing_since: float | None = None
        self.known: dict[int, Broker] = {}
        #: OAUTHBEARER: one token for every connection to the cluster (asked again before it expires); GSSAPI:
        #: the process's Kerberos login for the keytab and principal
        self.login: TokenSource | KerberosLogin | None = (
            TokenSource(settings, where) if speaks_oauthbearer(settings)
            else login_for(settings) if speaks_gssapi(settings) else None)
        #: what its workers' failures say, each text at most once a minute: every worker retries a broker that
        #: is down every 0.2-0.5 s (a link outage of ten minutes would otherwise be thousands of lines)
        self.line = ThrottledLine()

    def metadata(self, topics: Iterable[str]) -> ClusterMetadata:
        """Asked of the bootstrap servers in turn, then of the brokers known from earlier answers."""
        topics = list(topics)
        known = [(b.host, b.port) for b in list(self.known.values())]
        failures: list[str] = []
        for address in [*self.bootstrap, *(a for a in known if a not in self.bootstrap)]:
            try:
                with Connection(*address, self.settings, self.where, self.timeout, self.login) as conn:
                    version = conn.version(API_METADATA, METADATA_VERSIONS)
                    answer = conn.call(API_METADATA, version, metadata_request(topics, version))
                    try:
                        meta = parse_metadata(answer, version)
                    except ProtocolError as exc:
                        raise ProtocolError(f"{conn.where}: a metadata answer that does not parse: {exc}") from None
            except MirrorError as exc:  # unreachable, TLS/SASL refused, or an answer that does not parse (every
                # parser failure is a ProtocolError, a MirrorError): the next broker is asked
                failures.append(str(exc))
                continue
            self.known.update(meta.brokers)
            self._answered()
            return meta
        error = WireError(f"{self.where}: no broker answered a metadata request: {'; '.join(failures)}")
        self.reachability.mark_down(str(error))
        raise error

    def _answered(self) -> None:
        self._failing_since = None
        self.reachability.mark_ok()

    def name(self, node: int) -> str:
        """How error lines name broker ``node``."""
        broker = self.known.get(node)
        return broker_where(self.where, broker.host, broker.port) if broker else f"{self.where} (broker id {node})"

    def connect(self, node: int, wait_s: float = 0.0) -> Connection:
        """A connection of the caller's own to broker ``node`` (known from a metadata answer); ``wait_s``: how
        long the broker may hold an answer beyond the timeout (a fetch's max wait, a produce's timeout)."""
        broker = self.known[node]
        try:
            conn = Connection(broker.host, broker.port, self.settings, self.where, self.timeout + wait_s, self.login)
        except (WireError, SaslError) as exc:  # (not an answer that does not parse: that broker answered)
            now = time.monotonic()
            self._failing_since = self._failing_since or now
            if now - self._failing_since >= DOWN_AFTER_S:
                self.reachability.mark_down(str(exc))
            raise
        self._answered()
        return conn
