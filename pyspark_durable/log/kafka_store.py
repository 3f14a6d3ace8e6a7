"""The Kafka log store: one namespace's logs as topics, its snapshots and registry.

The design rules are in :mod:`pyspark_durable.log.kafka` (the logs) and
:mod:`pyspark_durable.log.kafka_admin` (the topics). The client (confluent-kafka or
kafka-python) is chosen once, when the store is made
(:func:`pyspark_durable.log.kafka_settings.client_for`); every reader, sender and admin
of the store comes from that one choice. The *registry* is what the snapshots topic
holds besides snapshots (each log's logical low watermark), read into a map by key.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Mapping
from typing import Any

from pyspark_durable.errors import ConfigError, LogNotFound
from pyspark_durable.log.base import (
    NAME_RE,
    UNVERSIONED,
    Log,
    LogStore,
    Record,
    check_name,
    check_version,
)
from pyspark_durable.log.kafka import (
    LOG_TOPIC_CONFIG,
    SNAPSHOTS,
    SNAPSHOTS_TOPIC_CONFIG,
    KafkaLog,
)
from pyspark_durable.log.kafka_admin import Reader, Sender, TopicAdmin
from pyspark_durable.log.kafka_settings import KafkaSettings, client_for

log = logging.getLogger("pyspark_durable.log.kafka")
IDLE_READERS = 4  # idle readers a store keeps open across its logs


class KafkaLogStore(LogStore):
    """The logs of one namespace as topics ``{namespace}_{log}``; see the module docstring."""

    type_name = "kafka"

    def __init__(
        self,
        namespace: str,
        bootstrap_servers: str | None = None,
        connect_timeout_ms: int | None = None,
        request_timeout_ms: int | None = None,
        linger_ms: int | None = None,
        batch_size: int | None = None,
        compression_type: str | None = None,
        **kafka_options: Any,
    ) -> None:
        super().__init__(namespace)
        self.settings = KafkaSettings.parse({
            "bootstrap_servers": bootstrap_servers, "connect_timeout_ms": connect_timeout_ms,
            "request_timeout_ms": request_timeout_ms, "linger_ms": linger_ms,
            "batch_size": batch_size, "compression_type": compression_type, **kafka_options,
        })
        self.client = client_for(self.settings.client)  # the one choice of this store
        self.admin: TopicAdmin = self.client.admin(self.settings, namespace)
        self._sender: Sender | None = None
        self._logs: dict[str, KafkaLog] = {}
        self._lock = threading.Lock()
        self._registry_lock = threading.Lock()
        self._registry: dict[bytes, bytes] = {}
        self._registry_topic: KafkaLog | None = None
        self._registry_pos = 0
        self._delete_records_ok: bool | None = None
        self._writable: set[str] = set()  # logs whose topic was checked for writing
        # idle readers of all this store's logs, oldest first: at most IDLE_READERS stay
        # open (each holds a consumer's sockets and, on librdkafka, its threads)
        self._parked: deque[tuple[KafkaLog, Reader]] = deque()
        self._parked_lock = threading.Lock()

    # -- clients -------------------------------------------------------------

    def sender(self) -> Sender:
        with self._lock:
            if self._sender is None:
                self._sender = self.client.sender(self.settings, self.namespace)
            return self._sender

    def new_reader(self, topic: str, where: Mapping[str, Any]) -> Reader:
        return self.client.reader(self.settings, topic, where)

    def parked(self, log_: KafkaLog, reader: Reader) -> None:
        """A log put ``reader`` back idle: beyond :data:`IDLE_READERS` idle readers in
        the store, the longest idle ones are closed (a namespace of many regions read
        one after another keeps a few consumers, not one per region)."""
        with self._parked_lock:
            for entry in [e for e in self._parked if e[1] is reader]:  # borrowed and back
                self._parked.remove(entry)
            self._parked.append((log_, reader))
            over = len(self._parked) - IDLE_READERS
            oldest = [self._parked.popleft() for _ in range(max(0, over))]
        for owner, idle in oldest:
            owner.evict(idle)

    def idle_readers(self) -> int:
        """Readers kept open, idle, across this store's logs."""
        return sum(len(log_._idle) for log_ in list(self._logs.values()))

    def topic(self, name: str) -> str:
        return f"{self.namespace}_{name}"

    # -- logs -----------------------------------------------------------------

    @classmethod
    def list_namespaces(cls, config: Mapping[str, Any]) -> list[str]:
        settings = KafkaSettings.parse(config)
        admin = client_for(settings.client).admin(settings)
        try:
            return cls._namespaces_in(admin.list_topics())
        finally:
            admin.close()

    @staticmethod
    def _namespaces_in(topics: list[str]) -> list[str]:
        suffix = f"_{SNAPSHOTS}"
        return sorted(
            t[: -len(suffix)] for t in topics
            if t.endswith(suffix) and NAME_RE.fullmatch(t[: -len(suffix)])
        )

    def sibling_namespaces(self) -> list[str]:
        return self._namespaces_in(self.admin.list_topics())

    def location(self) -> str:
        return f"Kafka broker {self.settings.bootstrap_servers}"

    def settings_problems(self) -> list[tuple[str, str]]:
        found = []
        existing = set(self.admin.list_topics())
        for name in [*self.list_logs(), SNAPSHOTS]:
            topic = self.topic(name)
            if topic not in existing:
                continue
            for problem in self.admin.retention_problems(topic, compacted=name == SNAPSHOTS):
                found.append((name, f"topic {topic} has {problem}: the broker would delete "
                                    "WAL records on its own (set retention.ms=-1, "
                                    "retention.bytes=-1, and cleanup.policy="
                                    f"{'compact' if name == SNAPSHOTS else 'delete'})"))
        return found

    def list_logs(self) -> list[str]:
        registered = [k[4:].decode() for k in self._registry_view() if k.startswith(b"log/")]
        existing = set(self.admin.list_topics())
        return sorted(n for n in registered if self.topic(n) in existing)

    def open_log(self, name: str, create: bool = True) -> Log:
        check_name("log", name)
        if name == SNAPSHOTS or name.endswith(f"_{SNAPSHOTS}"):
            raise ConfigError(f"log name {name!r} is invalid: '{SNAPSHOTS}' and "
                              f"'*_{SNAPSHOTS}' are reserved", namespace=self.namespace)
        with self._lock:
            existing = self._logs.get(name)
        if existing is not None and (not create or name in self._writable):
            return existing
        topic = self.topic(name)
        if create and b"log/" + name.encode() not in self._registry_view():
            self._put_registry(b"log/" + name.encode(), b"")  # registry first: list_logs
        if not self.admin.ensure(topic, create, LOG_TOPIC_CONFIG):
            raise LogNotFound(f"log does not exist (no topic {topic!r} on "
                              f"{self.settings.bootstrap_servers})",
                              namespace=self.namespace, log=name)
        with self._lock:
            if create:  # its retention was checked for writing (OneTopicRule.ensure)
                self._writable.add(name)
            return self._logs.setdefault(name, KafkaLog(self, name, topic))

    # -- the snapshots topic ------------------------------------------------------

    def _registry_log(self, create: bool) -> KafkaLog | None:
        if self._registry_topic is None or (create and SNAPSHOTS not in self._writable):
            topic = self.topic(SNAPSHOTS)
            if not self.admin.ensure(topic, create, SNAPSHOTS_TOPIC_CONFIG):
                return None
            if create:
                self._writable.add(SNAPSHOTS)
            if self._registry_topic is None:
                self._registry_topic = KafkaLog(self, SNAPSHOTS, topic)
        return self._registry_topic

    def _registry_view(self) -> dict[bytes, bytes]:
        """Catch up with the snapshots topic; return the latest value of every key."""
        with self._registry_lock:
            registry = self._registry_log(create=False)
            if registry is not None:
                begin, high = registry._bounds()
                for entry in registry._scan(max(self._registry_pos, begin), high):
                    if entry.key.startswith(b"lowwater/"):  # never moves down (racing writers)
                        entry_low = int(entry.value or 0)
                        if entry_low <= int(self._registry.get(entry.key) or 0):
                            continue
                    self._registry[entry.key] = entry.value
                self._registry_pos = max(self._registry_pos, high)
            return dict(self._registry)

    def _put_registry(self, key: bytes, value: bytes | None) -> None:
        with self._registry_lock:
            registry = self._registry_log(create=True)
        assert registry is not None
        registry.append([Record(key, value)])

    @staticmethod
    def _snapshot_key(name: str, version: int) -> bytes:
        check_name("snapshot", name)
        return f"snapshot/{name}/{check_version(version):020d}".encode()

    def write_snapshot(self, name: str, version: int, data: bytes) -> None:
        if not data:
            raise ConfigError("an empty snapshot cannot be stored (empty means deleted)",
                              namespace=self.namespace, snapshot=name)
        self._put_registry(self._snapshot_key(name, version), bytes(data))

    def snapshot_versions(self, name: str) -> list[int]:
        """The stored versions; a release before commit ee5e358 kept one unversioned key,
        ``snapshot/{name}``, listed as version 0 so that any versioned one is newer."""
        prefix = f"snapshot/{check_name('snapshot', name)}/".encode()
        view = self._registry_view()
        versions = {int(k[len(prefix):]) for k, v in view.items()
                    if k.startswith(prefix) and k[len(prefix):].isdigit() and v}
        if view.get(prefix[:-1]):
            versions.add(UNVERSIONED)
        return sorted(versions)

    def read_snapshot_version(self, name: str, version: int) -> bytes | None:
        view = self._registry_view()
        return next((view[k] for k in self._snapshot_keys(name, version) if view.get(k)), None)

    def delete_snapshot(self, name: str, version: int) -> None:
        for key in self._snapshot_keys(name, version):
            if self._registry_view().get(key):
                # a tombstone: compaction removes the version, then (delete.retention.ms
                # later) the tombstone itself; reads take it as empty, i.e. deleted
                self._put_registry(key, None)

    def _snapshot_keys(self, name: str, version: int) -> list[bytes]:
        """The keys of one version: version 0 may be an older release's unversioned one."""
        key = self._snapshot_key(name, version)
        return [key, f"snapshot/{name}".encode()] if version == UNVERSIONED else [key]

    def logical_low(self, name: str) -> int:
        value = self._registry_view().get(b"lowwater/" + name.encode())
        return int(value) if value else 0

    def set_logical_low(self, name: str, offset: int) -> None:
        self._put_registry(b"lowwater/" + name.encode(), str(offset).encode())

    def delete_records(self, topic: str, offset: int) -> None:
        """DeleteRecords where the broker has it; else the logical watermark is the rule."""
        if self._delete_records_ok is False:
            return
        ok = self.admin.delete_records(topic, offset)
        if not ok and self._delete_records_ok is None:
            log.warning(
                "namespace=%s: Kafka broker %s does not support DeleteRecords; deleted "
                "entries stay on the broker and reads skip them using the logical low "
                "watermark in topic %s", self.namespace, self.settings.bootstrap_servers,
                self.topic(SNAPSHOTS),
            )
        self._delete_records_ok = ok

    def reset(self) -> None:
        with self._lock:
            logs, self._logs = list(self._logs.values()), {}
            self._writable = set()
        with self._registry_lock:
            if self._registry_topic is not None:
                logs.append(self._registry_topic)
            self._registry_topic, self._registry, self._registry_pos = None, {}, 0
        for log_ in logs:
            log_.close()

    def close(self) -> None:
        with self._lock:
            logs, self._logs = list(self._logs.values()), {}
            sender, self._sender = self._sender, None
        if self._registry_topic is not None:
            logs.append(self._registry_topic)
        for log_ in logs:
            log_.close()
        if sender is not None:
            sender.close(self.settings.request_timeout_ms / 1000)
        self.admin.close()
