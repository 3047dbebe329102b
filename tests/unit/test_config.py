import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mirror_core.config.errors import ConfigError
from mirror_core.config.loader import parse_text
from mirror_core.policy import IdentityReplicationPolicy
from tests.unit.stores import make_ca_pem

CA_PEM = make_ca_pem()
BASE = "clusters = dc1, dc2\ndc1.bootstrap.servers = a:1\ndc2.bootstrap.servers = b:2\n"


def load(extra: str):  # type: ignore[no-untyped-def]
    return parse_text(BASE + extra, validate_clients=False)


def test_flow_override_beats_global_and_defaults_apply() -> None:
    c = load("dc1->dc2.enabled = true\nrefresh.topics.interval.seconds = 30\n"
             "dc1->dc2.refresh.topics.interval.seconds = 5\ndc2->dc1.enabled = false\n")
    assert [f.name for f in c.flows] == ["dc1->dc2"]
    f = c.flows[0]
    assert f.refresh_topics_interval_s == 5
    assert f.sync_topic_configs_interval_s == 600  # MM2 default
    assert f.topics.accepts("orders") and not f.topics.accepts("x.internal") and not f.topics.accepts("__c")


def test_mm2_aliases_policy_and_client_translation(tmp_path) -> None:  # type: ignore[no-untyped-def]
    ca = tmp_path / "ca.pem"
    ca.write_text(CA_PEM)
    c = load("dc1->dc2.enabled = true\ntopics.blacklist = secret.*\n"
             "replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy\n"
             "dc1.security.protocol = SASL_SSL\ndc1.sasl.mechanism = SCRAM-SHA-512\n"
             'dc1.sasl.jaas.config = org.apache.kafka.common.security.scram.ScramLoginModule required '
             'username="alice" password="s3cret";\n'
             f"dc1.ssl.truststore.location = {ca}\ndc1.ssl.truststore.type = PEM\n"
             "dc2.producer.max.request.size = 2000000\ndc1->dc2.consumer.group.id = g1\n")
    f = c.flows[0]
    assert isinstance(f.policy, IdentityReplicationPolicy)
    assert not f.topics.accepts("secret.stuff") and f.topics.accepts("orders")
    consumer = c.clusters["dc1"].client_settings("consumer")
    assert consumer["sasl.username"] == "alice" and consumer["sasl.password"] == "s3cret"
    assert consumer["ssl.ca.location"] == str(ca)
    assert c.clusters["dc2"].client_settings("producer")["message.max.bytes"] == "2000000"
    assert "message.max.bytes" not in c.clusters["dc2"].client_settings("consumer")
    assert f.worker_group_id == "g1"
    assert "s3cret" not in str(c.clusters["dc1"].redacted())


def test_warnings_for_unknown_and_ignored_keys() -> None:
    c = load("dc1->dc2.enabled = true\ntasks.max = 4\nbogus.key = 1\ndc1->dc2.whatever = 2\n")
    text = "\n".join(c.warnings)
    assert "tasks.max" in text and "'bogus.key'" in text and "dc1->dc2.whatever" in text


def test_a_producer_pool_on_an_exactly_once_flow_is_a_warning_not_silence() -> None:
    c = load("dc1->dc2.enabled = true\nreplication.producers = 3\ndc1->dc2.exactly.once.enabled = true\n")
    [warning] = [w for w in c.warnings if "replication.producers" in w]
    assert "line 5" in warning and "dc1->dc2" in warning and "exactly.once.slots" in warning
    assert c.flows[0].exactly_once and c.flows[0].producers == 3  # the value stays; the flow does not use it
    assert not [w for w in load("dc1->dc2.enabled = true\nreplication.producers = 3\n").warnings
                if "replication.producers" in w]


