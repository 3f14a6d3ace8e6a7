"""Options, error translation and topic administration of the Kafka log backend.

Option spelling (one rule, so YAML, Spark options and Python keywords all work):
a key may carry a ``kafka.`` prefix, and ``.``/``-`` count as ``_``; so
``kafka.bootstrap.servers``, ``bootstrap.servers`` and ``bootstrap_servers`` are one
option. After that, a key must be one of this backend's own options
(:data:`OWN_OPTIONS`) or a kafka-python config name (``KafkaProducer``,
``KafkaConsumer`` or ``KafkaAdminClient`` ``DEFAULT_CONFIG``); each kafka-python
option goes to every client that knows it. With ``client=confluent`` (librdkafka,
``pyspark_durable[kafka-fast]``) a key may also be any librdkafka property, and
kafka-python names are translated to librdkafka's
(:mod:`pyspark_durable.log.kafka_confluent`). String values are coerced to the type
of the option's default (Spark passes every option as a string).

Options that would break the log's guarantees are refused (:data:`FORBIDDEN`), as
are unknown ones, with the list of valid names.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import kafka.errors as kerr
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition

from pyspark_durable.errors import (
    BackendUnavailable,
    ConfigError,
    DurableWalError,
    OffsetOutOfRange,
)

log = logging.getLogger(__name__)
AUTO_CREATED_RETRIES = 3

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
    "topic_config": None,  # extra topic configs for created topics, e.g. min.insync.replicas
    "client": "kafka-python",  # or "confluent" (librdkafka): see resolve_client
}
CLIENT_NAMES = ("kafka-python", "confluent")

# kafka-python defaults we change, for throughput on batches of ~100 KB entries
TUNED: dict[str, Any] = {
    "linger_ms": 5,
    "batch_size": 1 << 20,
    "max_request_size": 16 << 20,
    "max_partition_fetch_bytes": 8 << 20,
    # a prefetch left at the end of a log blocks the next request on its connection
    # (ListOffsets, the next read) for up to this long: keep it short
    "fetch_max_wait_ms": 5,
}

CLIENTS: dict[str, type] = {
    "producer": KafkaProducer,
    "consumer": KafkaConsumer,
    "admin": KafkaAdminClient,
}
KAFKA_KEYS = frozenset().union(*(c.DEFAULT_CONFIG for c in CLIENTS.values()))  # type: ignore[attr-defined]


def normalize_key(key: str) -> str:
    """``kafka.bootstrap.servers`` -> ``bootstrap_servers`` (see the module docstring)."""
    if key.startswith("kafka."):
        key = key[len("kafka."):]
    return key.replace(".", "_").replace("-", "_")


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
    """The Kafka client: ``kafka-python`` unless ``confluent`` is asked for.

    confluent-kafka (librdkafka) is faster, but not the default: every librdkafka
    version tried (2.6 to 2.16) crashes the whole process with SIGSEGV (in
    ``rd_kafka_metadata_cache_find``) when a topic it has seen is deleted and the
    broker creates it again with another partition count, as the Tansu test broker
    does on any metadata request. A WAL whose topics are lost then takes down the Spark
    worker instead of failing with a typed error, which kafka-python does.
    """
    name = str(value or "kafka-python").lower().replace("_", "-")
    if name not in CLIENT_NAMES:
        raise ConfigError(f"option client={value!r} is invalid; valid: {', '.join(CLIENT_NAMES)}")
    if name == "confluent" and not confluent_installed():
        raise ConfigError("option client='confluent' needs the confluent-kafka package: "
                          "pip install 'pyspark_durable[kafka-fast]'")
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
    client: str = "kafka-python"
    delivery_timeout_ms: int = 0

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> KafkaSettings:
        merged: dict[str, Any] = {}
        spelled: dict[str, str] = {}
        # librdkafka validates its own property names when a client is built
        client = resolve_client(next((v for k, v in options.items()
                                      if normalize_key(str(k)) == "client"), None))
        for raw, value in options.items():
            if value is None:
                continue
            name = normalize_key(str(raw))
            if name in FORBIDDEN:
                raise ConfigError(f"option {raw!r} cannot be set: {FORBIDDEN[name]}")
            if name not in OWN_OPTIONS and name not in KAFKA_KEYS and client != "confluent":
                valid = sorted((set(OWN_OPTIONS) | KAFKA_KEYS) - set(FORBIDDEN))
                raise ConfigError(
                    f"unknown kafka backend option {raw!r}; valid (optionally prefixed "
                    f"'kafka.', '.' for '_'): {', '.join(valid)}"
                )
            if name in merged:
                raise ConfigError(f"option {raw!r} given twice (also as {spelled[name]!r})")
            merged[name], spelled[name] = value, str(raw)
        for name, value in list(merged.items()):
            default = OWN_OPTIONS.get(name)
            for kind_cls in CLIENTS.values():
                default = default if default is not None else kind_cls.DEFAULT_CONFIG.get(name)  # type: ignore[attr-defined]
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
        if client == "confluent":
            from pyspark_durable.log.kafka_confluent import librdkafka_configs

            configs, delivery_ms = librdkafka_configs(servers, own, merged)
            return cls(servers, int(own["connect_timeout_ms"]), int(own["request_timeout_ms"]),
                       int(own["replication_factor"]), topic_config, configs, client,
                       delivery_ms)
        for k, v in TUNED.items():
            merged.setdefault(k, v)
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
        prod.setdefault("max_block_ms", int(own["connect_timeout_ms"]))
        prod.setdefault(
            "delivery_timeout_ms", int(own["request_timeout_ms"]) + int(prod["linger_ms"]) + 1000
        )
        return cls(servers, int(own["connect_timeout_ms"]), int(own["request_timeout_ms"]),
                   int(own["replication_factor"]), topic_config, clients, client,
                   int(prod["delivery_timeout_ms"]))

    @property
    def wait_s(self) -> float:
        """Upper bound of one blocking client call (a poll, an append's acks)."""
        return max(self.request_timeout_ms, self.delivery_timeout_ms) / 1000 + 5


@contextmanager
def translated(what: str, address: str, **where: Any) -> Iterator[None]:
    """Turn kafka-python errors into this package's typed errors, naming the broker."""
    try:
        yield
    except DurableWalError:
        raise
    except kerr.KafkaConfigurationError as exc:
        raise ConfigError(f"{what}: invalid kafka client option: {exc}", **where) from exc
    except kerr.OffsetOutOfRangeError as exc:
        raise OffsetOutOfRange(f"{what}: broker {address} has no such offset: {exc}",
                               **where) from exc
    except kerr.MessageSizeTooLargeError as exc:
        raise ConfigError(
            f"{what}: entry too large for broker {address} ({exc}); raise max_request_size "
            "and the topic's max.message.bytes", **where) from exc
    except kerr.KafkaError as exc:
        msg = f"{what}: Kafka broker {address} failed: {type(exc).__name__}: {exc}"
        if getattr(exc, "retriable", False) or isinstance(
            exc, kerr.KafkaConnectionError | kerr.NoBrokersAvailable | kerr.KafkaTimeoutError
        ):
            raise BackendUnavailable(msg, **where) from exc
        raise DurableWalError(msg, **where) from exc
    except (OSError, TimeoutError) as exc:
        raise BackendUnavailable(f"{what}: Kafka broker {address} unreachable: {exc}",
                                 **where) from exc


class OneTopicRule:
    """``ensure``, the rule of the log's topics, over any client's topic primitives."""

    namespace: str | None

    def partitions(self, topic: str) -> int | None:
        raise NotImplementedError

    def create(self, topic: str, configs: Mapping[str, str]) -> int | None:
        raise NotImplementedError

    def delete_topic(self, topic: str) -> None:
        raise NotImplementedError

    def empty(self, topic: str, count: int) -> bool:
        raise NotImplementedError

    def ensure(self, topic: str, create: bool, configs: Mapping[str, str]) -> bool:
        """Make sure ``topic`` exists with ONE partition; False if missing and not ``create``.

        A topic a broker auto-created with other partition counts (a client that still
        knew a deleted topic asked for it) is replaced when it is empty and ``create``
        is asked: nothing is lost. A non-empty one is an error, never used.
        """
        count = self.partitions(topic)
        for _ in range(AUTO_CREATED_RETRIES):
            if count in (None, 1) or not create or not self.empty(topic, count):
                break
            log.warning("namespace=%s: topic %s was auto-created with %d partitions and is "
                        "empty; replacing it with a 1-partition topic", self.namespace, topic,
                        count)
            self.delete_topic(topic)
            count = self.create(topic, configs)
        if count is None:
            if not create:
                return False
            count = self.create(topic, configs)
        if count != 1:
            raise ConfigError(
                f"topic {topic!r} has {count} partitions; a log needs exactly 1 (created by "
                "auto-creation or by hand?): delete it or use another namespace",
                namespace=self.namespace,
            )
        return True


def topic_admin(settings: KafkaSettings, namespace: str | None = None) -> OneTopicRule:
    """The admin of the client the settings chose."""
    if settings.client == "confluent":
        from pyspark_durable.log.kafka_confluent import ConfluentTopicAdmin

        return ConfluentTopicAdmin(settings, namespace)
    return TopicAdmin(settings, namespace)


class TopicAdmin(OneTopicRule):
    """Creates, describes and lists topics with kafka-python; never relies on auto-creation."""

    def __init__(self, settings: KafkaSettings, namespace: str | None = None) -> None:
        self.settings = settings
        self.address = settings.bootstrap_servers
        self.namespace = namespace
        with translated("connecting the admin client", self.address, namespace=namespace):
            try:
                self.client = KafkaAdminClient(**settings.clients["admin"])
            except kerr.KafkaTimeoutError as exc:
                raise BackendUnavailable(
                    f"cannot reach Kafka broker {self.address} within "
                    f"connect_timeout_ms={settings.connect_timeout_ms}: {exc}",
                    namespace=namespace,
                ) from exc

    def list_topics(self) -> list[str]:
        with translated("listing topics", self.address, namespace=self.namespace):
            return list(self.client.list_topics())

    def partitions(self, topic: str) -> int | None:
        """Number of partitions of ``topic``, None if it does not exist."""
        with translated("describing topic", self.address, namespace=self.namespace, topic=topic):
            (info,) = self.client.describe_topics([topic])
        if info.get("error_code", 0) == kerr.UnknownTopicOrPartitionError.errno:
            return None
        if info.get("error_code", 0):
            err = kerr.for_code(info["error_code"])
            with translated("describing topic", self.address, topic=topic):
                raise err(f"describe_topics({topic})")
        return len(info.get("partitions") or [])

    def delete_topic(self, topic: str) -> None:
        with translated("replacing an auto-created topic", self.address,
                        namespace=self.namespace, topic=topic):
            try:
                self.client.delete_topics([topic])
            except kerr.UnknownTopicOrPartitionError:
                pass  # another process replaced it first

    def create(self, topic: str, configs: Mapping[str, str]) -> int | None:
        spec = {"num_partitions": 1, "replication_factor": self.settings.replication_factor,
                "configs": {**configs, **self.settings.topic_config}}
        with translated("creating topic", self.address, namespace=self.namespace, topic=topic):
            try:
                self.client.create_topics({topic: spec})
            except kerr.TopicAlreadyExistsError:
                pass  # another process won the race: verified by the caller
            self.client.wait_for_topics([topic], timeout_ms=self.settings.request_timeout_ms)
        return self.partitions(topic)

    def empty(self, topic: str, count: int) -> bool:
        """Do all ``count`` partitions of ``topic`` hold nothing? (end offsets 0: on Tansu
        a lower bound of the end that is 0 only for an empty partition)."""
        with translated("reading end offsets", self.address, namespace=self.namespace,
                        topic=topic):
            consumer = KafkaConsumer(**self.settings.clients["consumer"])
            try:
                parts = [TopicPartition(topic, p) for p in range(count)]
                ends = consumer.end_offsets(parts, self.settings.request_timeout_ms)
                return all(ends[p] == 0 for p in parts)
            finally:
                consumer.close()

    def delete_records(self, topic: str, offset: int) -> bool:
        """DeleteRecords below ``offset``; False if the broker does not support it."""
        tp = TopicPartition(topic, 0)
        with translated("DeleteRecords", self.address, namespace=self.namespace, topic=topic):
            try:
                self.client.delete_records({tp: offset},
                                           timeout_ms=self.settings.request_timeout_ms)
                return True
            except (kerr.KafkaConnectionError, kerr.UnsupportedVersionError,
                    kerr.KafkaProtocolError) as exc:
                # Tansu closes the socket on DeleteRecords: unsupported if the broker answers
                self.partitions(topic)
                log.debug("DeleteRecords failed on a reachable broker: %s", exc)
                return False

    def close(self) -> None:
        try:
            self.client.close()
        except Exception as exc:  # noqa: BLE001 - closing must not mask the real error
            log.debug("closing the Kafka admin client failed: %s", exc)
