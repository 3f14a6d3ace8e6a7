"""The log layer: one contract for ordered, durable logs, and its backends.

Knows nothing of steps, tables or Spark. :func:`open_store` is the one factory.
"""

from __future__ import annotations

from typing import Any

from pyspark_durable.errors import ConfigError
from pyspark_durable.log.base import Entry, Log, LogStore, Record, region_log_name
from pyspark_durable.log.file import FileLogStore
from pyspark_durable.log.locations import backend_of_path
from pyspark_durable.log.memory import MemoryLogStore

BACKENDS: dict[str, str] = {
    "file": "pyspark_durable.log.file:FileLogStore",
    "memory": "pyspark_durable.log.memory:MemoryLogStore",
    "kafka": "pyspark_durable.log.kafka.store:KafkaLogStore",
    "s3": "pyspark_durable.log.s3.store:S3LogStore",
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


def resolved_backend(backend: str, options: Any) -> str:
    """The backend a config means: ``file`` with an ``s3://`` path is ``s3``; a path of an
    unknown scheme is a :class:`ConfigError` naming it."""
    path = options.get("path") if hasattr(options, "get") else None
    if backend == "file" and path is not None:
        return backend_of_path(str(path)) or backend
    return backend


def open_store(backend: str, namespace: str, /, **config: Any) -> LogStore:
    """Open the logs of ``namespace`` in ``backend`` (``file``, ``kafka``, ``memory``, ``s3``).

    A file store given an ``s3://`` path is the S3 store of that path; a URL of any other
    scheme is refused by name (:mod:`.locations`), never taken for a local folder."""
    backend = resolved_backend(backend, config)
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
    "backend_of_path",
    "open_store",
    "region_log_name",
    "resolved_backend",
    "store_class",
]
