"""Options of the ``durablewal`` data source, parsed from Spark's string options.

Spark hands options as strings in a case-insensitive mapping. They are parsed once
into a frozen dataclass; an unknown key is an error that lists the valid ones.
Options named ``{backend}.*`` (for example ``kafka.bootstrap.servers``) pass through
to the log backend untouched: this layer does not know what they mean.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from pyspark_durable.errors import ConfigError
from pyspark_durable.spark.option_table import OPTIONS
from pyspark_durable.spark.option_table import default as D
from pyspark_durable.times import duration_ms, timestamp_ms

# What Spark itself adds to a Python data source's options (pyspark 4.3, found by
# probing every read and write call): ``path`` (``.load(p)``, ``.save(p)``,
# ``.start(p)``), ``paths`` (``.load([p1, p2])``, a JSON list) and ``queryName``
# (``.queryName(...)`` on a streaming write). ``checkpointLocation`` arrives only when
# the user sets it as an option; ``partitionBy``, the save mode and the trigger never do.
_CANONICAL = {k.lower(): k for k in OPTIONS}


def _int(name: str, value: str | None, default: int | None = None,
         minimum: int | None = 0) -> int | None:
    if value is None:
        return default
    # ASCII decimals only: int() would also read "\u0667" (Arabic-Indic 7) or "1_0"
    if not re.fullmatch(r"\s*[+-]?[0-9]+\s*", str(value)):
        raise ConfigError(f"option {name}={value!r} is not an integer")
    n = int(value)
    if minimum is not None and n < minimum:
        raise ConfigError(f"option {name}={value!r} must be >= {minimum}")
    return n


def _retention_limit(name: str, value: str | None) -> int | None:
    """A retention limit is >= 1: many tools read 0 as "no limit", here it would expire
    every step at the next clean, so it is refused with how to keep everything."""
    n = _int(name, value, minimum=None)
    if n is not None and n < 1:
        raise ConfigError(f"option {name}={value!r} would expire every step: 0 is not "
                          f"'no limit'; leave {name} out to keep every step")
    return n


def _bool(name: str, value: str | None, default: bool) -> bool:
    if value is None:
        return default
    lowered = str(value).strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ConfigError(f"option {name}={value!r} is not true or false")


def _timestamp(name: str, value: str | None) -> int | None:
    return None if value is None else timestamp_ms(f"option {name}", value)


def _list(value: str | None) -> tuple[str, ...] | None:
    if value is None or not value.strip():
        return None
    return tuple(v.strip() for v in value.split(",") if v.strip())


def _tables(value: str | None) -> tuple[str | int, ...] | None:
    """The ``tables`` option: names, never numbers read as ids.

    A comma list (``a, b``) gives names stripped of spaces; a JSON list (``["a,b", " c ",
    7]``) gives strings as names exactly as written and integers as table ids (tables an
    older version created from numeric names), so every name a writer can create can be
    selected.
    """
    if value is None or not value.strip():
        return None
    if not value.lstrip().startswith("["):
        return _list(value)
    try:
        listed = json.loads(value)
    except ValueError as exc:
        raise ConfigError(f"option tables={value!r} starts with '[' but is not a JSON list "
                          f"({exc}); write it as a JSON list of names and ids, e.g. "
                          '["a,b", " c ", 7], or as a comma list of names') from None
    if not isinstance(listed, list) or not listed:
        raise ConfigError(f"option tables={value!r} is not a non-empty JSON list of table "
                          "names (strings) and ids (integers)")
    for item in listed:
        is_id = isinstance(item, int) and not isinstance(item, bool) and 0 <= item < 1 << 64
        if not (is_id or (isinstance(item, str) and item)):
            raise ConfigError(f"option tables={value!r}: {item!r} is neither a table name (a "
                              "non-empty string) nor a table id (an integer in [0, 2**64))")
    return tuple(listed)


@dataclass(frozen=True)
class WalOptions:
    """Every option of the data source, typed; see README's options table."""

    backend: str = "file"
    namespace: str = "default"
    namespace_id: int | None = None  # None: 0 for a new namespace, the stored id for reads
    store: Mapping[str, Any] = field(default_factory=dict)
    region: int = 0
    region_column: str | None = None
    table: str = "default"
    table_column: str | None = None
    payload_format: str = "arrow"
    merge_schema: bool = False
    entry_max_bytes: int = D("entryMaxBytes")
    regions: tuple[int, ...] | None = None
    tables: tuple[str | int, ...] | None = None  # str: a name, int: a table id
    starting_step: str = "earliest"
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
    fail_on_data_loss: bool = True
    reader_id: str | None = None
    hold_retention: bool = False
    retention_ms: int | None = None
    retention_steps: int | None = None
    auto_clean: bool = True
    clean_interval_ms: int = D("cleanIntervalMs")
    clean_grace_ms: int = D("cleanGraceMs")

    @staticmethod
    def parse(options: Mapping[str, str]) -> WalOptions:
        raw: dict[str, str] = {}
        passthrough: dict[str, str] = {}
        backend = "file"
        for key, value in options.items():
            if key.lower() == "backend":
                backend = str(value).strip().lower()
        for key, value in options.items():
            lowered = key.lower()
            if lowered.startswith(backend + "."):
                passthrough[key] = value
            elif lowered in _CANONICAL:
                raw[_CANONICAL[lowered]] = value
            else:
                raise ConfigError(unknown_option(key, backend))
        if backend not in ("file", "kafka", "memory"):
            raise ConfigError(f"option backend={backend!r}; valid: file, kafka, memory")
        if backend == "memory":
            raise ConfigError(
                "option backend=memory: the memory backend lives inside one Python process, "
                "and Spark runs readers and writers in separate Python worker processes, so "
                "rows would vanish. Use backend=file with a temporary folder instead")
        store: dict[str, Any] = dict(passthrough)
        if raw.get("paths"):
            raw["path"] = _one_path(raw.get("path"), raw["paths"])
        if raw.get("path"):
            store["path"] = raw["path"]
        if backend == "file" and "path" not in store:
            raise ConfigError("the file backend needs a path: .load(path), .start(path) or "
                              ".save(path), or option path")
        if backend == "file":  # file.segment_size_bytes -> segment_size_bytes
            store = {k.split(".", 1)[1] if k.lower().startswith("file.") else k: v
                     for k, v in store.items()}
        starting = str(raw.get("startingStep", D("startingStep"))).strip().lower()
        if starting not in ("earliest", "latest"):
            starting = str(_int("startingStep", starting))
        fmt = str(raw.get("payloadFormat", D("payloadFormat"))).strip().lower()
        if fmt not in ("arrow", "avro"):
            raise ConfigError(f"option payloadFormat={fmt!r}; valid: arrow, avro")
        starts = [k for k in ("startingStep", "startingTimestamp", "startingEventTime")
                  if raw.get(k) is not None]
        if len(starts) > 1:
            both = "both" if len(starts) == 2 else "all"
            raise ConfigError(f"options {' and '.join(f'{k}={raw[k]!r}' for k in starts)} "
                              f"{both} say where to read; give one of them")
        for by_step, by_time in (("startingStep", "startingTimestamp"),
                                 ("endingStep", "endingTimestamp")):
            if raw.get(by_step) is not None and raw.get(by_time) is not None:
                raise ConfigError(f"options {by_step}={raw[by_step]!r} and {by_time}="
                                  f"{raw[by_time]!r} both say where to read; give one of them")
        if raw.get("maxTriggerDelay") is not None and raw.get("minRowsPerTrigger") is None:
            raise ConfigError(f"option maxTriggerDelay={raw['maxTriggerDelay']!r} bounds the "
                              "wait of minRowsPerTrigger, which is not set: set both, or neither")
        regions = _list(raw.get("regions"))
        hold = _bool("holdRetention", raw.get("holdRetention"), D("holdRetention"))
        if hold and not raw.get("readerId"):
            raise ConfigError("option holdRetention=true needs a readerId: retention is held "
                              "at the position recorded under that id")
        return WalOptions(
            backend=backend,
            namespace=str(raw.get("namespace", D("namespace"))),
            namespace_id=_int("namespaceId", raw.get("namespaceId")),
            store=store,
            region=_int("region", raw.get("region"), D("region")),
            region_column=raw.get("regionColumn"),
            table=str(raw.get("table", D("table"))),
            table_column=raw.get("tableColumn"),
            payload_format=fmt,
            merge_schema=_bool("mergeSchema", raw.get("mergeSchema"), D("mergeSchema")),
            entry_max_bytes=_int("entryMaxBytes", raw.get("entryMaxBytes"), D("entryMaxBytes"), 1024),
            regions=None if regions is None else tuple(_int("regions", r) for r in regions),
            tables=_tables(raw.get("tables")),
            starting_step=starting,
            starting_timestamp_ms=_timestamp("startingTimestamp", raw.get("startingTimestamp")),
            starting_event_time_ms=_timestamp("startingEventTime", raw.get("startingEventTime")),
            event_time_column=raw.get("eventTimeColumn"),
            ending_step=_int("endingStep", raw.get("endingStep")),
            ending_timestamp_ms=_timestamp("endingTimestamp", raw.get("endingTimestamp")),
            max_steps_per_trigger=_int("maxStepsPerTrigger", raw.get("maxStepsPerTrigger"),
                                       minimum=1),
            max_rows_per_trigger=_int("maxRowsPerTrigger", raw.get("maxRowsPerTrigger"),
                                      minimum=1),
            max_bytes_per_trigger=_int("maxBytesPerTrigger", raw.get("maxBytesPerTrigger"),
                                       minimum=1),
            min_rows_per_trigger=_int("minRowsPerTrigger", raw.get("minRowsPerTrigger"),
                                      minimum=1),
            max_trigger_delay_ms=D("maxTriggerDelay") if raw.get("maxTriggerDelay") is None
            else duration_ms("maxTriggerDelay", raw["maxTriggerDelay"]),
            min_partitions=_int("minPartitions", raw.get("minPartitions"), minimum=1),
            max_rows_per_partition=_int("maxRowsPerPartition", raw.get("maxRowsPerPartition"),
                                        D("maxRowsPerPartition"), 1),
            fail_on_data_loss=_bool("failOnDataLoss", raw.get("failOnDataLoss"), D("failOnDataLoss")),
            reader_id=raw.get("readerId"),
            hold_retention=hold,
            retention_ms=_retention_limit("retentionMs", raw.get("retentionMs")),
            retention_steps=_retention_limit("retentionSteps", raw.get("retentionSteps")),
            auto_clean=_bool("autoClean", raw.get("autoClean"), D("autoClean")),
            clean_interval_ms=_int("cleanIntervalMs", raw.get("cleanIntervalMs"), D("cleanIntervalMs")),
            clean_grace_ms=_int("cleanGraceMs", raw.get("cleanGraceMs"), D("cleanGraceMs")),
        )

    def key(self) -> tuple:
        """Hashable identity, to share one open namespace per worker process."""
        return tuple((f.name, repr(getattr(self, f.name))) for f in fields(self)
                     if f.name in ("backend", "namespace", "namespace_id", "store"))


def unknown_option(key: str, backend: str) -> str:
    """The error for an unknown option: the closest valid name first, then all of them."""
    close = difflib.get_close_matches(key.lower(), list(_CANONICAL), n=1, cutoff=0.6)
    hint = f"; did you mean {_CANONICAL[close[0]]!r}?" if close else ""
    return (f"unknown option {key!r}{hint} (valid options: {', '.join(OPTIONS)}, and "
            f"{backend}.* for the {backend} backend)")


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
        raise ConfigError(f"a WAL is read from one root folder, {len(chosen)} were given "
                          f"({', '.join(chosen) or 'none'}); read each and union the DataFrames")
    return chosen[0]
