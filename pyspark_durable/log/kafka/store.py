"""The Kafka log store: one namespace's logs as topics, its snapshots and registry.

The design rules are in :mod:`pyspark_durable.log.kafka` (the package) and
:mod:`~pyspark_durable.log.kafka.topics` (the topics). The client (confluent-kafka or
kafka-python) is chosen once, when the store is made
(:func:`~pyspark_durable.log.kafka.settings.client_for`); the store's admin, its
:class:`~pyspark_durable.log.kafka.pool.ClientPool` (sender and readers) and so every
log come from that one choice. Snapshots are keys of the
:class:`~pyspark_durable.log.kafka.registry.Registry`.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from pyspark_durable.errors import ConfigError, LogNotFound
from pyspark_durable.log.base import (
    NAME_RE,
    UNVERSIONED,
    Log,
    LogStore,
    check_name,
    check_version,
)
from pyspark_durable.log.kafka.api import TopicAdmin
from pyspark_durable.log.kafka.listener import check_listener
from pyspark_durable.log.kafka.log import KafkaLog
from pyspark_durable.log.kafka.pool import ClientPool
from pyspark_durable.log.kafka.registry import Registry
from pyspark_durable.log.kafka.settings import KafkaSettings, client_for
from pyspark_durable.log.kafka.topics import LOG_TOPIC_CONFIG, SNAPSHOTS


class KafkaLogStore(LogStore):
    """The logs of one namespace as topics ``{namespace}_{log}``; see the module docstring."""

    type_name = "kafka"
    # record_copies stays 1: the brokers replicate every batch and CRC it

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
        self.settings = KafkaSettings.parse(
            {
                "bootstrap_servers": bootstrap_servers,
                "connect_timeout_ms": connect_timeout_ms,
                "request_timeout_ms": request_timeout_ms,
                "linger_ms": linger_ms,
                "batch_size": batch_size,
                "compression_type": compression_type,
                **kafka_options,
            }
        )
        self.client = client_for(self.settings.client)  # the one choice of this store
        check_listener(self.settings.bootstrap_servers, self.settings.clients["admin"], namespace)
        self.admin: TopicAdmin = self.client.admin(self.settings, namespace)
        self.pool = ClientPool(self.client, self.settings, namespace)
        self.registry = Registry(self.pool, self.admin)
        self._logs: dict[str, KafkaLog] = {}
        self._lock = threading.Lock()
        self._writable: set[str] = set()  # logs whose topic was checked for writing

    def topic(self, name: str) -> str:
        return f"{self.namespace}_{name}"

    # -- logs -----------------------------------------------------------------

    @staticmethod
    def _topics(config: Mapping[str, Any]) -> list[str]:
        """The topics of the cluster ``config`` points at, through an admin of its own."""
        settings = KafkaSettings.parse(config)
        check_listener(settings.bootstrap_servers, settings.clients["admin"])
        admin = client_for(settings.client).admin(settings)
        try:
            return admin.list_topics()
        finally:
            admin.close()

    @classmethod
    def list_namespaces(cls, config: Mapping[str, Any]) -> list[str]:
        return cls._namespaces_in(cls._topics(config))

    @classmethod
    def namespaces_holding(cls, config: Mapping[str, Any], log: str) -> list[str]:
        """A log is the topic ``{namespace}_{log}``: one topic listing answers for all."""
        topics = cls._topics(config)
        present = set(topics)
        return [n for n in cls._namespaces_in(topics) if f"{n}_{log}" in present]

    @staticmethod
    def _namespaces_in(topics: list[str]) -> list[str]:
        suffix = f"_{SNAPSHOTS}"
        return sorted(
            t[: -len(suffix)] for t in topics if t.endswith(suffix) and NAME_RE.fullmatch(t[: -len(suffix)])
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
                found.append(
                    (
                        name,
                        f"topic {topic} has {problem}: the broker would delete "
                        "WAL records on its own (set retention.ms=-1, "
                        "retention.bytes=-1, and cleanup.policy="
                        f"{'compact' if name == SNAPSHOTS else 'delete'})",
                    )
                )
        return found

    def list_logs(self) -> list[str]:
        registered = self.registry.logs()
        existing = set(self.admin.list_topics())
        return sorted(n for n in registered if self.topic(n) in existing)

    def open_log(self, name: str, create: bool = True) -> Log:
        check_name("log", name)
        if name == SNAPSHOTS or name.endswith(f"_{SNAPSHOTS}"):
            raise ConfigError(
                f"log name {name!r} is invalid: '{SNAPSHOTS}' and '*_{SNAPSHOTS}' are reserved",
                namespace=self.namespace,
            )
        with self._lock:
            existing = self._logs.get(name)
        if existing is not None and (not create or name in self._writable):
            return existing
        topic = self.topic(name)
        if create:
            self.registry.add_log(name)  # before its topic: list_logs
        if not self.admin.ensure(topic, create, LOG_TOPIC_CONFIG):
            raise LogNotFound(
                f"log does not exist (no topic {topic!r} on {self.settings.bootstrap_servers})",
                namespace=self.namespace,
                log=name,
            )
        with self._lock:
            if create:  # its retention was checked for writing (OneTopicRule.ensure)
                self._writable.add(name)
            return self._logs.setdefault(name, KafkaLog(self.pool, self.registry, name, topic))

    # -- snapshots: keys of the registry ------------------------------------------

    @staticmethod
    def _snapshot_key(name: str, version: int) -> bytes:
        check_name("snapshot", name)
        return f"snapshot/{name}/{check_version(version):020d}".encode()

    def write_snapshot(self, name: str, version: int, data: bytes) -> None:
        if not data:
            raise ConfigError(
                "an empty snapshot cannot be stored (empty means deleted)",
                namespace=self.namespace,
                snapshot=name,
            )
        self.registry.put(self._snapshot_key(name, version), bytes(data))

    def snapshot_versions(self, name: str) -> list[int]:
        """The stored versions; an unversioned key ``snapshot/{name}`` (written by earlier
        releases) is listed as version 0, so that any versioned one is newer."""
        prefix = f"snapshot/{check_name('snapshot', name)}/".encode()
        view = self.registry.view()
        versions = {
            int(k[len(prefix) :])
            for k, v in view.items()
            if k.startswith(prefix) and k[len(prefix) :].isdigit() and v
        }
        if view.get(prefix[:-1]):
            versions.add(UNVERSIONED)
        return sorted(versions)

    def read_snapshot_version(self, name: str, version: int) -> bytes | None:
        view = self.registry.view()
        return next((view[k] for k in self._snapshot_keys(name, version) if view.get(k)), None)

    def delete_snapshot(self, name: str, version: int) -> None:
        for key in self._snapshot_keys(name, version):
            if self.registry.view().get(key):
                # a tombstone: compaction removes the version, then (delete.retention.ms
                # later) the tombstone itself; reads take it as empty, i.e. deleted
                self.registry.put(key, None)

    def _snapshot_keys(self, name: str, version: int) -> list[bytes]:
        """The keys of one version: version 0 may be an older release's unversioned one."""
        key = self._snapshot_key(name, version)
        return [key, f"snapshot/{name}".encode()] if version == UNVERSIONED else [key]

    def reset(self) -> None:
        with self._lock:
            logs, self._logs = list(self._logs.values()), {}
            self._writable = set()
        self.registry.reset()
        for log_ in logs:
            log_.close()

    def close(self) -> None:
        with self._lock:
            logs, self._logs = list(self._logs.values()), {}
        for log_ in logs:
            log_.close()
        self.registry.close()
        self.pool.close()
        self.admin.close()
