"""The log layer: one contract for ordered, durable logs, and its backends.

Knows nothing of steps, tables or Spark. :func:`open_store` is the one factory.
"""

from __future__ import annotations

from typing import Any

from pyspark_durable.errors import ConfigError
from pyspark_durable.log.base import Entry, Log, LogStore, Record, region_log_name
from pyspark_durable.log.file import FileLogStore
from pyspark_durable.log.memory import MemoryLogStore

BACKENDS: dict[str, str] = {
    "file": "pyspark_durable.log.file:FileLogStore",
    "memory": "pyspark_durable.log.memory:MemoryLogStore",
    "kafka": "pyspark_durable.log.kafka.store:KafkaLogStore",
}


def store_class(backend: str) -> type[LogStore]:
    """The LogStore class of a backend name; unknown names list the known ones."""
    try:
        target = BACKENDS[backend]
    except KeyError:
        raise ConfigError(
            f"unknown log backend {backend!r}; valid: {', '.join(sorted(BACKENDS))}"
        ) from None
    module_name, _, cls_name = target.partition(":")
    import importlib

    return getattr(importlib.import_module(module_name), cls_name)


def open_store(backend: str, namespace: str, /, **config: Any) -> LogStore:
    """Open the logs of ``namespace`` in ``backend`` (``file``, ``kafka``, ``memory``)."""
    cls = store_class(backend)
    misplaced = sorted({"backend", "namespace"} & set(config))
    if misplaced:
        raise ConfigError(f"{misplaced} given among the {backend} backend options: backend "
                          "and namespace are set once, next to the options, not inside them")
    return cls(namespace, **config)


__all__ = [
    "BACKENDS",
    "Entry",
    "FileLogStore",
    "Log",
    "LogStore",
    "MemoryLogStore",
    "Record",
    "open_store",
    "region_log_name",
    "store_class",
]
