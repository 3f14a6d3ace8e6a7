"""Options, error translation and topic administration of the Kafka log backend.

Option spelling (one rule, so YAML, Spark options and Python keywords all work):
a key may carry a ``kafka.`` prefix, and ``.``/``-`` count as ``_``; so
``kafka.bootstrap.servers``, ``bootstrap.servers`` and ``bootstrap_servers`` are one
option. After that, a key must be one of this backend's own options
(:data:`OWN_OPTIONS`) or a kafka-python config name (``KafkaProducer``,
``KafkaConsumer`` or ``KafkaAdminClient`` ``DEFAULT_CONFIG``); each kafka-python
option goes to every client that knows it. With ``client=confluent`` (librdkafka,
``pyspark_durable[kafka]``, the default) a key may also be any librdkafka property, and
kafka-python names are translated to librdkafka's
(:mod:`pyspark_durable.log.kafka_confluent`). String values are coerced to the type
of the option's default (Spark passes every option as a string).

Options that would break the log's guarantees are refused (:data:`FORBIDDEN`), as
are unknown ones, with the list of valid names.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark_durable.errors import ConfigError, LogNotFound

log = logging.getLogger(__name__)
AUTO_CREATED_RETRIES = 3
CONFIGS_ATTEMPTS = 10  # a topic's configs, asked right after it was created
CONFIGS_RETRY_S = 0.2

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
CLIENT_NAMES = ("kafka-python", "confluent")

def kafka_keys() -> frozenset[str]:
    """Every kafka-python client config name (imports kafka-python: only when it is used)."""
    from pyspark_durable.log.kafka_python import KAFKA_KEYS

    return KAFKA_KEYS


def kafka_python_default(name: str) -> Any:
    from pyspark_durable.log.kafka_python import default_of

    return default_of(name)


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


_PROBE_CACHE: dict[str, tuple[float, str]] = {}
_PROBE_LOCK = threading.Lock()
PROBE_TTL_S = 2.0
PROBE_TIMEOUT_S = 0.5


def broker_reachability(address: str) -> str:
    """Which bootstrap brokers refuse a TCP connection now: the cause of an append that
    timed out is otherwise invisible (librdkafka says "Local: Message timed out",
    kafka-python only that the batch expired). A few short connects, cached for a
    moment; one probe serves the failures of a whole batch (one report per record)."""
    now = time.monotonic()
    with _PROBE_LOCK:
        hit = _PROBE_CACHE.get(address)
        if hit is not None and now - hit[0] < PROBE_TTL_S:
            return hit[1]
    down: list[str] = []
    servers = [a.strip() for a in address.split(",") if a.strip()]
    for server in servers:
        host, _, port = server.rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), PROBE_TIMEOUT_S):
                pass
        except (OSError, ValueError) as exc:
            down.append(f"{server} ({exc.strerror or exc})" if isinstance(exc, OSError)
                        else f"{server} ({exc})")
    if not down:
        text = f"all {len(servers)} bootstrap brokers accept connections"
    else:
        text = (f"{len(down)} of {len(servers)} Kafka brokers unavailable: {', '.join(down)}; "
                "a read needs its partition's leader, an append (acks=all) the leader "
                "and min.insync.replicas in-sync replicas")
    with _PROBE_LOCK:
        _PROBE_CACHE[address] = (now, text)
    return text


def confluent_installed() -> bool:
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        return False
    return True


def resolve_client(value: Any) -> str:
    """The Kafka client: ``confluent`` (librdkafka) when installed, else ``kafka-python``.

    librdkafka moves several times kafka-python's bytes, in C threads that do not hold
    the GIL. It used to be opt-in because every version tried (2.6 to 2.16) crashed
    with SIGSEGV when a topic it knew was recreated with another partition count, as
    the old test broker (Tansu) did on any metadata request; on Apache Kafka 2.16
    does not crash (``test_a_recreated_topic_is_a_typed_error_on_both_clients``).
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
        from pyspark_durable.log.kafka_auth import security_options  # JAAS; secrets noted

        options = security_options(options, client)
        for raw, value in options.items():
            if value is None:
                continue
            name = normalize_key(str(raw))
            if name in FORBIDDEN:
                raise ConfigError(f"option {raw!r} cannot be set: {FORBIDDEN[name]}")
            if client != "confluent" and name not in OWN_OPTIONS and name not in kafka_keys():
                valid = sorted((set(OWN_OPTIONS) | kafka_keys()) - set(FORBIDDEN))
                raise ConfigError(
                    f"unknown kafka backend option {raw!r}; valid (optionally prefixed "
                    f"'kafka.', '.' for '_'): {', '.join(valid)}"
                )
            if name in merged:
                raise ConfigError(f"option {raw!r} given twice (also as {spelled[name]!r})")
            merged[name], spelled[name] = value, str(raw)
        for name, value in list(merged.items()):
            # librdkafka takes every property as text and checks it itself
            default = OWN_OPTIONS.get(name) if client == "confluent" or name in OWN_OPTIONS \
                else kafka_python_default(name)
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
        if client == "confluent":
            from pyspark_durable.log.kafka_confluent import librdkafka_configs

            configs, delivery_ms = librdkafka_configs(servers, own, merged)
            return cls(servers, int(own["connect_timeout_ms"]), int(own["request_timeout_ms"]),
                       int(own["replication_factor"]), topic_config, configs, client,
                       delivery_ms)
        from pyspark_durable.log.kafka_python import client_configs

        configs, delivery_ms = client_configs(servers, own, merged)
        return cls(servers, int(own["connect_timeout_ms"]), int(own["request_timeout_ms"]),
                   int(own["replication_factor"]), topic_config, configs, client, delivery_ms)

    @property
    def wait_s(self) -> float:
        """How long a synchronous append waits for its acks: past the client's own
        delivery timeout, whose typed failure names the cause, by a request's length."""
        return (self.request_timeout_ms + self.delivery_timeout_ms) / 1000 + 5


