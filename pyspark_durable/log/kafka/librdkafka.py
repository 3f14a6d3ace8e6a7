"""librdkafka's settings and errors for the confluent-kafka client: the properties a
store's clients get (:func:`librdkafka_configs`, kafka-python names translated), the
typed errors its failures become (:func:`typed`, :func:`rd_translated`), client
construction (:func:`build`) and its log lines (:data:`rd_log`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from confluent_kafka import (
    KafkaError,
    KafkaException,
)

from pyspark_durable.errors import (
    BackendUnavailable,
    ConfigError,
    DurableWalError,
    LogNotFound,
    OffsetOutOfRange,
)
from pyspark_durable.log.kafka.acls import (
    CLUSTER_REFUSED,
    GROUP_REFUSED,
    TOPIC_REFUSED,
    access_denied,
)
from pyspark_durable.log.kafka.auth import AuthWatch, authentication_failed
from pyspark_durable.log.kafka.oauth import librdkafka_oidc
from pyspark_durable.log.kafka.probe import broker_reachability, brokers_answer
from pyspark_durable.log.kafka.transient import REFUSED_BROKER, TRANSIENT_BROKER, TRANSIENT_LOCAL
from pyspark_durable.secrets import install_log_filter

READER_GROUP = "pyspark_durable-assign-only"  # librdkafka wants one; never joined


class _LibrdkafkaLog:
    """librdkafka's log lines, as debug lines of our logger: its errors are transient
    (a refused connection it retries) and every failure that matters reaches the caller
    as a typed exception. Its configuration warnings stay warnings."""

    logger = logging.getLogger("pyspark_durable.log.kafka.librdkafka")

    def log(self, level: int, msg: str, *args: Any, **kwargs: Any) -> None:
        text = msg % args if args else msg
        self.logger.log(logging.WARNING if "CONFWARN" in text else logging.DEBUG, "%s", text)


rd_log = _LibrdkafkaLog()

# kafka-python names whose librdkafka property is not just the dotted name
ALIASES: dict[str, str] = {
    "sasl_plain_username": "sasl.username",
    "sasl_plain_password": "sasl.password",
    "ssl_cafile": "ssl.ca.location",
    "ssl_certfile": "ssl.certificate.location",
    "ssl_keyfile": "ssl.key.location",
    "ssl_password": "ssl.key.password",
    "max_request_size": "message.max.bytes",
    "fetch_max_wait_ms": "fetch.wait.max.ms",
    "receive_buffer_bytes": "socket.receive.buffer.bytes",
    "send_buffer_bytes": "socket.send.buffer.bytes",
    "sasl_mechanism": "sasl.mechanisms",
    "ssl_crlfile": "ssl.crl.location",
    "ssl_ciphers": "ssl.cipher.suites",
}

# librdkafka defaults we change (as TUNED does for kafka-python)
TUNED: dict[str, str] = {
    "linger.ms": "5",
    "batch.size": str(16 << 20),
    "message.max.bytes": str(16 << 20),
    "max.partition.fetch.bytes": str(8 << 20),
    "fetch.wait.max.ms": "5",
    # a full prefetch queue (queued.max.messages.kbytes) postpones the next fetch by this
    # long, not until the reader drains it: librdkafka's 1000 ms stalled a scan ~0.7 s
    "fetch.queue.backoff.ms": "5",
    "log_level": "4",
    # librdkafka sends a ListOffsets to the partition leader it knows and refreshes that
    # knowledge only every 5 minutes (its default): after a leader was killed, reading a
    # watermark timed out for minutes while a new leader served. Refreshed every 2 s.
    "topic.metadata.refresh.interval.ms": "2000",
    # the broker's CPU and the client's socket writes grow with the bytes sent, and on a
    # writer's machine they were most of a sink's cost (bench/RESULTS-kafka-path.md):
    # lz4 batches in librdkafka's threads, off the GIL; a batch it cannot shrink is
    # sent as it is. Values are unchanged: the consumer hands back the same bytes.
    "compression.type": "lz4",
}
# what only a producer reads (a consumer given one warns about it)
PRODUCER_ONLY = ("linger.ms", "batch.size", "compression.type", "compression.codec")

# the transient codes of the one table (transient.py), as librdkafka's numbers
RETRIABLE = frozenset({*TRANSIENT_BROKER, *(getattr(KafkaError, n) for n in TRANSIENT_LOCAL
                                          if hasattr(KafkaError, n))})
OUT_OF_RANGE = {KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET}
AUTH_FAILED = {KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED}


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(map(str, value))
    return str(value)


def _int(props: Mapping[str, Any], name: str, default: int) -> int:
    """An integer property the backend computes with: a typed error names a bad value."""
    value = props.get(name, default)
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"option {name}={value!r} is not a valid int") from None


def librdkafka_configs(servers: str, own: Mapping[str, Any],
                       merged: Mapping[str, Any]) -> tuple[dict[str, dict[str, Any]], int]:
    """The properties of the producer, consumer and admin client, and the delivery timeout."""
    user = {ALIASES.get(k, k.replace("_", ".")): _text(v) for k, v in merged.items()}
    librdkafka_oidc(user)
    request_ms = int(own["request_timeout_ms"])
    common = {
        **TUNED,
        "bootstrap.servers": servers,
        "socket.connection.setup.timeout.ms": str(max(1000, int(own["connect_timeout_ms"]))),
        "socket.timeout.ms": str(request_ms),
        "logger": rd_log,
        **user,
    }
    linger = _int(common, "linger.ms", _int(common, "queue.buffering.max.ms", 5))
    delivery_ms = _int(common, "message.timeout.ms", request_ms + linger + 1000)
    common.pop("message.timeout.ms", None)
    consumer_only = ("fetch.wait.max.ms", "max.partition.fetch.bytes", "fetch.queue.backoff.ms")
    producer = {**{k: v for k, v in common.items() if k not in consumer_only or k in user},
                "acks": "all", "allow.auto.create.topics": "false", "enable.idempotence": "true",
                "request.timeout.ms": str(request_ms), "message.timeout.ms": str(delivery_ms)}
    consumer = {**{k: v for k, v in common.items() if k not in PRODUCER_ONLY},
                "group.id": READER_GROUP, "enable.auto.commit": "false",
                "enable.auto.offset.store": "false", "auto.offset.reset": "error",
                "isolation.level": "read_uncommitted", "check.crcs": "true",
                "allow.auto.create.topics": "false", "enable.partition.eof": "true",
                # prefetch per reader (librdkafka's default is 64 MiB): a worker's memory
                # stays bounded however many logs it reads
                "queued.max.messages.kbytes": common.get("queued.max.messages.kbytes",
                                                         str(16 << 10))}
    # librdkafka: a consumer's fetch.max.bytes must be >= message.max.bytes (a producer limit)
    fetch_max = _int(consumer, "fetch.max.bytes", 52_428_800)
    consumer["message.max.bytes"] = str(min(_int(consumer, "message.max.bytes", 0), fetch_max))
    # every property, so an unknown name fails when the store opens (librdkafka only
    # warns about producer or consumer properties on an admin client: errors only)
    # error_cb: a refused login is reported at once (auth.rd_list_topics)
    admin = {**common, "log_level": "3", "error_cb": AuthWatch()}
    install_log_filter([rd_log.logger.name])  # librdkafka's lines, secrets scrubbed
    return {"producer": producer, "consumer": consumer, "admin": admin}, delivery_ms


def error_of(exc: BaseException) -> KafkaError | None:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


RETRY_BACKOFF_S = 0.2
# consumer events librdkafka recovers from by itself (a broker gone, a leader moved)
TRANSIENT_FETCH = {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._DESTROY_BROKER,
                   KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                   KafkaError.NETWORK_EXCEPTION, KafkaError._RESOLVE}
NOT_ENOUGH_REPLICAS = {KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND}
# failures whose message names which brokers answer (all of them transient)
BROKER_DOWN = {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT,
               KafkaError._TIMED_OUT_QUEUE, KafkaError._MSG_TIMED_OUT, KafkaError.REQUEST_TIMED_OUT,
               KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
               KafkaError.NETWORK_EXCEPTION, KafkaError._DESTROY_BROKER,
               KafkaError.OFFSET_NOT_AVAILABLE}  # a new leader's high watermark lags


REFUSED = {KafkaError.TOPIC_AUTHORIZATION_FAILED: TOPIC_REFUSED,
           KafkaError.CLUSTER_AUTHORIZATION_FAILED: CLUSTER_REFUSED,
           KafkaError.GROUP_AUTHORIZATION_FAILED: GROUP_REFUSED}


def typed(err: KafkaError, what: str, address: str, principal: str | None = None,
          **where: Any) -> DurableWalError:
    """One librdkafka error as this package's typed error, naming the broker (and for a
    refusal of the authorizer, ``principal``)."""
    code = err.code()
    if code in REFUSED:
        return access_denied(REFUSED[code], what, address, principal or "the client's principal",
                             err.str(), group=READER_GROUP, **where)
    if code in AUTH_FAILED:
        return authentication_failed(address, {}, f"{what}: {err.str()}", **where)
    if code in OUT_OF_RANGE:
        return OffsetOutOfRange(f"{what}: broker {address} has no such offset: {err.str()}",
                                **where)
    if code == KafkaError.MSG_SIZE_TOO_LARGE:
        return ConfigError(f"{what}: entry too large for broker {address} ({err.str()}); raise "
                           "message.max.bytes and the topic's max.message.bytes", **where)
    if code in (KafkaError._INVALID_ARG, KafkaError.INVALID_CONFIG):
        return ConfigError(f"{what}: invalid kafka client option: {err.str()}", **where)
    if code in (KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC) \
            and not brokers_answer(address):
        # librdkafka's own verdict from a metadata cache it could not fill: no broker
        # answered, so nothing is known of the topic (a reset link, not a deleted topic)
        return BackendUnavailable(f"{what}: Kafka broker {address} failed: {err.name()}: "
                                  f"{err.str()} ({broker_reachability(address)})", **where)
    if code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION,
                KafkaError._UNKNOWN_TOPIC):
        return LogNotFound(f"{what}: the topic is gone from Kafka broker {address} (deleted, "
                           f"or the broker lost it): {err.str()}", **where)
    msg = f"{what}: Kafka broker {address} failed: {err.name()}: {err.str()}"
    if code in NOT_ENOUGH_REPLICAS:
        msg += (" (not enough in-sync replicas for acks=all, the topic's min.insync.replicas; "
                f"{broker_reachability(address)})")
    elif code in BROKER_DOWN:
        msg += f" ({broker_reachability(address)})"
    # librdkafka's own flag (a request it gave up on) too, but never for a refusal
    if code in RETRIABLE or (err.retriable() and code not in REFUSED_BROKER):
        return BackendUnavailable(msg, **where)
    return DurableWalError(msg, **where)


@contextmanager
def rd_translated(what: str, address: str, principal: str | None = None,
                  **where: Any) -> Iterator[None]:
    """Turn confluent-kafka errors into this package's typed errors, naming the broker."""
    try:
        yield
    except DurableWalError:
        raise
    except KafkaException as exc:
        err = error_of(exc)
        if err is None:
            raise DurableWalError(f"{what}: Kafka client failed: {exc}", **where) from exc
        raise typed(err, what, address, principal, **where) from exc
    except (ValueError, TypeError) as exc:  # librdkafka refusing a property or its value
        raise ConfigError(f"{what}: invalid kafka client option: {exc}", **where) from exc
    except (OSError, TimeoutError) as exc:
        raise BackendUnavailable(f"{what}: Kafka broker {address} unreachable: {exc} "
                                 f"({broker_reachability(address)})", **where) from exc


def build(kind: type, config: Mapping[str, Any], what: str, address: str, **where: Any) -> Any:
    """A librdkafka client; a property it does not know is a ConfigError naming it."""
    try:
        return kind(dict(config))
    except KafkaException as exc:
        err = error_of(exc)
        text = err.str() if err is not None else str(exc)
        raise ConfigError(f"{what}: librdkafka refused the options: {text} (kafka backend "
                          "options are librdkafka properties, dotted or with '_', plus "
                          "bootstrap_servers, connect_timeout_ms, request_timeout_ms, "
                          "replication_factor, topic_config, client)", **where) from exc
