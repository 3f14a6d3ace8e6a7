"""Options of the Kafka log backend, and the one place a client is chosen.

Keys are first spelled one way (:mod:`~pyspark_durable.log.kafka.spelling`:
``kafka.bootstrap.servers`` = ``bootstrap_servers``). After that, a key must be one of
this backend's own options (:data:`OWN_OPTIONS`) or a kafka-python config name (``KafkaProducer``,
``KafkaConsumer`` or ``KafkaAdminClient`` ``DEFAULT_CONFIG``); each kafka-python
option goes to every client that knows it. With ``client=confluent`` (librdkafka,
``pyspark_durable[kafka]``, the default) a key may also be any librdkafka property, and
kafka-python names are translated to librdkafka's
(:mod:`~pyspark_durable.log.kafka.librdkafka`). String values are coerced to the type
of the option's default (Spark passes every option as a string).

Options that would break the log's guarantees are refused (:data:`FORBIDDEN`), as
are unknown ones, with the list of valid names.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark_durable.errors import ConfigError
from pyspark_durable.log.kafka.api import KafkaClient
from pyspark_durable.log.kafka.spelling import normalize_key
from pyspark_durable.log.kafka.topics import RETENTION_KEYS

CLIENT_MODULES = {"kafka-python": "pyspark_durable.log.kafka.kafka_python",
                  "confluent": "pyspark_durable.log.kafka.confluent"}


def client_for(name: str) -> KafkaClient:
    """The implementation of client ``name`` (its module is imported only when chosen):
    the only place that maps a client's name to code."""
    return importlib.import_module(CLIENT_MODULES[name]).CLIENT


FORBIDDEN: dict[str, str] = {
    "acks": "appends are durable only with acks=all, which the backend forces",
    "request_required_acks": "appends are durable only with acks=all, which the backend forces",
    "enable_partition_eof": "reads need the end-of-partition events (forced on, confluent)",
    "enable_idempotence": "retried sends must not duplicate entries (forced on)",
    "key_serializer": "keys are bytes, passed through unchanged",
    "value_serializer": "values are bytes, passed through unchanged",
    "key_deserializer": "keys are bytes, passed through unchanged",
    "value_deserializer": "values are bytes, passed through unchanged",
    "auto_offset_reset": "a read must fail on a missing offset, never jump (forced 'none')",
    "enable_auto_commit": "reads use assign()/seek(), not consumer-group offsets",
    "isolation_level": "exactly-once comes from the WAL's step commits, not transactions",
    "group_id": "reads use assign()/seek(), never consumer groups",
    "transactional_id": "exactly-once comes from the WAL's step commits, not transactions",
    "allow_auto_create_topics": "topics are created explicitly with one partition",
    "check_crcs": "corrupt entries must be detected (always checked)",
}

# this backend's own options and their defaults (kafka-python ones may share a name)
OWN_OPTIONS: dict[str, Any] = {
    "bootstrap_servers": None,
    "connect_timeout_ms": 10_000,
    "request_timeout_ms": 30_000,
    "replication_factor": -1,  # -1: the broker's default.replication.factor
    "min_insync_replicas": None,  # None: the broker's min.insync.replicas
    "topic_config": None,  # extra topic configs for created topics, e.g. min.insync.replicas
    "client": None,  # "confluent" (librdkafka) if installed, else "kafka-python": resolve_client
}
CLIENT_NAMES = tuple(CLIENT_MODULES)

def _coerce(name: str, value: Any, default: Any) -> Any:
    """Spark options are strings: give them the type of the option's default."""
    if not isinstance(value, str) or default is None or isinstance(default, str):
        return value
    try:
        if isinstance(default, bool):
            if value.lower() not in ("true", "false"):
                raise ValueError(value)
            return value.lower() == "true"
        if isinstance(default, int):
            return int(value)
        if isinstance(default, float):
            return float(value)
    except ValueError:
        raise ConfigError(
            f"option {name}={value!r} is not a valid {type(default).__name__}"
        ) from None
    return value


def confluent_installed() -> bool:
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        return False
    return True


def resolve_client(value: Any) -> str:
    """The Kafka client: ``confluent`` (librdkafka) when installed, else ``kafka-python``.

    librdkafka moves several times kafka-python's bytes, in C threads that do not hold
    the GIL. A topic recreated under it with another partition count is a typed error,
    not a crash, on Apache Kafka
    (``test_a_recreated_topic_is_a_typed_error_on_both_clients``).
    kafka-python stays the pure-Python fallback, chosen with ``client=kafka-python``.
    """
    if value is None or value == "":
        return "confluent" if confluent_installed() else "kafka-python"
    name = str(value).lower().replace("_", "-")
    if name not in CLIENT_NAMES:
        raise ConfigError(f"option client={value!r} is invalid; valid: {', '.join(CLIENT_NAMES)}")
    if name == "confluent" and not confluent_installed():
        raise ConfigError("option client='confluent' needs the confluent-kafka package: "
                          "pip install 'pyspark_durable[kafka]'")
    return name


