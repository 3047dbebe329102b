import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mirror_core.config.errors import ConfigError
from mirror_core.config.loader import parse_text
from mirror_core.policy import IdentityReplicationPolicy

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


def test_mm2_aliases_policy_and_client_translation() -> None:
    c = load("dc1->dc2.enabled = true\ntopics.blacklist = secret.*\n"
             "replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy\n"
             "dc1.security.protocol = SASL_SSL\ndc1.sasl.mechanism = SCRAM-SHA-512\n"
             'dc1.sasl.jaas.config = org.apache.kafka.common.security.scram.ScramLoginModule required '
             'username="alice" password="s3cret";\n'
             "dc1.ssl.truststore.location = /etc/ca.pem\ndc1.ssl.truststore.type = PEM\n"
             "dc2.producer.max.request.size = 2000000\ndc1->dc2.consumer.group.id = g1\n")
    f = c.flows[0]
    assert isinstance(f.policy, IdentityReplicationPolicy)
    assert not f.topics.accepts("secret.stuff") and f.topics.accepts("orders")
    consumer = c.clusters["dc1"].client_settings("consumer")
    assert consumer["sasl.username"] == "alice" and consumer["sasl.password"] == "s3cret"
    assert consumer["ssl.ca.location"] == "/etc/ca.pem"
    assert c.clusters["dc2"].client_settings("producer")["message.max.bytes"] == "2000000"
    assert "message.max.bytes" not in c.clusters["dc2"].client_settings("consumer")
    assert f.worker_group_id == "g1"
    assert "s3cret" not in str(c.clusters["dc1"].redacted())


def test_warnings_for_unknown_and_ignored_keys() -> None:
    c = load("dc1->dc2.enabled = true\ntasks.max = 4\nbogus.key = 1\ndc1->dc2.whatever = 2\n")
    text = "\n".join(c.warnings)
    assert "tasks.max" in text and "'bogus.key'" in text and "dc1->dc2.whatever" in text


@pytest.mark.parametrize(("extra", "key", "line"), [
    ("dc1->dc2.enabled = maybe\n", "dc1->dc2.enabled", 4),
    ("dc1->dc2.enabled = true\nreplication.factor = many\n", "replication.factor", 5),
    ("dc1->dc2.enabled = true\ndc1.ssl.truststore.type = JKS\n", "dc1.ssl.truststore.type", 5),
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
