"""In-process memory backend: for unit tests and notebooks, never for durability.

Stores live in a process-wide registry keyed by namespace, so two stores opened on
the same namespace in one process see the same logs, as with a real backend.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pyspark_durable.errors import ConfigError, LogNotFound
from pyspark_durable.log.base import (
    Entry,
    Log,
    LogStore,
    Record,
    check_name,
    check_version,
    merge_ranges,
)

_REGISTRY: dict[str, _Namespace] = {}
_REGISTRY_LOCK = threading.Lock()


class _Namespace:
    def __init__(self) -> None:
        self.logs: dict[str, MemoryLog] = {}
        self.snapshots: dict[str, dict[int, bytes]] = {}


class MemoryLog(Log):
    def __init__(self, namespace: str, name: str) -> None:
        super().__init__(namespace, name)
        self._entries: list[Entry | None] = []  # None: freed
        self._low = 0
        self._lock = threading.Lock()

    can_free = True

    def append(self, records: Sequence[Record]) -> list[int]:
        now = int(time.time() * 1000)
        with self._lock:
            base = len(self._entries)
            for i, r in enumerate(records):
                self._entries.append(Entry(base + i, bytes(r.key), bytes(r.value), tuple(r.headers), now))
            return list(range(base, base + len(records)))

    def read(self, start: int, end: int | None = None) -> Iterator[Entry]:
        with self._lock:
            low, high = self._low, len(self._entries)
        self.check_range(start, low, high)
        stop = high if end is None else min(end, high)
        return self._iter(start, stop)

    def _iter(self, start: int, stop: int) -> Iterator[Entry]:
        for offset in range(start, stop):
            with self._lock:
                if offset < self._low:
                    self.check_range(offset, self._low, len(self._entries))
                entry = self._entries[offset]
            if entry is not None:  # a freed offset is skipped (log/base.py)
                yield entry

    def low_watermark(self) -> int:
        return self._low

    def high_watermark(self) -> int:
        return len(self._entries)

    def delete_before(self, offset: int) -> None:
        with self._lock:
            self._low = max(self._low, min(offset, len(self._entries)))

    def free(self, ranges: Sequence[tuple[int, int]]) -> None:
        with self._lock:
            for start, end in ranges:
                for offset in range(max(start, self._low), min(end, len(self._entries))):
                    self._entries[offset] = None

    def freed_ranges(self) -> list[tuple[int, int]]:
        with self._lock:
            return merge_ranges((o, o + 1) for o in range(self._low, len(self._entries))
                                if self._entries[o] is None)


class MemoryLogStore(LogStore):
    type_name = "memory"
    # as the file backend: nothing here is damaged, but the fast suites then lay out and
    # read back the commits log (offsets, skipped copies) as a file WAL does
    record_copies = 2

    def __init__(self, namespace: str, **config: Any) -> None:
        super().__init__(namespace)
        if config:
            raise ConfigError(f"unknown memory backend options {sorted(config)}; valid: none")
        with _REGISTRY_LOCK:
            self._ns = _REGISTRY.setdefault(namespace, _Namespace())

    @classmethod
    def list_namespaces(cls, config: Mapping[str, Any]) -> list[str]:
        with _REGISTRY_LOCK:  # a store merely opened holds no log: not a namespace yet
            return sorted(name for name, ns in _REGISTRY.items() if ns.logs)

    @classmethod
    def namespaces_holding(cls, config: Mapping[str, Any], log: str) -> list[str]:
        with _REGISTRY_LOCK:
            return sorted(name for name, ns in _REGISTRY.items() if log in ns.logs)

    def sibling_namespaces(self) -> list[str]:
        return self.list_namespaces({})

    def list_logs(self) -> list[str]:
        with _REGISTRY_LOCK:
            return sorted(self._ns.logs)

    def open_log(self, name: str, create: bool = True) -> Log:
        check_name("log", name)
        with _REGISTRY_LOCK:
            log = self._ns.logs.get(name)
            if log is None:
                if not create:
                    raise LogNotFound("log does not exist", namespace=self.namespace, log=name)
                log = self._ns.logs[name] = MemoryLog(self.namespace, name)
            return log

    def write_snapshot(self, name: str, version: int, data: bytes) -> None:
        check_name("snapshot", name)
        check_version(version)
        with _REGISTRY_LOCK:
            self._ns.snapshots.setdefault(name, {})[version] = bytes(data)

    def snapshot_versions(self, name: str) -> list[int]:
        with _REGISTRY_LOCK:
            return sorted(self._ns.snapshots.get(name, {}))

    def read_snapshot_version(self, name: str, version: int) -> bytes | None:
        with _REGISTRY_LOCK:
            return self._ns.snapshots.get(name, {}).get(version)

    def delete_snapshot(self, name: str, version: int) -> None:
        with _REGISTRY_LOCK:
            self._ns.snapshots.get(name, {}).pop(version, None)
