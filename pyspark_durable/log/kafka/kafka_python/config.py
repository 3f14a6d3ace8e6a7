"""The kwargs of a store's kafka-python clients (:func:`client_configs`), and the
clients made with them held to the log's rules (:func:`no_auto_create`).

The option keys kafka-python takes are its clients' ``DEFAULT_CONFIG`` names plus the
OAuth client-credentials options both clients take (:data:`OPTION_KEYS`); a Spark
option, a string, gets the type of its default (:func:`default_of`). The safety
settings are forced: acks=all and idempotence on the producer; no group, no
auto-commit, ``auto_offset_reset='none'`` and CRC checks on readers.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer

from pyspark_durable.errors import ConfigError
from pyspark_durable.log.kafka.kafka_python.tokens import TokenProvider, tokens_of
from pyspark_durable.log.kafka.oauth import OAUTH_KEYS
from pyspark_durable.secrets import KAFKA_PYTHON_LOGGERS, install_log_filter

log = logging.getLogger(__name__)

# kafka-python defaults we change, for throughput on batches of ~100 KB entries
TUNED: dict[str, Any] = {
    "linger_ms": 5,
    "batch_size": 1 << 20,
    "max_request_size": 16 << 20,
    "max_partition_fetch_bytes": 8 << 20,
    # a prefetch left at the end of a log blocks the next request on its connection
    # (ListOffsets, the next read) for up to this long: keep it short
    "fetch_max_wait_ms": 5,
    # kafka-python backs off reconnecting to a node up to 30 s (the Java client: 1 s), and
    # refreshes leaders every 5 minutes: after two of three nodes came back, a watermark
    # read timed out (3 s request timeout) on a node it had stopped trying. As librdkafka.
    "reconnect_backoff_max_ms": 1000,
    "metadata_max_age_ms": 2000,
}

CLIENTS: dict[str, type] = {
    "producer": KafkaProducer,
    "consumer": KafkaConsumer,
    "admin": KafkaAdminClient,
}
KAFKA_KEYS = frozenset().union(*(c.DEFAULT_CONFIG for c in CLIENTS.values()))  # type: ignore[attr-defined]
# kafka-python's names and the OAuth client-credentials options both clients take
OPTION_KEYS = KAFKA_KEYS | OAUTH_KEYS


def default_of(name: str) -> Any:
    """The default of a kafka-python option (its type is what a Spark string becomes)."""
    for kind_cls in CLIENTS.values():
        default = kind_cls.DEFAULT_CONFIG.get(name)  # type: ignore[attr-defined]
        if default is not None:
            return default
    return None


def client_configs(servers: str, own: Mapping[str, Any],
                   merged: dict[str, Any]) -> tuple[dict[str, dict[str, Any]], int]:
    """The kwargs of the producer, consumer and admin client, and the delivery timeout."""
    install_log_filter(KAFKA_PYTHON_LOGGERS, prefix="kafka.")  # SASL requests at DEBUG
    for k, v in TUNED.items():
        merged.setdefault(k, v)
    tokens = tokens_of(merged, int(own["request_timeout_ms"]) / 1000)
    if tokens is not None:
        merged["sasl_oauth_token_provider"] = TokenProvider(tokens)
    common = {
        "bootstrap_servers": servers.split(","),
        "bootstrap_timeout_ms": int(own["connect_timeout_ms"]),
        "request_timeout_ms": int(own["request_timeout_ms"]),
    }
    forced = {
        "producer": {"acks": "all", "enable_idempotence": True,
                     "allow_auto_create_topics": False},
        "consumer": {"group_id": None, "enable_auto_commit": False,
                     "auto_offset_reset": "none", "isolation_level": "read_uncommitted",
                     "check_crcs": True, "allow_auto_create_topics": False},
        "admin": {},
    }
    clients: dict[str, dict[str, Any]] = {}
    for kind, kind_cls in CLIENTS.items():
        keys = kind_cls.DEFAULT_CONFIG  # type: ignore[attr-defined]
        cfg = {k: v for k, v in {**common, **merged}.items() if k in keys}
        clients[kind] = {**cfg, **forced[kind]}
    prod = clients["producer"]
    # a send without its topic's metadata (a new producer) waits for a connect and two
    # requests (ApiVersions, Metadata): as long as a request, as librdkafka waits for
    # metadata within the message timeout. A dead link's send still fails within the
    # bound: request_timeout_ms and the probe stay below the delivery timeout + 2 s.
    prod.setdefault("max_block_ms", int(own["request_timeout_ms"]))
    prod.setdefault(
        "delivery_timeout_ms", int(own["request_timeout_ms"]) + int(prod["linger_ms"]) + 1000
    )
    return clients, int(prod["delivery_timeout_ms"])


def no_auto_create(client: Any) -> Any:
    """Make ``allow_auto_create_topics=False`` hold for the client's metadata requests.

    kafka-python 3.0.12 builds its cluster metadata without that setting, so a consumer
    that assigns (or a producer that sends to) a topic the broker does not have sends
    MetadataRequest(allow_auto_topic_creation=True), and a broker with
    ``auto.create.topics.enable`` creates the topic, with its default retention: a
    reader of a deleted WAL topic made it again (``test_kafka_python_never_auto_creates
    _a_topic``). The flag is set on the metadata object the client already holds.
    """
    cluster = getattr(client, "_cluster", None) or getattr(client, "_metadata", None)
    if cluster is None or not isinstance(getattr(cluster, "config", None), dict):
        raise ConfigError("kafka-python changed: cannot turn off topic auto-creation of "
                          f"{type(client).__name__}; use client=confluent")
    cluster.config["allow_auto_create_topics"] = False
    return client


def close_quietly(client: Any, **kwargs: Any) -> None:
    try:
        client.close(**kwargs)
    except Exception as exc:  # noqa: BLE001 - closing must not mask the real error
        log.debug("closing a Kafka client failed: %s", exc)