@pytest.mark.parametrize(("extra", "key", "line"), [
    ("dc1->dc2.enabled = maybe\n", "dc1->dc2.enabled", 4),
    ("dc1->dc2.enabled = true\nreplication.factor = many\n", "replication.factor", 5),
    ("dc1->dc2.enabled = true\ndc1.ssl.truststore.location = /nonexistent/truststore.jks\n",
     "dc1.ssl.truststore.location", 5),
    ("dc1->dc9.enabled = true\n", "dc1->dc9.enabled", 4),
    ("dc1->dc1.enabled = true\n", "dc1->dc1.enabled", 4),
    ("dc2->dc1.enabled = false\n", "enabled", None),
    ("dc1->dc2.enabled = true\ndc1->dc2.topics.exclude = (\n", "dc1->dc2.topics.exclude", 5),
])
def test_errors_name_key_and_line(extra: str, key: str, line: int | None) -> None:
    with pytest.raises(ConfigError) as err:
        load(extra)
    assert err.value.key == key
    assert err.value.line == line
    assert key in str(err.value)


TOKENS = st.sampled_from(["clusters", "enabled", "true", "bootstrap.servers", "dc1", "dc2", "->", ".", "=",
                          ":", "\\", " ", "\n", "#", "!", ",", "*", "(", "topics", "\\u00", "replication.factor"])


@settings(max_examples=300, deadline=None)
@given(st.lists(TOKENS, max_size=40).map("".join))
def test_any_text_gives_a_config_or_a_config_error(text: str) -> None:
    """Never a traceback: arbitrary input yields a config or a ConfigError naming the problem."""
    for candidate in (text, BASE + text):
        try:
            parse_text(candidate, validate_clients=False)
        except ConfigError as exc:
            assert str(exc)


def test_disabled_flows_are_standby_and_only_explicit_ones() -> None:
    c = load("dc1->dc2.enabled = true\ndc2->dc1.enabled = false\ndc2->dc1.topics = orders\n")
    assert [f.name for f in c.flows] == ["dc1->dc2"]
    assert [f.name for f in c.standby_flows] == ["dc2->dc1"]
    assert c.flow("dc2->dc1").topics.accepts("orders") and not c.flow("dc2->dc1").topics.accepts("other")
    with pytest.raises(KeyError, match="standby: dc2->dc1"):
        c.flow("dc1->dc3")
    # A flow mentioned without 'enabled' is neither running nor standby (MirrorMaker 2's reading).
    assert load("dc1->dc2.enabled = true\ndc2->dc1.topics = x\n").standby_flows == ()


FLOW = "dc1->dc2.enabled = true\n"  # line 4


@pytest.mark.parametrize(("extra", "key", "line"), [
    (FLOW + "dc1->dc2.consumer.group.id = g\ndc1->dc2.producer.linger.ms = soon\n", "dc1->dc2.producer.linger.ms", 6),
    (FLOW + "dc1->dc2.producer.compression.type = zip\n", "dc1->dc2.producer.compression.type", 5),
    # A standby flow is validated too: a workflow may start it at any time.
    (FLOW + "dc2->dc1.enabled = false\ndc2->dc1.consumer.fetch.min.bytes = many\n",
     "dc2->dc1.consumer.fetch.min.bytes", 6),
])
def test_flow_client_overrides_are_validated_like_cluster_settings(extra: str, key: str, line: int) -> None:
    with pytest.raises(ConfigError) as err:
        parse_text(BASE + extra)
    assert (err.value.key, err.value.line) == (key, line)
    assert key in str(err.value) and f"line {line}" in str(err.value)


@pytest.mark.parametrize(("extra", "written", "line", "suggestion"), [
    (FLOW + "dc1->dc2.consumer.fetch.foo = 1\n", "dc1->dc2.consumer.fetch.foo", 5, ""),
    (FLOW + "dc2->dc1.enabled = false\ndc2->dc1.consumer.fetch.min.byte = 1\n", "dc2->dc1.consumer.fetch.min.byte", 6,
     "did you mean 'fetch.min.bytes'?"),
    (FLOW + "dc1.ssl.truststore.locaton = /x.jks\n", "dc1.ssl.truststore.locaton", 5,
     "did you mean 'ssl.truststore.location'?"),
])
def test_unknown_client_settings_are_warnings_with_a_suggestion(extra: str, written: str, line: int,
                                                                suggestion: str) -> None:
    """As in Java clients ("supplied but isn't a known config") and MirrorMaker 2: not fatal."""
    c = parse_text(BASE + extra)
    [warning] = [w for w in c.warnings if written in w]
    assert f"line {line}" in warning and "unknown client setting" in warning and suggestion in warning
    assert written.rsplit(".", 3)[-1] not in str(c.clusters["dc1"].client_settings("consumer"))


