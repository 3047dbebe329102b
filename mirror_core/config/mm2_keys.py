"""Every configuration key MirrorMaker 2 accepts in ``mm2.properties`` (dedicated mode, Apache Kafka 4.x).

Pure data, no logic. The loader uses it to tell a key MirrorMaker 2 knows (apply it, or warn that it has no effect
here) from an unknown key (probably a typo: suggest the closest known name).

Where the lists come from -- nothing here was written from memory:

* Key sets: ``ConfigDef.names()`` of the ConfigDefs below, dumped by reflection from the released Maven jars
  connect-mirror, connect-mirror-client, connect-runtime and kafka-clients 4.0.0, 4.1.0, 4.2.0 and 4.3.1. No name was
  removed between 4.0.0 and 4.3.1; the few added ones are in KEYS_ADDED_SINCE_4_0.
* Prefixes and routing: the Java sources of apache/kafka (trunk of Oct 2024, 4.0.0-SNAPSHOT; MirrorMakerConfig,
  MirrorConnectorConfig, ConnectorConfig, DistributedConfig, Plugins, AbstractConfig, RestServerConfig, SSLUtils),
  with MirrorMakerConfig's behaviour checked against the 4.0.0-4.3.1 jars (same workerConfig / connectorBaseConfig
  output for the same input).
* MM2_REMOVED_IN_4_0: the 4.0 commits KAFKA-17529, KAFKA-16769, KAFKA-17435 and KAFKA-14158.
* CONNECT_MIRROR_MAKER_SAMPLE_KEYS: config/connect-mirror-maker.properties, the sample file shipped with Kafka.

Java files are under connect/mirror/src/main/java/org/apache/kafka/connect/mirror/ (MirrorClientConfig,
DefaultReplicationPolicy and IdentityReplicationPolicy: connect/mirror-client/...) and
connect/runtime/src/main/java/org/apache/kafka/connect/runtime/.

How MirrorMakerConfig.java routes a key (the same in 4.0.0-4.3.1):

* ``<alias>.<key>`` (cluster level, clusterProps): each herder's Connect worker config is
  ``clusterProps(<target>)``, so every ``<target>.<key>`` reaches the workers of all flows into that cluster. Worker
  keys such as ``<target>.offset.storage.topic`` and ``<target>.exactly.once.source.support`` belong here. Connectors
  get the whole ``<alias>.*`` map as ``source.cluster.*`` / ``target.cluster.*`` (``producer.*``, ``consumer.*``,
  ``admin.*`` as ``source.*`` / ``target.*``), but only MM2_CLIENT_KEYS and the client sub-prefixes take effect there.
* ``<source>-><target>.<key>`` (flow level, connectorBaseConfig): stripped and laid over the configs of all three
  connectors of that flow; any key goes through. Worker configs never read flow-level keys.
* ``<key>`` (top level): reaches the connectors only if it is an MM2 connector ConfigDef name
  (MirrorMakerConfig.allConfigNames: source + checkpoint + heartbeat ConfigDefs) or starts with a
  ``config.providers`` or ``replication.policy``. It reaches the workers only if it starts with ``offset.storage``,
  ``config.storage``, ``status.storage``, ``*.converter``, ``task``, ``worker``, ``replication.policy`` or
  ``config.providers``, and then it overrides ``<target>.<key>``. Anything else is dropped: for example
  top-level ``exactly.once.source.support``, ``group.id``, ``producer.*`` or ``transforms.<alias>.type``.
* ``<source>-><target>.enabled`` and ``emit.heartbeats.enabled`` (top level or per flow) also decide which herders
  exist (clusterPairs).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

# MirrorMakerConfig.java: config() -- clusters, config.providers, dedicated.mode.enable.internal.rest, plus the
# internal REST server keys from RestServerConfig.java addInternalConfig() (listeners, rest.advertised.*, ...,
# ssl.client.auth). Its client security keys are in MM2_CLIENT_KEYS.
MM2_TOP_LEVEL_KEYS: Final[frozenset[str]] = frozenset({
    "access.control.allow.methods",
    "access.control.allow.origin",
    "clusters",
    "config.providers",
    "dedicated.mode.enable.internal.rest",
    "listeners",
    "response.http.headers.config",
    "rest.advertised.host.name",
    "rest.advertised.listener",
    "rest.advertised.port",
    "ssl.client.auth",
})

# MirrorClientConfig.java: CLIENT_CONFIG_DEF -- bootstrap.servers + security.protocol + ConfigDef
# withClientSslSupport()/withClientSaslSupport() (SslConfigs.java, SaslConfigs.java). MirrorMakerConfig.clusterProps
# copies each of these, at top level or <alias>., to producer./consumer./admin.; also in MirrorMakerConfig.config()
# and MirrorConnectorConfig.BASE_CONNECTOR_CONFIG_DEF.
MM2_CLIENT_KEYS: Final[frozenset[str]] = frozenset({
    "bootstrap.servers",
    "sasl.client.callback.handler.class",
    "sasl.jaas.config",
    "sasl.kerberos.kinit.cmd",
    "sasl.kerberos.min.time.before.relogin",
    "sasl.kerberos.service.name",
    "sasl.kerberos.ticket.renew.jitter",
    "sasl.kerberos.ticket.renew.window.factor",
    "sasl.login.callback.handler.class",
    "sasl.login.class",
    "sasl.login.connect.timeout.ms",
    "sasl.login.read.timeout.ms",
    "sasl.login.refresh.buffer.seconds",
    "sasl.login.refresh.min.period.seconds",
    "sasl.login.refresh.window.factor",
    "sasl.login.refresh.window.jitter",
    "sasl.login.retry.backoff.max.ms",
    "sasl.login.retry.backoff.ms",
    "sasl.mechanism",
    "sasl.oauthbearer.assertion.algorithm",
    "sasl.oauthbearer.assertion.claim.aud",
    "sasl.oauthbearer.assertion.claim.exp.seconds",
    "sasl.oauthbearer.assertion.claim.iss",
    "sasl.oauthbearer.assertion.claim.jti.include",
    "sasl.oauthbearer.assertion.claim.nbf.seconds",
    "sasl.oauthbearer.assertion.claim.sub",
    "sasl.oauthbearer.assertion.file",
    "sasl.oauthbearer.assertion.private.key.file",
    "sasl.oauthbearer.assertion.private.key.passphrase",
    "sasl.oauthbearer.assertion.template.file",
    "sasl.oauthbearer.client.credentials.client.id",
    "sasl.oauthbearer.client.credentials.client.secret",
    "sasl.oauthbearer.clock.skew.seconds",
    "sasl.oauthbearer.expected.audience",
    "sasl.oauthbearer.expected.issuer",
    "sasl.oauthbearer.header.urlencode",
    "sasl.oauthbearer.jwks.endpoint.refresh.ms",
    "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms",
    "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms",
    "sasl.oauthbearer.jwks.endpoint.url",
    "sasl.oauthbearer.jwt.retriever.class",
    "sasl.oauthbearer.jwt.validator.class",
    "sasl.oauthbearer.scope",
    "sasl.oauthbearer.scope.claim.name",
    "sasl.oauthbearer.sub.claim.name",
    "sasl.oauthbearer.token.endpoint.url",
    "security.protocol",
    "ssl.cipher.suites",
    "ssl.enabled.protocols",
    "ssl.endpoint.identification.algorithm",
    "ssl.engine.factory.class",
    "ssl.key.password",
    "ssl.keymanager.algorithm",
    "ssl.keystore.certificate.chain",
    "ssl.keystore.key",
    "ssl.keystore.location",
    "ssl.keystore.password",
    "ssl.keystore.type",
    "ssl.protocol",
    "ssl.provider",
    "ssl.secure.random.implementation",
    "ssl.trustmanager.algorithm",
    "ssl.truststore.certificates",
    "ssl.truststore.location",
    "ssl.truststore.password",
    "ssl.truststore.type",
})

# MirrorConnectorConfig.java: BASE_CONNECTOR_CONFIG_DEF, minus ConnectorConfig's keys and MM2_CLIENT_KEYS
# (replication.policy.* from MirrorClientConfig.java / DefaultReplicationPolicy.java; source.cluster.alias is also
# IdentityReplicationPolicy.java's SOURCE_CLUSTER_ALIAS_CONFIG; config.providers defined here since 4.2.0).
MM2_BASE_CONNECTOR_KEYS: Final[frozenset[str]] = frozenset({
    "admin.timeout.ms",
    "config.providers",
    "enabled",
    "forwarding.admin.class",
    "metric.reporters",
    "replication.policy.class",
    "replication.policy.internal.topic.separator.enabled",
    "replication.policy.separator",
    "source.cluster.alias",
    "target.cluster.alias",
})

# MirrorSourceConfig.java: CONNECTOR_CONFIG_DEF minus the base (topics/topics.exclude: DefaultTopicFilter.java;
# config.properties.exclude: DefaultConfigPropertyFilter.java; metric.names.formats since 4.3.0, deprecated).
MM2_SOURCE_CONNECTOR_KEYS: Final[frozenset[str]] = frozenset({
    "config.properties.exclude",
    "config.property.filter.class",
    "consumer.poll.timeout.ms",
    "emit.offset-syncs.enabled",
    "heartbeats.replication.enabled",
    "metric.names.formats",
    "offset-syncs.topic.location",
    "offset-syncs.topic.replication.factor",
    "offset.lag.max",
    "refresh.topics.enabled",
    "refresh.topics.interval.seconds",
    "replication.factor",
    "sync.topic.acls.enabled",
    "sync.topic.acls.interval.seconds",
    "sync.topic.configs.enabled",
    "sync.topic.configs.interval.seconds",
    "topic.filter.class",
    "topics",
    "topics.exclude",
})

# MirrorCheckpointConfig.java: CONNECTOR_CONFIG_DEF minus the base (groups/groups.exclude: DefaultGroupFilter.java).
MM2_CHECKPOINT_CONNECTOR_KEYS: Final[frozenset[str]] = frozenset({
    "checkpoints.topic.replication.factor",
    "consumer.poll.timeout.ms",
    "emit.checkpoints.enabled",
    "emit.checkpoints.interval.seconds",
    "group.filter.class",
    "groups",
    "groups.exclude",
    "metric.names.formats",
    "offset-syncs.topic.location",
    "refresh.groups.enabled",
    "refresh.groups.interval.seconds",
    "sync.group.offsets.enabled",
    "sync.group.offsets.interval.seconds",
    "topic.filter.class",
})

# MirrorHeartbeatConfig.java: CONNECTOR_CONFIG_DEF minus the base.
MM2_HEARTBEAT_CONNECTOR_KEYS: Final[frozenset[str]] = frozenset({
    "emit.heartbeats.enabled",
    "emit.heartbeats.interval.seconds",
    "heartbeats.topic.replication.factor",
})

# DefaultTopicFilter.java, DefaultGroupFilter.java, DefaultConfigPropertyFilter.java: keys the default filters read.
# use.defaults.from is only in DefaultConfigPropertyFilter's own ConfigDef, not in a connector ConfigDef, so
# connectorBaseConfig drops it at top level; it only takes effect as <source>-><target>.use.defaults.from.
MM2_FILTER_KEYS: Final[frozenset[str]] = frozenset({
    "config.properties.exclude",
    "groups",
    "groups.exclude",
    "topics",
    "topics.exclude",
    "use.defaults.from",
})

# Union of the MM2 connector keys above: MirrorConnectorConfig.java, MirrorSourceConfig.java,
# MirrorCheckpointConfig.java, MirrorHeartbeatConfig.java and the Default*Filter.java classes.
MM2_CONNECTOR_KEYS: Final[frozenset[str]] = (
    MM2_BASE_CONNECTOR_KEYS
    | MM2_SOURCE_CONNECTOR_KEYS
    | MM2_CHECKPOINT_CONNECTOR_KEYS
    | MM2_HEARTBEAT_CONNECTOR_KEYS
    | MM2_FILTER_KEYS
)

# Keys that Kafka 3.x MirrorMaker 2 accepted and 4.0 removed -> the replacement, or None if there is none. From the
# commits KAFKA-17529 (DefaultTopicFilter/DefaultGroupFilter/DefaultConfigPropertyFilter *.blacklist aliases),
# KAFKA-16769 (MirrorSourceConfig.java), KAFKA-17435 (MirrorSourceConfig.java) and KAFKA-14158
# (MirrorConnectorConfig.java, WorkerConfig.java; CommonClientConfigs.AUTO_INCLUDE_JMX_REPORTER_CONFIG).
# These names are in no set above: Kafka 4.x ignores them.
MM2_REMOVED_IN_4_0: Final[Mapping[str, str | None]] = MappingProxyType({
    "topics.blacklist": "topics.exclude",
    "groups.blacklist": "groups.exclude",
    "config.properties.blacklist": "config.properties.exclude",
    "add.source.alias.to.metrics": None,
    "use.incremental.alter.configs": None,
    "auto.include.jmx.reporter": "metric.reporters",
})

# connect/runtime WorkerConfig.java baseConfigDef() + distributed/DistributedConfig.java config() (incl. the REST
# keys from rest/RestServerConfig.java addPublicConfig() and the client security keys).
CONNECT_WORKER_KEYS: Final[frozenset[str]] = MM2_CLIENT_KEYS | frozenset({  # every client key, and:
    "access.control.allow.methods",
    "access.control.allow.origin",
    "admin.listeners",
    "client.dns.lookup",
    "client.id",
    "config.providers",
    "config.storage.replication.factor",
    "config.storage.topic",
    "connect.protocol",
    "connections.max.idle.ms",
    "connector.client.config.override.policy",
    "exactly.once.source.support",
    "group.id",
    "header.converter",
    "header.converter.plugin.version",
    "heartbeat.interval.ms",
    "inter.worker.key.generation.algorithm",
    "inter.worker.key.size",
    "inter.worker.key.ttl.ms",
    "inter.worker.signature.algorithm",
    "inter.worker.verification.algorithms",
    "key.converter",
    "key.converter.plugin.version",
    "listeners",
    "metadata.max.age.ms",
    "metadata.recovery.rebootstrap.trigger.ms",
    "metadata.recovery.strategy",
    "metric.reporters",
    "metrics.num.samples",
    "metrics.recording.level",
    "metrics.sample.window.ms",
    "offset.flush.interval.ms",
    "offset.flush.timeout.ms",
    "offset.storage.partitions",
    "offset.storage.replication.factor",
    "offset.storage.topic",
    "plugin.discovery",
    "plugin.path",
    "rebalance.timeout.ms",
    "receive.buffer.bytes",
    "reconnect.backoff.max.ms",
    "reconnect.backoff.ms",
    "request.timeout.ms",
    "response.http.headers.config",
    "rest.advertised.host.name",
    "rest.advertised.listener",
    "rest.advertised.port",
    "rest.extension.classes",
    "retry.backoff.max.ms",
    "retry.backoff.ms",
    "scheduled.rebalance.max.delay.ms",
    "send.buffer.bytes",
    "session.timeout.ms",
    "socket.connection.setup.timeout.max.ms",
    "socket.connection.setup.timeout.ms",
    "ssl.client.auth",
    "status.storage.partitions",
    "status.storage.replication.factor",
    "status.storage.topic",
    "task.shutdown.graceful.timeout.ms",
    "topic.creation.enable",
    "topic.tracking.allow.reset",
    "topic.tracking.enable",
    "value.converter",
    "value.converter.plugin.version",
    "worker.sync.timeout.ms",
    "worker.unsync.backoff.ms",
})

# connect/runtime ConnectorConfig.java configDef() + SourceConnectorConfig.java configDef().
CONNECTOR_FRAMEWORK_KEYS: Final[frozenset[str]] = frozenset({
    "config.action.reload",
    "connector.class",
    "connector.plugin.version",
    "errors.log.enable",
    "errors.log.include.messages",
    "errors.retry.delay.max.ms",
    "errors.retry.timeout",
    "errors.tolerance",
    "exactly.once.support",
    "header.converter",
    "header.converter.plugin.version",
    "key.converter",
    "key.converter.plugin.version",
    "name",
    "offsets.storage.topic",
    "predicates",
    "tasks.max",
    "tasks.max.enforce",
    "topic.creation.groups",
    "transaction.boundary",
    "transaction.boundary.interval.ms",
    "transforms",
    "value.converter",
    "value.converter.plugin.version",
})

# Prefixes whose sub-keys are free-form (not ConfigDef names), each with where the sources read it:
MM2_KEY_PREFIXES: Final[frozenset[str]] = frozenset({
    # AbstractConfig.java / WorkerConfig.java / Plugins.newConfigProvider: config.providers.<name>.class and
    # config.providers.<name>.param.<param>
    "config.providers.",
    # MirrorClientConfig.java / MirrorConnectorConfig.java *_CLIENT_PREFIX; MirrorMakerConfig.clusterProps
    "producer.",
    "consumer.",
    "admin.",
    # MirrorMakerConfig.java SOURCE_CLUSTER_PREFIX, TARGET_CLUSTER_PREFIX, SOURCE_PREFIX, TARGET_PREFIX
    "source.cluster.",
    "target.cluster.",
    "source.",
    "target.",
    # ConnectorConfig.java CONNECTOR_CLIENT_{PRODUCER,CONSUMER,ADMIN}_OVERRIDES_PREFIX
    "producer.override.",
    "consumer.override.",
    "admin.override.",
    # ConnectorConfig.java: transforms.<alias>.{type,predicate,negate,plugin.version,...}, predicates.<alias>.*
    "transforms.",
    "predicates.",
    # SourceConnectorConfig.java TOPIC_CREATION_PREFIX (topic.creation.default.*, topic.creation.<group>.*)
    "topic.creation.",
    # DistributedConfig.java {OFFSET,CONFIG,STATUS}_STORAGE_PREFIX: extra settings of Connect's internal topics
    "offset.storage.",
    "config.storage.",
    "status.storage.",
    # Plugins.java newConverter/newHeaderConverter: originalsWithPrefix("<converter key>.")
    "key.converter.",
    "value.converter.",
    "header.converter.",
    # rest/util/SSLUtils.java ("listeners.https.") and RestServerConfig.java ADMIN_LISTENERS_HTTPS_CONFIGS_PREFIX
    "listeners.https.",
    "admin.listeners.https.",
    # CommonClientConfigs.METRICS_CONTEXT_PREFIX (ConnectMetrics.java) and JmxReporter.METRICS_CONFIG_PREFIX
    "metrics.context.",
    "metrics.jmx.",
})

# config/connect-mirror-maker.properties: the bare names it uses. bootstrap.servers appears as A./B.<key>
# (cluster level), enabled and topics as A->B./B->A.<key> (flow level), the rest at top level;
# replication.policy.separator, sync.topic.acls.enabled and emit.heartbeats.interval.seconds are commented out.
CONNECT_MIRROR_MAKER_SAMPLE_KEYS: Final[frozenset[str]] = frozenset({
    "clusters",
    "bootstrap.servers",
    "enabled",
    "topics",
    "replication.factor",
    "checkpoints.topic.replication.factor",
    "heartbeats.topic.replication.factor",
    "offset-syncs.topic.replication.factor",
    "offset.storage.replication.factor",
    "status.storage.replication.factor",
    "config.storage.replication.factor",
    "replication.policy.separator",
    "sync.topic.acls.enabled",
    "emit.heartbeats.interval.seconds",
})

# Every ConfigDef name MirrorMaker 2 4.x knows, excluding MM2_REMOVED_IN_4_0 (and the task.index /
# task.assigned.* keys the connectors write for their tasks themselves).
MM2_ALL_KNOWN_KEYS: Final[frozenset[str]] = (
    MM2_TOP_LEVEL_KEYS | MM2_CLIENT_KEYS | MM2_CONNECTOR_KEYS | CONNECT_WORKER_KEYS | CONNECTOR_FRAMEWORK_KEYS
)

# Names above that no 4.0.0 ConfigDef defines -> the 4.x line that introduced them (jars compared: 4.0.0,
# 4.1.0, 4.2.0, 4.3.1). 4.1: KIP-891 plugin versions and new SASL/OAUTHBEARER client keys; 4.3: metric.names.formats.
KEYS_ADDED_SINCE_4_0: Final[Mapping[str, str]] = MappingProxyType({
    "connector.plugin.version": "4.1",
    "header.converter.plugin.version": "4.1",
    "key.converter.plugin.version": "4.1",
    "metric.names.formats": "4.3",
    "sasl.oauthbearer.assertion.algorithm": "4.1",
    "sasl.oauthbearer.assertion.claim.aud": "4.1",
    "sasl.oauthbearer.assertion.claim.exp.seconds": "4.1",
    "sasl.oauthbearer.assertion.claim.iss": "4.1",
    "sasl.oauthbearer.assertion.claim.jti.include": "4.1",
    "sasl.oauthbearer.assertion.claim.nbf.seconds": "4.1",
    "sasl.oauthbearer.assertion.claim.sub": "4.1",
    "sasl.oauthbearer.assertion.file": "4.1",
    "sasl.oauthbearer.assertion.private.key.file": "4.1",
    "sasl.oauthbearer.assertion.private.key.passphrase": "4.1",
    "sasl.oauthbearer.assertion.template.file": "4.1",
    "sasl.oauthbearer.client.credentials.client.id": "4.1",
    "sasl.oauthbearer.client.credentials.client.secret": "4.1",
    "sasl.oauthbearer.jwt.retriever.class": "4.1",
    "sasl.oauthbearer.jwt.validator.class": "4.1",
    "sasl.oauthbearer.scope": "4.1",
    "value.converter.plugin.version": "4.1",
})
