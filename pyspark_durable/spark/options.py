"""Options of the ``durablewal`` data source, parsed from Spark's string options.

Spark hands options as strings in a case-insensitive mapping. They are parsed once
into a frozen dataclass: each value by the parser the option table gives it
(:mod:`pyspark_durable.spark.option_table`), then the rules that span options. An
unknown key is an error that lists the valid ones. Options named ``{backend}.*`` (for
example ``kafka.bootstrap.servers``) pass through to the log backend untouched: this
layer does not know what they mean.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from pyspark_durable.endpoint.config import resolved_backend
from pyspark_durable.errors import ConfigError
from pyspark_durable.spark.option_table import OPTIONS
from pyspark_durable.spark.option_table import default as D

# What Spark itself adds to a Python data source's options (pyspark 4.3, found by
# probing every read and write call): ``path`` (``.load(p)``, ``.save(p)``,
# ``.start(p)``), ``paths`` (``.load([p1, p2])``, a JSON list) and ``queryName``
# (``.queryName(...)`` on a streaming write). ``checkpointLocation`` arrives only when
# the user sets it as an option; ``partitionBy``, the save mode and the trigger never do.
_CANONICAL = {k.lower(): k for k in OPTIONS}
# options of which a read takes at most one: each says where it starts, or where it ends
_ONE_OF = (("startingStep", "startingTimestamp", "startingEventTime"), ("endingStep", "endingTimestamp"))


@dataclass(frozen=True)
class WalOptions:
    """Every option of the data source, typed; see docs/options.md. The defaults are
    the table's, so a WalOptions built in code means what the same options parsed mean."""

    backend: str = D("backend")
    namespace: str = D("namespace")
    namespace_id: int | None = None  # None: 0 for a new namespace, the stored id for reads
    store: Mapping[str, Any] = field(default_factory=dict)
    region: int = D("region")
    region_column: str | None = None
    table: str = D("table")
    table_column: str | None = None
    payload_format: str = D("payloadFormat")
    merge_schema: bool = D("mergeSchema")
    entry_max_bytes: int = D("entryMaxBytes")
    regions: tuple[int, ...] | None = None
    tables: tuple[str | int, ...] | None = None  # str: a name, int: a table id
    metadata_columns: tuple[str, ...] = D("metadataColumns")
    starting_step: str = D("startingStep")
    starting_timestamp_ms: int | None = None
    starting_event_time_ms: int | None = None
    event_time_column: str | None = None
    ending_step: int | None = None
    ending_timestamp_ms: int | None = None
    max_steps_per_trigger: int | None = None
    max_rows_per_trigger: int | None = None
    max_bytes_per_trigger: int | None = None
    min_rows_per_trigger: int | None = None
    max_trigger_delay_ms: int = D("maxTriggerDelay")  # Spark's Kafka source's 15 min
    min_partitions: int | None = None  # None: the driver's cores, splitting big reads only
    max_rows_per_partition: int = D("maxRowsPerPartition")
    fail_on_data_loss: bool = D("failOnDataLoss")
    reader_id: str | None = None
    hold_retention: bool = D("holdRetention")
    retention_ms: int | None = None
    retention_steps: int | None = None
    auto_clean: bool = D("autoClean")
    clean_interval_ms: int = D("cleanIntervalMs")
    clean_grace_ms: int = D("cleanGraceMs")

    @staticmethod
    def parse(options: Mapping[str, str]) -> WalOptions:
        """Every option parsed by its table entry, then the rules that span options."""
        backend, path = _location(options)
        raw, passthrough = _split(options, backend)
        values = {o.field: o.default for o in OPTIONS.values() if o.field}
        for name, given in raw.items():
            opt = OPTIONS[name]
            if opt.field and given is not None:
                values[opt.field] = opt.value(given)
        values["backend"] = backend
        if values["backend"] == "memory":
            raise ConfigError(
                "option backend=memory: the memory backend lives inside one Python process, "
                "and Spark runs readers and writers in separate Python worker processes, so "
                "rows would vanish. Use backend=file with a temporary folder instead"
            )
        _agree(raw, values)
        return WalOptions(**values, store=_store(backend, path, passthrough))

    def key(self) -> tuple:
        """Hashable identity, to share one open namespace per worker process."""
        return tuple(
            (f.name, repr(getattr(self, f.name)))
            for f in fields(self)
            if f.name in ("backend", "namespace", "namespace_id", "store")
        )