def test_valid_flow_client_overrides_pass_and_admin_overrides_are_not_per_flow() -> None:
    c = parse_text(BASE + FLOW + "dc1->dc2.consumer.group.id = g\ndc1->dc2.consumer.fetch.min.bytes = 1\n"
                   "dc1->dc2.producer.linger.ms = 5\ndc1->dc2.producer.max.request.size = 2000000\n"
                   "dc1->dc2.admin.request.timeout.ms = 5\n")
    f = c.flows[0]
    assert f.consumer_overrides == {"group.id": "g", "fetch.min.bytes": "1"}
    assert f.producer_overrides == {"linger.ms": "5", "message.max.bytes": "2000000"}
    assert any("dc1->dc2.admin.request.timeout.ms" in w and "no admin client overrides" in w for w in c.warnings)


@pytest.mark.parametrize(("extra", "key"), [
    ("c.security.protocol = SSL\n", "c.security.protocol"),
    ("x.bootstrap.servers = h:1\n", "x.bootstrap.servers"),
    ("x.ssl.truststore.location = /ca.pem\n", "x.ssl.truststore.location"),
    ("x.sasl.mechanism = PLAIN\n", "x.sasl.mechanism"),
    ("x.consumer.fetch.min.bytes = 1\n", "x.consumer.fetch.min.bytes"),
    ("dc3.producer.linger.ms = 5\n", "dc3.producer.linger.ms"),
    ("x.admin.request.timeout.ms = 5\n", "x.admin.request.timeout.ms"),
    ("x.client.id = me\n", "x.client.id"),
    ("x->dc1.enabled = true\n", "x->dc1.enabled"),
    ("dc2->x.topics = orders\n", "dc2->x.topics"),
])
def test_references_to_undefined_clusters_are_errors(extra: str, key: str) -> None:
    with pytest.raises(ConfigError) as err:
        load(FLOW + extra)
    assert (err.value.key, err.value.line) == (key, 5)
    assert "not listed in 'clusters'" in str(err.value) or "undefined cluster" in str(err.value)


def test_global_mm2_keys_with_dots_are_not_taken_for_clusters() -> None:
    c = load(FLOW + "replication.factor = 1\nsync.topic.configs.enabled = false\nemit.heartbeats.enabled = false\n"
             "config.properties.exclude = retention\\.ms\noffset-syncs.topic.replication.factor = 1\n"
             "heartbeats.topic.replication.factor = 1\nsecurity.protocol = PLAINTEXT\nssl.client.auth = none\n"
             "ssl.endpoint.identification.algorithm = https\nsasl.mechanism = PLAIN\nclient.id = mirror\n"
             "consumer.fetch.min.bytes = 1\nproducer.linger.ms = 5\nadmin.request.timeout.ms = 5\n"
             # Connect / MirrorMaker 2 connector-level keys: ignored with a warning, never errors.
             "connector.client.config.override.policy = All\nsource.consumer.fetch.min.bytes = 1\n"
             "target.admin.request.timeout.ms = 5\nlisteners.https.ssl.keystore.location = /k.p12\n"
             "offset.flush.timeout.ms = 5000\nkey.converter.schemas.enable = false\n")
    f = c.flows[0]
    assert f.replication_factor == 1 and not f.sync_topic_configs and not f.emit_heartbeats
    assert c.clusters["dc1"].client_settings("consumer")["fetch.min.bytes"] == "1"
    assert c.clusters["dc2"].client_settings("producer")["client.id"] == "mirror"