@dataclass
class KafkaSettings:
    """Parsed options: our own ones, and the config of each client (kafka-python kwargs,
    or librdkafka properties when ``client`` is ``confluent``)."""

    bootstrap_servers: str
    connect_timeout_ms: int
    request_timeout_ms: int
    replication_factor: int
    topic_config: dict[str, str]
    clients: dict[str, dict[str, Any]] = field(default_factory=dict)
    client: str = "confluent"
    delivery_timeout_ms: int = 0

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> KafkaSettings:
        merged: dict[str, Any] = {}
        spelled: dict[str, str] = {}
        # librdkafka validates its own property names when a client is built
        client = resolve_client(next((v for k, v in options.items()
                                      if normalize_key(str(k)) == "client"), None))
        impl = client_for(client)
        from pyspark_durable.log.kafka.auth import security_options  # JAAS; secrets noted

        options = security_options(options, client)
        for raw, value in options.items():
            if value is None:
                continue
            name = normalize_key(str(raw))
            if name in FORBIDDEN:
                raise ConfigError(f"option {raw!r} cannot be set: {FORBIDDEN[name]}")
            if impl.keys is not None and name not in OWN_OPTIONS and name not in impl.keys():
                valid = sorted((set(OWN_OPTIONS) | impl.keys()) - set(FORBIDDEN))
                raise ConfigError(
                    f"unknown kafka backend option {raw!r}; valid (optionally prefixed "
                    f"'kafka.', '.' for '_'): {', '.join(valid)}"
                )
            if name in merged:
                raise ConfigError(f"option {raw!r} given twice (also as {spelled[name]!r})")
            merged[name], spelled[name] = value, str(raw)
        for name, value in list(merged.items()):
            # librdkafka takes every property as text and checks it itself
            default = OWN_OPTIONS.get(name) if impl.default_of is None or name in OWN_OPTIONS \
                else impl.default_of(name)
            merged[name] = _coerce(spelled[name], value, default)
        servers = merged.get("bootstrap_servers")
        if not servers:
            raise ConfigError("the kafka backend needs bootstrap_servers (host:port[,host:port])")
        if not isinstance(servers, str):
            servers = ",".join(servers)
        own = {k: merged.pop(k, d) for k, d in OWN_OPTIONS.items()}
        if int(own["connect_timeout_ms"]) <= 0 or int(own["request_timeout_ms"]) <= 0:
            raise ConfigError("connect_timeout_ms and request_timeout_ms must be positive")
        if not isinstance(own["topic_config"] or {}, Mapping):
            raise ConfigError(f"topic_config must be a mapping, got {own['topic_config']!r}")
        topic_config = {str(k): str(v) for k, v in (own["topic_config"] or {}).items()}
        refused = sorted(set(topic_config) & set(RETENTION_KEYS))
        if refused:
            raise ConfigError(f"topic_config {refused} cannot be set: only the WAL's cleaner "
                              "deletes records (its topics keep retention.ms=-1, "
                              "retention.bytes=-1; set a retention policy on the namespace)")
        for name in ("replication_factor", "min_insync_replicas"):
            value = own[name]
            try:
                own[name] = None if value is None else int(value)
            except (TypeError, ValueError):
                raise ConfigError(f"option {spelled.get(name, name)}={value!r} is not an "
                                  "integer") from None
        if own["replication_factor"] == 0 or own["replication_factor"] < -1:
            raise ConfigError(f"option replication_factor={own['replication_factor']} is "
                              "invalid: a positive count, or -1 for the broker's default")
        if own["min_insync_replicas"] is not None:
            if own["min_insync_replicas"] < 1:
                raise ConfigError(f"option min_insync_replicas={own['min_insync_replicas']} "
                                  "is invalid: at least 1")
            topic_config.setdefault("min.insync.replicas", str(own["min_insync_replicas"]))
        configs, delivery_ms = impl.configs(servers, own, merged)
        return cls(servers, int(own["connect_timeout_ms"]), int(own["request_timeout_ms"]),
                   int(own["replication_factor"]), topic_config, configs, client, delivery_ms)

    @property
    def wait_s(self) -> float:
        """How long a synchronous append waits for its acks: past the client's own
        delivery timeout, whose typed failure names the cause, by a request's length."""
        return (self.request_timeout_ms + self.delivery_timeout_ms) / 1000 + 5


