"""The Kafka backend's own options are a table (log/kafka/settings.py, OWN_OPTIONS): each
option's parser, minimum and field. Parsing connects to nothing, so no broker runs here;
tests/log/kafka/test_kafka_backend.py checks the options against a real broker."""

from __future__ import annotations

import pytest

from pyspark_durable.errors import ConfigError
from pyspark_durable.log.kafka.settings import CLIENT_NAMES, OWN_OPTIONS, KafkaSettings

SERVERS = "127.0.0.1:9"


@pytest.mark.parametrize("client", CLIENT_NAMES)
def test_own_options_given_as_spark_strings_are_typed_into_their_fields(client):
    """This tests that own options given as Spark's strings, in any spelling, reach their
    KafkaSettings fields typed, and min.insync.replicas reaches the topic configs."""
    settings = KafkaSettings.parse(
        {
            "kafka.bootstrap.servers": SERVERS,
            "kafka.client": client,
            "connect.timeout.ms": "5000",
            "request_timeout_ms": " 7000 ",
            "kafka.replication.factor": "3",
            "kafka.min.insync.replicas": "2",
            "topic_config": {"segment.ms": 100},
        }
    )
    assert (settings.bootstrap_servers, settings.client) == (SERVERS, client)
    assert (settings.connect_timeout_ms, settings.request_timeout_ms) == (5000, 7000)
    assert settings.replication_factor == 3
    assert settings.topic_config == {"segment.ms": "100", "min.insync.replicas": "2"}
    defaults = KafkaSettings.parse({"bootstrap_servers": [SERVERS, "127.0.0.1:10"], "client": client})
    assert defaults.bootstrap_servers == f"{SERVERS},127.0.0.1:10"
    assert (defaults.replication_factor, defaults.topic_config) == (-1, {})
    assert defaults.connect_timeout_ms == OWN_OPTIONS["connect_timeout_ms"].default


def test_confluent_compresses_batches_with_lz4_unless_the_options_say_otherwise():
    """This tests that the confluent producer compresses its batches with lz4 by default,
    that a user's compression (in either client's spelling) wins, and that no consumer
    is handed a producer-only property (librdkafka would warn about it on every open)."""
    def clients(**given: str) -> dict:
        return KafkaSettings.parse({"bootstrap_servers": SERVERS, "client": "confluent",
                                    **given}).clients
    default = clients()
    assert default["producer"]["compression.type"] == "lz4"
    assert clients(**{"kafka.compression.type": "none"})["producer"]["compression.type"] == "none"
    assert clients(compression_type="zstd")["producer"]["compression.type"] == "zstd"
    for given in ({}, {"kafka.compression.type": "gzip", "kafka.linger.ms": "2"}):
        consumer = clients(**given)["consumer"]
        assert not {"compression.type", "compression.codec", "linger.ms"} & set(consumer)


@pytest.mark.parametrize("name", [n for n, o in OWN_OPTIONS.items() if o.minimum is not None])
def test_each_own_options_minimum_is_taken_and_one_below_is_refused_naming_it(name):
    """This tests that an own option with a minimum takes it and refuses one less with a
    ConfigError naming the option (as spelled too), the value and what is allowed."""
    opt = OWN_OPTIONS[name]
    base = {"bootstrap_servers": SERVERS}
    KafkaSettings.parse({**base, name: str(opt.minimum)})
    below = opt.minimum - 1
    dotted = "kafka." + name.replace("_", ".")
    with pytest.raises(
        ConfigError,
        match=rf"option {name}={below} is invalid: at least {opt.minimum}"
        rf".* \(given as {dotted}='{below}'\)",
    ):
        KafkaSettings.parse({**base, dotted: str(below)})
    with pytest.raises(ConfigError, match=rf"option {dotted}='1\.5' is not an integer"):
        KafkaSettings.parse({**base, dotted: "1.5"})


def test_the_broker_default_below_a_minimum_is_taken():
    """This tests that replication_factor=-1, below its minimum of 1, is taken as the
    broker's default, while 0 and -2 are refused saying -1 is the way to ask for it."""
    assert (
        KafkaSettings.parse({"bootstrap_servers": SERVERS, "replication_factor": "-1"}).replication_factor
        == -1
    )
    for bad in ("0", "-2"):
        with pytest.raises(
            ConfigError,
            match=rf"replication_factor={bad} is invalid: at least 1, "
            "or -1 for the broker's default",
        ):
            KafkaSettings.parse({"bootstrap_servers": SERVERS, "replication_factor": bad})


def test_topic_config_is_a_mapping_without_retention():
    """This tests that topic_config must be a mapping and may not set the broker-side
    retention that would delete records behind the WAL's cleaner."""
    with pytest.raises(ConfigError, match=r"option topic_config='retention.ms=1' is not a mapping"):
        KafkaSettings.parse({"bootstrap_servers": SERVERS, "topic_config": "retention.ms=1"})
    with pytest.raises(ConfigError, match=r"topic_config \['cleanup.policy'\] cannot be set"):
        KafkaSettings.parse({"bootstrap_servers": SERVERS, "topic_config": {"cleanup.policy": "delete"}})