def unknown_option(key: str, backend: str) -> str:
    """The error for an unknown option: the closest valid name first, then all of them."""
    close = difflib.get_close_matches(key.lower(), list(_CANONICAL), n=1, cutoff=0.6)
    hint = f"; did you mean {_CANONICAL[close[0]]!r}?" if close else ""
    return (
        f"unknown option {key!r}{hint} (valid options: {', '.join(OPTIONS)}, and "
        f"{backend}.* for the {backend} backend)"
    )


def _one_path(path: str | None, paths: str) -> str:
    """``.load([p])`` hands ``paths`` as a JSON list: a WAL is read from one root."""
    try:
        listed = json.loads(paths)
    except ValueError:
        listed = None
    if not isinstance(listed, list) or not all(isinstance(p, str) for p in listed):
        raise ConfigError(f"option paths={paths!r} is not a JSON list of paths")
    chosen = sorted({p for p in [*listed, path] if p})
    if len(chosen) != 1:
        raise ConfigError(
            f"a WAL is read from one root folder, {len(chosen)} were given "
            f"({', '.join(chosen) or 'none'}); read each and union the DataFrames"
        )
    return chosen[0]


def _location(options: Mapping[str, str]) -> tuple[str, str | None]:
    """(backend, the WAL root): the backend option, or the one the path names
    (``s3://bucket/prefix`` is ``s3``; a URL of a scheme the WAL cannot store to is refused
    here, by name), and ``path`` or the one root of ``paths``."""
    given = {k.lower(): v for k, v in options.items()}
    backend = str(given.get("backend", "file")).strip().lower()
    path = given.get("path")
    if given.get("paths"):
        path = _one_path(path, given["paths"])
    return resolved_backend(backend, {"path": path} if path else {}), path or None


def _split(options: Mapping[str, str], backend: str) -> tuple[dict[str, str], dict[str, str]]:
    """The options of the table by their canonical names, and those passed through to
    the backend (named ``{backend}.*``); any other key is an unknown option."""
    raw: dict[str, str] = {}
    passthrough: dict[str, str] = {}
    for key, value in options.items():
        lowered = key.lower()
        if lowered.startswith(backend + "."):
            passthrough[key] = value
        elif lowered in _CANONICAL:
            raw[_CANONICAL[lowered]] = value
        else:
            raise ConfigError(unknown_option(key, backend))
    return raw, passthrough


def _agree(raw: Mapping[str, str], values: Mapping[str, Any]) -> None:
    """The rules between options: one start and one end of a read, ``maxTriggerDelay``
    only bounding a ``minRowsPerTrigger`` wait, ``holdRetention`` only with a reader id."""
    for group in _ONE_OF:
        given = [k for k in group if raw.get(k) is not None]
        if len(given) > 1:
            both = "both" if len(given) == 2 else "all"
            raise ConfigError(
                f"options {' and '.join(f'{k}={raw[k]!r}' for k in given)} "
                f"{both} say where to read; give one of them"
            )
    if raw.get("maxTriggerDelay") is not None and raw.get("minRowsPerTrigger") is None:
        raise ConfigError(
            f"option maxTriggerDelay={raw['maxTriggerDelay']!r} bounds the "
            "wait of minRowsPerTrigger, which is not set: set both, or neither"
        )
    if values["hold_retention"] and not raw.get("readerId"):
        raise ConfigError(
            "option holdRetention=true needs a readerId: retention is held "
            "at the position recorded under that id"
        )


def _store(backend: str, path: str | None, passthrough: Mapping[str, str]) -> dict[str, Any]:
    """The backend's options: those passed through and the WAL root, which the file
    backend needs; ``file.x`` and ``s3.x`` are the file and s3 backends' ``x`` (the Kafka
    backend reads its ``kafka.*`` names itself)."""
    store: dict[str, Any] = dict(passthrough)
    if path:
        store["path"] = path
    if backend == "file" and "path" not in store:
        raise ConfigError(
            "the file backend needs a path: .load(path), .start(path) or .save(path), or option path"
        )
    if backend not in ("file", "s3"):
        return store
    prefix = backend + "."
    return {k[len(prefix):] if k.lower().startswith(prefix) else k: v for k, v in store.items()}