@pytest.mark.parametrize("scope", ["", "dc1->dc2."])
@pytest.mark.parametrize(("new", "old", "value_of"), [
    ("topics", "topics.whitelist", lambda f: str(f.topics.include)),
    ("topics.exclude", "topics.blacklist", lambda f: str(f.topics.exclude)),
    ("groups", "groups.whitelist", lambda f: str(f.groups.include)),
    ("groups.exclude", "groups.blacklist", lambda f: str(f.groups.exclude)),
])
@pytest.mark.parametrize("new_first", [True, False])
def test_current_name_beats_older_name_with_a_warning(scope: str, new: str, old: str, value_of,  # type: ignore[no-untyped-def]
                                                      new_first: bool) -> None:
    lines = [f"{scope}{new} = new-.*", f"{scope}{old} = old-.*"]
    if not new_first:
        lines.reverse()
    c = load(FLOW + "\n".join(lines) + "\n")
    assert value_of(c.flows[0]) == "new-.*"
    new_line, old_line = (5, 6) if new_first else (6, 5)
    [warning] = [w for w in c.warnings if f"'{scope}{old}'" in w]
    assert f"line {new_line}" in warning and f"line {old_line}" in warning
    assert f"'{scope}{new}' wins" in warning


def test_flow_older_name_still_beats_global_current_name_with_a_warning() -> None:
    c = load(FLOW + "topics.exclude = global-.*\ndc1->dc2.topics.blacklist = flow-.*\n")
    assert str(c.flows[0].topics.exclude) == "flow-.*"  # per-flow beats global, as documented
    assert any("dc1->dc2.topics.blacklist" in w and "line 5" in w and "dc1->dc2.topics.exclude" in w
               for w in c.warnings)


def test_global_enabled_has_no_effect_and_says_so() -> None:
    c = load(FLOW + "enabled = false\n")
    assert [f.name for f in c.flows] == ["dc1->dc2"]
    assert any("global 'enabled' has no effect" in w and "line 5" in w for w in c.warnings)
    with pytest.raises(ConfigError, match="global 'enabled' has no effect") as err:
        load("enabled = true\n")
    assert err.value.line == 4


