"""Which namespaces a WAL holds: the one rule the endpoints, the CLI and Spark's messages
share (through :func:`pyspark_durable.endpoint.config.wal_namespaces`).

A backend lists every name its storage has room for a namespace under: a file WAL every
folder of its root, S3 every prefix, Kafka every ``{name}_snapshots`` topic. Not each is
a namespace: a user keeps other folders beside a WAL (``/jobs/orders/wal/{shop,ckpt}``)
and a stray folder or prefix holds no WAL. So a namespace is a listed name that holds a
commits log, the log every namespace is created with (the log layer answers "which hold
a log named X" without knowing what the log means).

On the file backend that is not enough: a Spark checkpoint has a ``commits`` folder too,
and opening it as a namespace would write a file log into Spark's folder. A folder with
Spark's ``checkpointLocation`` layout (a ``metadata`` file beside an ``offsets`` or
``commits`` folder; no namespace has a ``metadata`` file) is therefore no namespace, even
one an earlier tool wrote a file log into. S3 namespaces keep their logs below
``logs/``, so a checkpoint there never has a commits log; Kafka holds no checkpoints.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pyspark_durable.errors import LogNotFound
from pyspark_durable.log import store_class
from pyspark_durable.wal.ledger import COMMITS_LOG

SPARK_CHECKPOINT_FILE = "metadata"
SPARK_CHECKPOINT_LOGS = ("offsets", COMMITS_LOG)
SPARK_SINK_LOG = "_spark_metadata"


def spark_checkpoint(folder: Path) -> bool:
    """Spark's ``checkpointLocation`` layout: a ``metadata`` file (the query id) beside
    an ``offsets`` or ``commits`` folder."""
    return (folder / SPARK_CHECKPOINT_FILE).is_file() and any(
        (folder / name).is_dir() for name in SPARK_CHECKPOINT_LOGS
    )


def spark_output(folder: Path) -> bool:
    """A Spark file sink's output folder (its ``_spark_metadata`` log)."""
    return (folder / SPARK_SINK_LOG).is_dir()


def namespace_folder(folder: Path) -> bool:
    """Whether a file WAL's folder is a namespace: its commits log, and no checkpoint."""
    return (folder / COMMITS_LOG).is_dir() and not spark_checkpoint(folder)


def checkpoint_named(backend: str, options: Mapping[str, Any], name: str) -> bool:
    """Whether ``name`` in the WAL of ``backend`` at ``options`` is a Spark checkpoint:
    the one kind of listed name with a commits log that is no namespace, and that must be
    refused before it is opened (a file log would write into Spark's folder)."""
    return backend == "file" and spark_checkpoint(Path(options.get("path", "")) / name)


def namespaces_held(backend: str, options: Mapping[str, Any]) -> list[str]:
    """The namespaces the WAL of ``backend`` at ``options`` holds, sorted; a WAL root that
    does not exist is :class:`~pyspark_durable.errors.LogNotFound`, as the backend says."""
    names = store_class(backend).namespaces_holding(options, COMMITS_LOG)
    return sorted(n for n in names if not checkpoint_named(backend, options, n))


def namespaces_or_none(backend: str, options: Mapping[str, Any]) -> list[str]:
    """:func:`namespaces_held`, empty where the WAL root does not exist: what a message
    about a missing namespace lists (it names the missing root by its location)."""
    try:
        return namespaces_held(backend, options)
    except LogNotFound:
        return []


def folder_namespaces(folder: Path) -> list[str]:
    """The namespaces of the file WAL rooted at ``folder`` (empty: it is no WAL root)."""
    return namespaces_or_none("file", {"path": folder})
