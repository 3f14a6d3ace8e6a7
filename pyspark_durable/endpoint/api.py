"""A small Python API for applications that use the WAL without Spark."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from pyspark_durable.wal import Namespace

RowsLike = pa.Table | pa.RecordBatch | Sequence[Mapping[str, Any]]
METADATA_COLUMNS = ("_region", "_table", "_sequence", "_step", "_commit_timestamp")


def _as_table(rows: RowsLike) -> pa.Table | pa.RecordBatch:
    if isinstance(rows, pa.Table | pa.RecordBatch):
        return rows
    return pa.Table.from_pylist(list(rows))


def write_step(ns: Namespace, writer_id: str, writer_step: int,
               data: Mapping[int | str, RowsLike], region_id: int = 0,
               payload_format: str = "arrow") -> int:
    """Write rows of one or more tables as one step; idempotent per (writer_id, writer_step).

    >>> step = write_step(ns, "loader", 0, {"orders": [{"id": 1, "amount": 9.5}]})
    """
    done = ns.committed_step(writer_id, writer_step)
    if done is not None:
        return done
    attempt = ns.begin(writer_id, writer_step)
    for table, rows in data.items():
        attempt.write(table, _as_table(rows), region_id, payload_format)
    return attempt.commit()


def read_steps(ns: Namespace, table: int | str, start: int | None = None,
               end: int | None = None, with_metadata: bool = True) -> pa.Table:
    """Rows of one table in steps [start, end) as one Arrow table, in step order.

    With ``with_metadata``, adds ``_region``, ``_table``, ``_sequence``, ``_step`` and
    ``_commit_timestamp`` columns.
    """
    info = ns.table(table)
    available = ns.steps()
    lo = available.start if start is None else start
    hi = available.stop if end is None else end
    parts: list[pa.Table] = []
    for step in range(lo, hi):
        for sb in ns.read_step(step, tables={info.table_id}):
            for batch in sb.batches:
                t = pa.Table.from_batches([batch])
                if with_metadata:
                    n = t.num_rows
                    t = t.append_column("_region", pa.array([sb.region_id] * n, pa.int64()))
                    t = t.append_column("_table", pa.array([info.name] * n, pa.string()))
                    t = t.append_column("_sequence", pa.array([sb.sequence_num] * n, pa.int64()))
                    t = t.append_column("_step", pa.array([sb.step] * n, pa.int64()))
                    t = t.append_column("_commit_timestamp", pa.array(
                        [sb.commit_timestamp_ms * 1000] * n, pa.timestamp("us", tz="UTC")))
                parts.append(t)
    if not parts:
        schema = info.schema
        if with_metadata:
            for name, typ in zip(METADATA_COLUMNS, (pa.int64(), pa.string(), pa.int64(),
                                                    pa.int64(), pa.timestamp("us", tz="UTC")), strict=False):
                schema = schema.append(pa.field(name, typ))
        return schema.empty_table()
    return pa.concat_tables(parts)