def test_the_batches_data_path_is_the_default_and_refused_where_it_cannot_go_in_one_line_naming_the_key() -> None:
    default = load("dc1->dc2.enabled = true\n").flows[0]
    assert (default.data_path, default.data_path_reason) == ("batches", "auto (the default): batches")
    assert load("dc1->dc2.enabled = true\nreplication.data.path = records\n").flows[0].data_path == "records"
    assert load("dc1->dc2.enabled = true\nreplication.data.path = batches\n").flows[0].data_path == "batches"
    scram = ("dc1.security.protocol = SASL_SSL\ndc1.sasl.mechanism = SCRAM-SHA-256\n"
             'dc1.sasl.jaas.config = org.apache.kafka.common.security.scram.ScramLoginModule required '
             'username="alice" password="s3cret";\n')
    assert load(f"dc1->dc2.enabled = true\n{scram}dc1->dc2.replication.data.path = batches\n").flows[0].data_path \
        == "batches"
    oidc = ("dc1.security.protocol = SASL_SSL\ndc1.sasl.mechanism = OAUTHBEARER\n"
            "dc1.sasl.oauthbearer.token.endpoint.url = https://idp.example/token\n"
            'dc1.sasl.jaas.config = org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
            'clientId="mirror" clientSecret="s3cret";\n'
            "dc1.sasl.login.callback.handler.class = "
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler\n")
    assert load(f"dc1->dc2.enabled = true\n{oidc}dc1->dc2.replication.data.path = batches\n").flows[0].data_path \
        == "batches"
    eos = load("dc1->dc2.enabled = true\ndc1->dc2.exactly.once.enabled = true\ndc1->dc2.replication.data.path = auto\n")
    assert (eos.flows[0].data_path, eos.flows[0].data_path_reason) == ("batches", "auto: batches")
    kerberos = "dc2.security.protocol = SASL_PLAINTEXT\ndc2.sasl.mechanism = GSSAPI\n"
    assert load(f"dc1->dc2.enabled = true\n{kerberos}dc1->dc2.replication.data.path = batches\n").flows[0].data_path \
        == "batches"
    unsecured = ("dc1.security.protocol = SASL_PLAINTEXT\ndc1.sasl.mechanism = OAUTHBEARER\n"
                 'dc1.sasl.jaas.config = org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
                 'unsecuredLoginStringClaim_sub="alice";\n')
    # Exactly-once copies batches with the identity policy too (each slot's producer id recorded).
    assert load("dc1->dc2.enabled = true\nreplication.policy.class = IdentityReplicationPolicy\n"
                "dc1->dc2.replication.data.path = batches\ndc1->dc2.exactly.once.enabled = true\n"
                ).flows[0].data_path == "batches"
    for extra, says in [
        ("dc1->dc2.replication.data.path = sideways\n", "sideways"),
        # OAUTHBEARER without an OIDC endpoint: unsecured JWTs
        (f"{unsecured}dc1->dc2.replication.data.path = batches\n",
         "cluster dc1 logs in with OAUTHBEARER and unsecured JWTs"),
        # A flow's own consumer settings are read on top of the cluster's, as the clients read them.
        (f"{unsecured}dc1->dc2.consumer.fetch.max.bytes = 1048576\ndc1->dc2.replication.data.path = batches\n",
         "cluster dc1 logs in with OAUTHBEARER and unsecured JWTs"),
    ]:
        with pytest.raises(ConfigError) as err:
            load(f"dc1->dc2.enabled = true\n{extra}")
        assert says in str(err.value) and "replication.data.path" in str(err.value) and "\n" not in str(err.value)


def test_records_in_flight_auto_follows_the_data_path_and_a_number_applies_to_both() -> None:
    records = load("dc1->dc2.enabled = true\nreplication.data.path = records\n").flows[0]
    assert records.in_flight_records_limit == 500_000 and records.max_in_flight_bytes == 64 << 20
    batches = load("dc1->dc2.enabled = true\nreplication.data.path = batches\n").flows[0]
    assert batches.in_flight_records_limit is None  # its bytes bound it
    both = load("dc1->dc2.enabled = true\nreplication.data.path = batches\nreplication.max.in.flight.records = "
                "2000000\ndc1->dc2.replication.max.in.flight.bytes = 67108864\n").flows[0]
    assert both.in_flight_records_limit == 2_000_000 and both.max_in_flight_bytes == 64 << 20
    for bad in ("replication.max.in.flight.bytes = 1000", "replication.max.in.flight.records = many"):
        with pytest.raises(ConfigError) as err:
            load(f"dc1->dc2.enabled = true\n{bad}\n")
        assert err.value.key == bad.split(" =")[0] and err.value.line == 5 and "\n" not in str(err.value)


def test_batches_refuses_in_one_line_a_tls_setting_the_mirrors_own_client_does_not_honour() -> None:
    tls = "dc1.security.protocol = SSL\n"
    assert load(f"dc1->dc2.enabled = true\n{tls}dc1.ssl.cipher.suites = ECDHE-RSA-AES128-GCM-SHA256\n"
                "dc1.ssl.curves.list = P-256\ndc1->dc2.replication.data.path = batches\n").flows[0].data_path \
        == "batches"
    for extra, says in [
        ("dc1.ssl.sigalgs.list = ECDSA+SHA256\n", "cluster dc1 sets ssl.sigalgs.list, which the mirror's own client "
                                                  "does not honour"),
        ("dc1->dc2.consumer.ssl.engine.id = pkcs11\n", "cluster dc1 sets ssl.engine.id"),  # the flow's own consumer
        ("dc1.ssl.curves.list = P-256:X25519\n", "cluster dc1 sets ssl.curves.list to a list (P-256:X25519)"),
    ]:
        with pytest.raises(ConfigError) as err:
            load(f"dc1->dc2.enabled = true\n{tls}{extra}dc1->dc2.replication.data.path = batches\n")
        message = str(err.value)
        assert says in message and "use replication.data.path = records" in message and "\n" not in message
        assert err.value.key == "dc1->dc2.replication.data.path"
    # the target's producer counts too; without TLS the ssl.* settings are read by neither client
    with pytest.raises(ConfigError, match=r"cluster dc2 sets ssl\.providers"):
        load("dc1->dc2.enabled = true\ndc2.security.protocol = SSL\ndc2.ssl.providers = legacy\n"
             "replication.data.path = batches\n")
    assert load("dc1->dc2.enabled = true\ndc1.ssl.sigalgs.list = ECDSA+SHA256\nreplication.data.path = batches\n"
                ).flows[0].data_path == "batches"


def test_auto_takes_batches_where_the_flow_allows_and_says_why_not_otherwise() -> None:
    def flow(extra: str):  # type: ignore[no-untyped-def]
        return load(f"dc1->dc2.enabled = true\nreplication.data.path = auto\n{extra}").flows[0]

    records = load("dc1->dc2.enabled = true\nreplication.data.path = records\n").flows[0]
    assert (records.data_path, records.data_path_reason) == ("records", "replication.data.path = records")
    chosen = load("dc1->dc2.enabled = true\nreplication.data.path = batches\n").flows[0]
    assert chosen.data_path_reason == "replication.data.path = batches"
    assert (flow("").data_path, flow("").data_path_reason) == ("batches", "auto: batches")
    assert flow("").in_flight_records_limit is None  # as batches
    # The identity policy's cycles are prevented by producer id on batches (replication/mirror_writes.py).
    identity = flow("replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy\n")
    assert (identity.data_path, identity.data_path_reason) == ("batches", "auto: batches")
    # Exactly-once copies whole batches in transactions (replication/batch_transactions.py), with either policy.
    assert (flow("exactly.once.enabled = true\n").data_path, flow("exactly.once.enabled = true\n").data_path_reason) \
        == ("batches", "auto: batches")
    eos_identity = flow("exactly.once.enabled = true\nreplication.policy.class = "
                        "org.apache.kafka.connect.mirror.IdentityReplicationPolicy\n")
    assert (eos_identity.data_path, eos_identity.data_path_reason) == ("batches", "auto: batches")
    for extra, reason in [
        ("dc1.security.protocol = SSL\ndc1.ssl.sigalgs.list = ECDSA+SHA256\n",
         "auto: records, because cluster dc1 sets ssl.sigalgs.list, which the mirror's own client does not honour"),
        ("dc2.security.protocol = SASL_PLAINTEXT\ndc2.sasl.mechanism = OAUTHBEARER\n"
         'dc2.sasl.jaas.config = org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
         'unsecuredLoginStringClaim_sub="alice";\n',
         "auto: records, because cluster dc2 logs in with OAUTHBEARER and unsecured JWTs"),
    ]:
        f = flow(extra)
        assert f.data_path == "records" and f.data_path_reason.startswith(reason) and "\n" not in f.data_path_reason
    # decided per flow: the reverse flow with its own obstacle, the other one on batches
    c = load("dc1->dc2.enabled = true\ndc2->dc1.enabled = true\nreplication.data.path = auto\n"
             "dc2->dc1.schema.ids = translate\ndc1.schema.registry.url = http://r:1\n"
             "dc2.schema.registry.url = http://r:2\n")
    assert [(f.name, f.data_path) for f in c.flows] == [("dc1->dc2", "batches"), ("dc2->dc1", "records")]


def test_the_key_says_auto_is_the_default() -> None:
    from mirror_core.config.keys import KEYS_BY_NAME

    key = KEYS_BY_NAME["replication.data.path"]
    assert key.default == "auto" and "auto is the default" in key.doc
