"""The librdkafka properties of a store's clients: the producer's, the consumers' and
the admin client's, from the options (:func:`librdkafka_configs`).

Keys arrive normalized (``linger_ms``); a librdkafka property is the dotted name
(``linger.ms``), and the kafka-python names whose librdkafka name differs are
translated (:data:`ALIASES`). librdkafka itself validates names and values when a
client is built. The safety settings are those of kafka-python: acks=all and
idempotence on the producer; no group offsets, ``auto.offset.reset=error`` and CRC
checks on readers, which use ``assign()`` with an explicit offset (the group id is
never joined). A token endpoint given turns on librdkafka's native OIDC
(:func:`oidc`), which fetches and refreshes the tokens itself. librdkafka's log lines
go to the ``pyspark_durable.log.kafka.librdkafka`` logger (:data:`rd_log`), named
after the library whose lines they are, not to stderr.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from pyspark_durable.errors import ConfigError
from pyspark_durable.log.kafka.confluent.login import AuthWatch
from pyspark_durable.log.kafka.oauth import METHOD, URL, dotted
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
    oidc(user)
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
    # error_cb: a refused login is reported at once (login.watched_metadata)
    admin = {**common, "log_level": "3", "error_cb": AuthWatch()}
    install_log_filter([rd_log.logger.name])  # librdkafka's lines, secrets scrubbed
    return {"producer": producer, "consumer": consumer, "admin": admin}, delivery_ms


def oidc(props: dict[str, Any]) -> None:
    """librdkafka's native OIDC: ``sasl.oauthbearer.method=oidc`` once a token endpoint is
    given (its default method builds unsigned test tokens)."""
    if props.get(dotted(URL)) and not props.get(dotted(METHOD)):
        props[dotted(METHOD)] = "oidc"