# broker-side settings that delete records by themselves, and what the WAL needs of each
RETENTION_KEYS = ("retention.ms", "retention.bytes", "cleanup.policy")


def deleting_settings(actual: Mapping[str, str | None], compacted: bool) -> list[str]:
    """The settings of a topic under which the broker deletes records on its own.

    The rule: nothing but the WAL's own ``delete_before`` (DeleteRecords, below what
    every acknowledged step needs) may remove a record. So a topic whose cleanup.policy
    includes ``delete`` must have ``retention.ms=-1`` and ``retention.bytes=-1``; a log
    topic must not be compacted (compaction keeps the last record per key, and a
    retried attempt writes the same keys again); the snapshots topic is compacted
    (``compacted``), which keeps the newest value of every key, all it reads.
    """
    policy = {p.strip() for p in str(actual.get("cleanup.policy") or "delete").split(",")}
    found = []
    if "delete" in policy:
        found += [f"{key}={actual.get(key)}" for key in ("retention.ms", "retention.bytes")
                  if str(actual.get(key)) != "-1"]
    if "compact" in policy and not compacted:
        found.append(f"cleanup.policy={actual.get('cleanup.policy')}")
    return found


class OneTopicRule:
    """``ensure``, the rule of the log's topics, over any client's topic primitives."""

    namespace: str | None
    address: str

    def partitions(self, topic: str) -> int | None:
        raise NotImplementedError

    def create(self, topic: str, configs: Mapping[str, str]) -> int | None:
        raise NotImplementedError

    def delete_topic(self, topic: str) -> None:
        raise NotImplementedError

    def empty(self, topic: str, count: int) -> bool:
        raise NotImplementedError

    def topic_configs(self, topic: str, names: tuple[str, ...]) -> dict[str, str | None]:
        """The topic's effective values of ``names`` (its own or the broker's defaults)."""
        raise NotImplementedError

    def set_topic_configs(self, topic: str, configs: Mapping[str, str]) -> None:
        """Set these topic configs (IncrementalAlterConfigs), leaving the others."""
        raise NotImplementedError

    def retention_problems(self, topic: str, compacted: bool) -> list[str]:
        """:func:`deleting_settings` of ``topic`` as the broker reports them."""
        return deleting_settings(self.topic_configs(topic, RETENTION_KEYS), compacted)

    def ensure(self, topic: str, create: bool, configs: Mapping[str, str]) -> bool:
        """Make sure ``topic`` exists with ONE partition; False if missing and not ``create``.

        A topic a broker auto-created with other partition counts (a client that still
        knew a deleted topic asked for it) is replaced when it is empty and ``create``
        is asked: nothing is lost. A non-empty one is an error, never used.

        Opened for writing (``create``), a topic whose broker-side retention could
        delete records (:func:`deleting_settings`: a topic auto-created or made by hand
        with Kafka's 7-day default, or one an operator changed) gets the WAL's settings
        when it is empty, with a warning, and is a :class:`ConfigError` naming the
        settings and the fix when it holds records. Readers are not refused (they
        read what is there); ``durablewal check`` reports the same problems.
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
        if create:
            self._ensure_retention(topic, configs)
        return True

    def _ensure_retention(self, topic: str, configs: Mapping[str, str]) -> None:
        compacted = "compact" in configs.get("cleanup.policy", "")
        wanted = {"retention.ms": "-1", "retention.bytes": "-1",
                  "cleanup.policy": "compact" if compacted else "delete"}
        for attempt in range(CONFIGS_ATTEMPTS):
            try:
                problems = self.retention_problems(topic, compacted)
                break
            except LogNotFound:  # just created: not on every broker yet (3-node clusters)
                if attempt == CONFIGS_ATTEMPTS - 1:
                    raise
                time.sleep(CONFIGS_RETRY_S)
        if not problems:
            return
        if self.empty(topic, 1):
            log.warning("namespace=%s: topic %s on %s is empty and has %s (broker-side "
                        "retention would delete WAL records): setting the WAL's %s",
                        self.namespace, topic, self.address, ", ".join(problems),
                        ", ".join(f"{k}={v}" for k, v in wanted.items()))
            self.set_topic_configs(topic, {**configs, **wanted})
            problems = self.retention_problems(topic, compacted)
            if not problems:
                return
        raise ConfigError(
            f"topic {topic!r} on {self.address} has {', '.join(problems)}: the broker would "
            "delete WAL records on its own (only the WAL's cleaner may). Set "
            + ", ".join(f"{k}={v}" for k, v in wanted.items())
            + f" (kafka-configs.sh --bootstrap-server {self.address} --alter --entity-type "
            f"topics --entity-name {topic} --add-config "
            + ",".join(f"{k}={v}" for k, v in wanted.items()) + ")",
            namespace=self.namespace)


def topic_admin(settings: KafkaSettings, namespace: str | None = None) -> OneTopicRule:
    """The admin of the client the settings chose."""
    if settings.client == "confluent":
        from pyspark_durable.log.kafka_confluent import ConfluentTopicAdmin

        return ConfluentTopicAdmin(settings, namespace)
    from pyspark_durable.log.kafka_python import TopicAdmin

    return TopicAdmin(settings, namespace)
