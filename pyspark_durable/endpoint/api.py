"""A small Python API for applications that use the WAL without Spark."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from pyspark_durable.endpoint.step_times import end_step_for, first_step_since
from pyspark_durable.errors import ConfigError, SchemaMismatch, StepExpired, StepNotCommitted
from pyspark_durable.times import timestamp_ms
from pyspark_durable.wal import Namespace
from pyspark_durable.wal.metadata import METADATA_FIELDS, metadata_columns
from pyspark_durable.wal.namespace import check_step_arg, check_writer

RowsLike = pa.Table | pa.RecordBatch | Sequence[Mapping[str, Any]]


def _as_table(rows: RowsLike, ns: Namespace, table: int | str) -> pa.Table | pa.RecordBatch:
    """Rows as Arrow; anything else is a typed error naming the table and what was wrong."""
    if isinstance(rows, pa.Table | pa.RecordBatch):
        return rows
    if isinstance(rows, str | bytes | Mapping) or not isinstance(rows, Sequence):
        raise ConfigError(f"rows of table {table!r} must be an Arrow table or batch or a list "
                          f"of mappings, not {type(rows).__name__}", namespace=ns.name)
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise ConfigError(f"row {i} of table {table!r} is a {type(row).__name__}, not a "
                              "mapping of column names to values", namespace=ns.name)
    try:
        return pa.Table.from_pylist(list(rows))
    except (pa.ArrowException, TypeError, ValueError) as exc:
        raise SchemaMismatch(f"rows of table {table!r} do not convert to Arrow: {exc}",
                             namespace=ns.name) from exc


def write_step(ns: Namespace, writer_id: str, writer_step: int,
               data: Mapping[int | str, RowsLike], region_id: int = 0,
               payload_format: str = "arrow", merge_schema: bool = False) -> int:
    """Write rows of one or more tables as one step; idempotent per (writer_id, writer_step).

    ``merge_schema`` lets rows with new columns or wider types add a schema version.

    >>> step = write_step(ns, "loader", 0, {"orders": [{"id": 1, "amount": 9.5}]})
    """
    check_writer(writer_id, writer_step, ns.name)
    if not isinstance(data, Mapping):
        raise ConfigError(f"data must map table names to rows, not {type(data).__name__}",
                          namespace=ns.name, writer=writer_id)
    tables = {table: _as_table(rows, ns, table) for table, rows in data.items()}
    done = ns.committed_step(writer_id, writer_step)
    if done is not None:
        return done
    attempt = ns.begin(writer_id, writer_step)
    for table, rows in tables.items():
        attempt.write(table, rows, region_id, payload_format, merge_schema)
    return attempt.commit()


def read_steps(ns: Namespace, table: int | str, start: int | None = None,
               end: int | None = None, with_metadata: bool = True, *,
               start_timestamp: int | str | None = None,
               end_timestamp: int | str | None = None) -> pa.Table:
    """Rows of one table in steps [start, end) as one Arrow table, in step order.

    With ``with_metadata``, adds ``_region``, ``_table``, ``_sequence``, ``_step`` and
    ``_commit_timestamp`` columns. ``start_timestamp`` (instead of ``start``) starts at
    the first step committed at or after it, ``end_timestamp`` (instead of ``end``)
    ends before the first step committed at or after it: ms since the epoch or ISO-8601
    (see :mod:`pyspark_durable.endpoint.step_times`).
    """
    for by_step, by_time in ((start, start_timestamp), (end, end_timestamp)):
        if by_step is not None and by_time is not None:
            raise ConfigError(f"read_steps was given both a step ({by_step}) and a timestamp "
                              f"({by_time!r}) for one end of the read; give one of them",
                              namespace=ns.name)
    info = ns.table(table)
    available = ns.steps()
    if start_timestamp is not None:
        start = first_step_since(ns, timestamp_ms("start_timestamp", start_timestamp),
                                 "start_timestamp")
    if end_timestamp is not None:
        end = end_step_for(ns, timestamp_ms("end_timestamp", end_timestamp))
    lo = available.start if start is None else check_step_arg("start", start, ns.name)
    hi = available.stop if end is None else check_step_arg("end", end, ns.name)
    committed = f"committed steps are [{available.start}, {available.stop})"
    if lo > available.stop:
        raise StepNotCommitted(f"start step {lo} is not committed yet; {committed}",
                               namespace=ns.name, step=lo)
    if hi > available.stop:
        raise StepNotCommitted(f"end step {hi} is past the committed steps; {committed}",
                               namespace=ns.name, step=hi)
    if lo > hi:
        raise ConfigError(f"start {lo} is after end {hi}: steps [start, end) are read; "
                          f"{committed}", namespace=ns.name)
    if lo < available.start:
        raise StepExpired(f"step {lo} was expired; available steps are "
                          f"[{available.start}, {available.stop})", namespace=ns.name, step=lo)
    parts: list[pa.Table] = []
    for step in range(lo, hi):
        for sb in ns.read_step(step, tables={info.table_id}):
            first_row = 0
            for batch in sb.batches:
                t = pa.Table.from_batches([batch])
                if with_metadata:
                    for field, column in zip(METADATA_FIELDS, metadata_columns(
                            sb, info.name, t.num_rows, first_row), strict=True):
                        t = t.append_column(field, column)
                first_row += t.num_rows
                parts.append(t)
    if not parts:
        schema = info.schema
        if with_metadata:
            for field in METADATA_FIELDS:
                schema = schema.append(field)
        return schema.empty_table()
    return pa.concat_tables(parts)
