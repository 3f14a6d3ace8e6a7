"""What both Kafka clients share: the option spelling rule, the broker probe, the
interfaces each client implements (:class:`Reader`, :class:`Sender`,
:class:`TopicAdmin`, bundled as a :class:`KafkaClient`), and the rule of the log's
topics (:class:`OneTopicRule`). It imports neither client: each client module imports
it, and :func:`pyspark_durable.log.kafka_settings.client_for` picks one per store.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, NamedTuple, Protocol

from pyspark_durable.errors import ConfigError, LogNotFound
from pyspark_durable.log.base import Entry, Record

log = logging.getLogger(__name__)
AUTO_CREATED_RETRIES = 3
CONFIGS_ATTEMPTS = 10  # a topic's configs, asked right after it was created
CONFIGS_RETRY_S = 0.2


def normalize_key(key: str) -> str:
    """``kafka.bootstrap.servers`` -> ``bootstrap_servers`` (see the module docstring)."""
    if key.startswith("kafka."):
        key = key[len("kafka."):]
    return key.replace(".", "_").replace("-", "_")


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


class Reader(Protocol):
    """One topic's partition 0, read by offset (assign/seek, never a consumer group)."""

    def begin(self) -> int: ...

    def watermarks(self) -> tuple[int, int]: ...

    def seek(self, offset: int) -> None: ...

    def fetch(self, max_records: int | None, timeout_ms: int) -> list[Entry]: ...

    def idle(self) -> None: ...

    def close(self) -> None: ...


class Sender(Protocol):
    """The producer of a store (acks=all, idempotent), shared by its logs."""

    def send(self, topic: str, records: Sequence[Record], acked: Callable[[int, int], None],
             failed: Callable[[BaseException], None]) -> None: ...

    def hurry(self) -> None: ...

    def wait(self, future: Future, timeout_s: float) -> bool: ...

    def close(self, timeout_s: float) -> None: ...


class TopicAdmin(Protocol):
    """Every topic operation the store calls (each client's admin is a
    :class:`OneTopicRule`, which gives ``ensure`` and ``retention_problems``)."""

    namespace: str | None
    address: str

    def ensure(self, topic: str, create: bool, configs: Mapping[str, str]) -> bool: ...

    def retention_problems(self, topic: str, compacted: bool) -> list[str]: ...

    def list_topics(self) -> list[str]: ...

    def partitions(self, topic: str) -> int | None: ...

    def create(self, topic: str, configs: Mapping[str, str]) -> int | None: ...

    def delete_topic(self, topic: str) -> None: ...

    def empty(self, topic: str, count: int) -> bool: ...

    def topic_configs(self, topic: str, names: tuple[str, ...]) -> dict[str, str | None]: ...

    def set_topic_configs(self, topic: str, configs: Mapping[str, str]) -> None: ...

    def delete_records(self, topic: str, offset: int) -> bool:
        """DeleteRecords below ``offset``; False where the service does not support it."""
        ...

    def close(self) -> None: ...


class KafkaClient(NamedTuple):
    """One client implementation, as the store uses it: chosen once per store."""

    name: str
    configs: Callable[..., tuple[dict[str, dict[str, Any]], int]]
    reader: Callable[..., Reader]
    sender: Callable[..., Sender]
    admin: Callable[..., TopicAdmin]
    keys: Callable[[], frozenset[str]] | None = None  # None: the client checks its own names
    default_of: Callable[[str], Any] | None = None


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


