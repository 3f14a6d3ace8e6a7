"""Options of the Kafka log backend, and the one place a client is chosen.

Keys are first spelled one way (:mod:`~pyspark_durable.log.kafka.spelling`:
``kafka.bootstrap.servers`` = ``bootstrap_servers``). After that, a key must be one of
this backend's own options (:data:`OWN_OPTIONS`, each with its parser, minimum and
field) or a kafka-python config name (``KafkaProducer``,
``KafkaConsumer`` or ``KafkaAdminClient`` ``DEFAULT_CONFIG``); each kafka-python
option goes to every client that knows it. With ``client=confluent`` (librdkafka,
``pyspark_durable[kafka]``, the default) a key may also be any librdkafka property, and
kafka-python names are translated to librdkafka's
(:mod:`~pyspark_durable.log.kafka.confluent.config`). String values are coerced to the type
of the option's default (Spark passes every option as a string).

Options that would break the log's guarantees are refused (:data:`FORBIDDEN`), as
are unknown ones, with the list of valid names.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
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


def _integer(name: str, value: Any) -> int | None:
    """An integer, or its decimal text (Spark passes every option as a string)."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if isinstance(value, str) and re.fullmatch(r"\s*[+-]?[0-9]+\s*", value):
        return int(value)
    raise ConfigError(f"option {name}={value!r} is not an integer")


def _servers(name: str, value: Any) -> str | None:
    """``host:port[,host:port]``, or a list of ``host:port``."""
    if value is None or isinstance(value, str):
        return value
    return ",".join(map(str, value))


def _topic_config(name: str, value: Any) -> dict[str, str]:
    """Extra configs of the topics the WAL creates; never one under which the broker
    deletes records itself, as only the WAL's cleaner may."""
    if not isinstance(value or {}, Mapping):
        raise ConfigError(f"option {name}={value!r} is not a mapping of topic config names to values")
    config = {str(k): str(v) for k, v in (value or {}).items()}
    refused = sorted(set(config) & set(RETENTION_KEYS))
    if refused:
        raise ConfigError(
            f"topic_config {refused} cannot be set: only the WAL's cleaner "
            "deletes records (its topics keep retention.ms=-1, "
            "retention.bytes=-1; set a retention policy on the namespace)"
        )
    return config


def _client(name: str, value: Any) -> str:
    return resolve_client(value)


@dataclass(frozen=True)
class OwnOption:
    """One of this backend's own options: its default, the parser of a given value
    (``(name as the user spelled it, value) -> value``), the least value it takes, and
    the :class:`KafkaSettings` field it sets (None: a rule spanning options reads it).
    ``broker_default`` is the one value below the minimum that is taken: it leaves the
    choice to the broker."""

    default: Any
    parse: Callable[[str, Any], Any]
    minimum: int | None = None
    field: str | None = None
    broker_default: int | None = None

    def value(self, name: str, spelled: str, given: Any) -> Any:
        """The option's value: ``given`` (None: the default) parsed and held to the minimum."""
        value = self.parse(spelled, self.default if given is None else given)
        if value is None or self.minimum is None or value >= self.minimum or value == self.broker_default:
            return value
        allowed = f"at least {self.minimum}"
        if self.broker_default is not None:
            allowed += f", or {self.broker_default} for the broker's default"
        where = "" if spelled == name else f" (given as {spelled}={given!r})"
        raise ConfigError(f"option {name}={value} is invalid: {allowed}{where}")


# this backend's own options (kafka-python ones may share a name)
OWN_OPTIONS: dict[str, OwnOption] = {
    "bootstrap_servers": OwnOption(None, _servers, field="bootstrap_servers"),
    "connect_timeout_ms": OwnOption(10_000, _integer, minimum=1, field="connect_timeout_ms"),
    "request_timeout_ms": OwnOption(30_000, _integer, minimum=1, field="request_timeout_ms"),
    # -1: the broker's default.replication.factor
    "replication_factor": OwnOption(-1, _integer, minimum=1, field="replication_factor", broker_default=-1),
    # None: the broker's min.insync.replicas; else it goes into the topic configs
    "min_insync_replicas": OwnOption(None, _integer, minimum=1),
    # extra topic configs for created topics, e.g. min.insync.replicas
    "topic_config": OwnOption(None, _topic_config, field="topic_config"),
    # "confluent" (librdkafka) if installed, else "kafka-python": resolve_client
    "client": OwnOption(None, _client, field="client"),
}


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
        """Each own option parsed by its :data:`OWN_OPTIONS` entry, the others handed to
        the chosen client (typed as their defaults), then the rules spanning options."""
        # librdkafka validates its own property names when a client is built
        client = resolve_client(
            next((v for k, v in options.items() if normalize_key(str(k)) == "client"), None)
        )
        impl = client_for(client)
        from pyspark_durable.log.kafka.auth import security_options  # JAAS; secrets noted

        given, spelled = _named(security_options(options, client), impl)
        own = {n: o.value(n, spelled.get(n, n), given.pop(n, None)) for n, o in OWN_OPTIONS.items()}
        if not own["bootstrap_servers"]:
            raise ConfigError("the kafka backend needs bootstrap_servers (host:port[,host:port])")
        if own["min_insync_replicas"] is not None:
            own["topic_config"].setdefault("min.insync.replicas", str(own["min_insync_replicas"]))
        # librdkafka takes every property as text and checks it itself
        typed = {
            name: _coerce(spelled[name], value, None if impl.default_of is None else impl.default_of(name))
            for name, value in given.items()
        }
        configs, delivery_ms = impl.configs(own["bootstrap_servers"], own, typed)
        fields = {o.field: own[n] for n, o in OWN_OPTIONS.items() if o.field}
        return cls(**fields, clients=configs, delivery_timeout_ms=delivery_ms)

    @property
    def wait_s(self) -> float:
        """How long a synchronous append waits for its acks: past the client's own
        delivery timeout, whose typed failure names the cause, by a request's length."""
        return (self.request_timeout_ms + self.delivery_timeout_ms) / 1000 + 5


def _named(options: Mapping[str, Any], impl: KafkaClient) -> tuple[dict[str, Any], dict[str, str]]:
    """The options under their one spelling (see the module docstring) and as the user
    spelled them; forbidden, unknown and twice-given options are refused, and an option
    given as None is left out (its default stands)."""
    given: dict[str, Any] = {}
    spelled: dict[str, str] = {}
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
        if name in given:
            raise ConfigError(f"option {raw!r} given twice (also as {spelled[name]!r})")
        given[name], spelled[name] = value, str(raw)
    return given, spelled
