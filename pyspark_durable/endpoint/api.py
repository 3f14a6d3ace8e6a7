"""A small Python API for applications that use the WAL without Spark.

Memory follows an entry, not a step: ``write_step`` slices a large table into entries
and consumes an iterator of chunks as it writes, and ``read_batches`` yields a step's
rows entry by entry, so both hold ``entry_max_bytes`` times a small constant (plus the
32 MiB a writer keeps in flight to the log), whatever the size of the step.
``read_steps`` builds one table, so it holds what it returns.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa

from pyspark_durable.endpoint.step_times import end_step_for, first_step_since
from pyspark_durable.errors import ConfigError, SchemaMismatch, StepExpired, StepNotCommitted
from pyspark_durable.times import timestamp_ms
from pyspark_durable.wal import Namespace, TableInfo
from pyspark_durable.wal.arguments import check_step_arg, check_writer
from pyspark_durable.wal.metadata import METADATA_FIELDS, metadata_columns

Chunk = pa.Table | pa.RecordBatch | Sequence[Mapping[str, Any]]
RowsLike = Chunk | pa.RecordBatchReader | Iterable[Chunk]


def _rows_table(rows: Sequence[Any], ns: Namespace, table: int | str,
                where: str = "") -> pa.Table:
    """A list of mappings as Arrow; anything else is a typed error naming the table."""
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise ConfigError(f"row {i} of table {table!r}{where} is a {type(row).__name__}, "
                              "not a mapping of column names to values", namespace=ns.name)
    try:
        return pa.Table.from_pylist(list(rows))
    except (pa.ArrowException, TypeError, ValueError) as exc:
        raise SchemaMismatch(f"rows of table {table!r}{where} do not convert to Arrow: {exc}",
                             namespace=ns.name) from exc


def _arrow_chunk(chunk: Any, i: int, ns: Namespace,
                 table: int | str) -> pa.Table | pa.RecordBatch:
    if isinstance(chunk, pa.Table | pa.RecordBatch):
        return chunk
    if isinstance(chunk, Sequence) and not isinstance(chunk, str | bytes):
        return _rows_table(chunk, ns, table, f" (chunk {i})")
    raise ConfigError(f"chunk {i} of table {table!r} is a {type(chunk).__name__}; an "
                      "iterator of rows yields Arrow tables or batches or lists of mappings",
                      namespace=ns.name)


def _lazy_chunks(rows: Iterable[Any], ns: Namespace,
                 table: int | str) -> Iterator[pa.Table | pa.RecordBatch]:
    """The chunks of an iterator as Arrow, converted one at a time as the write asks."""
    for i, chunk in enumerate(rows):
        yield _arrow_chunk(chunk, i, ns, table)
        del chunk  # not held while the iterator makes the next one


def _as_chunks(rows: RowsLike, ns: Namespace,
               table: int | str) -> Iterable[pa.Table | pa.RecordBatch]:
    """Rows as Arrow chunks. What is in memory already (a table, a batch, a list) is
    checked now, before anything is written; an iterator is read chunk by chunk while
    writing, so a step larger than memory is never held whole."""
    if isinstance(rows, pa.Table | pa.RecordBatch):
        return (rows,)
    if isinstance(rows, str | bytes | Mapping) or not isinstance(rows, Iterable):
        raise ConfigError(f"rows of table {table!r} must be an Arrow table or batch, a list "
                          "of mappings, or an iterator of those (or a RecordBatchReader), "
                          f"not {type(rows).__name__}", namespace=ns.name)
    if not isinstance(rows, Sequence):
        return _lazy_chunks(rows, ns, table)
    if rows and all(isinstance(r, pa.Table | pa.RecordBatch) for r in rows):
        return rows  # a list of Arrow chunks
    return (_rows_table(rows, ns, table),)


def write_step(ns: Namespace, writer_id: str, writer_step: int,
               data: Mapping[int | str, RowsLike], region_id: int = 0,
               payload_format: str = "arrow", merge_schema: bool = False) -> int:
    """Write rows of one or more tables as one step; idempotent per (writer_id, writer_step).

    A table's rows are an Arrow table or batch, a list of mappings, a list of Arrow
    tables or batches, or an iterator (a generator, a ``pa.RecordBatchReader``) of
    tables, batches or lists of mappings. An iterator is consumed chunk by chunk as
    entries are written, so a step larger than memory can be written; it is not
    consumed at all when the step committed already, and one that fails midway leaves
    an uncommitted attempt, whose rows are never visible. ``merge_schema`` lets rows
    with new columns or wider types add a schema version.

    >>> step = write_step(ns, "loader", 0, {"orders": [{"id": 1, "amount": 9.5}]})
    >>> step = write_step(ns, "loader", 1, {"orders": iter(reader)})  # batch by batch
    """
    check_writer(writer_id, writer_step, ns.name)
    if not isinstance(data, Mapping):
        raise ConfigError(f"data must map table names to rows, not {type(data).__name__}",
                          namespace=ns.name, writer=writer_id)
    tables = {table: _as_chunks(rows, ns, table) for table, rows in data.items()}
    done = ns.committed_step(writer_id, writer_step)
    if done is not None:
        return done
    attempt = ns.begin(writer_id, writer_step)
    # the tables whose rows are in memory defined at once: one commits record for the new ones
    ns.tables.define_many([(table, first.schema) for table, chunks in tables.items()
                      if isinstance(chunks, Sequence)
                      for first in [next((c for c in chunks if c.num_rows), None)]
                      if first is not None],
                     payload_format, merge_schema)
    for table, chunks in tables.items():
        attempt.write_batches(table, chunks, region_id, payload_format, merge_schema)
    return attempt.commit()


def _read_range(ns: Namespace, table: int | str, start: int | None, end: int | None,
                start_timestamp: int | str | None,
                end_timestamp: int | str | None) -> tuple[TableInfo, range]:
    """The table and the steps [lo, hi) a read asks for, checked against the committed ones."""
    for by_step, by_time in ((start, start_timestamp), (end, end_timestamp)):
        if by_step is not None and by_time is not None:
            raise ConfigError(f"read_steps was given both a step ({by_step}) and a timestamp "
                              f"({by_time!r}) for one end of the read; give one of them",
                              namespace=ns.name)
    info = ns.tables.lookup(table)
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
    return info, range(lo, hi)


def _batches(ns: Namespace, info: TableInfo, steps: range, with_metadata: bool,
             schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """The rows of ``steps``, one batch per decoded batch of an entry, in step order."""
    for step in steps:
        for sb in ns.read_step(step, tables={info.table_id}):
            first_row = 0
            for batch in sb.batches:
                if not batch.schema.equals(info.schema):
                    raise SchemaMismatch(
                        f"table {info.name!r} gained a schema version while it was read "
                        f"(step {step} reads as a newer version than the read started "
                        "with); read again", namespace=ns.name, table=info.name)
                columns = batch.columns
                if with_metadata:
                    columns += metadata_columns(sb, info.name, batch.num_rows, first_row)
                first_row += batch.num_rows
                yield pa.RecordBatch.from_arrays(columns, schema=schema)


def read_batches(ns: Namespace, table: int | str, start: int | None = None,
                 end: int | None = None, with_metadata: bool = True, *,
                 start_timestamp: int | str | None = None,
                 end_timestamp: int | str | None = None) -> pa.RecordBatchReader:
    """Rows of one table in steps [start, end), streamed batch by batch, in step order.

    The streaming form of :func:`read_steps` (same arguments, same rows and columns,
    same errors for the arguments, raised by this call): entries are read and decoded
    one at a time as the reader is iterated, so a step larger than memory can be read.
    The ``pa.RecordBatchReader`` knows its schema before the first batch, and can be
    handed to anything that takes one (``read_all()`` is ``read_steps``).

    >>> for batch in read_batches(ns, "orders", start=10):
    ...     handle(batch)  # and drop it: only the entry being read is held
    """
    info, steps = _read_range(ns, table, start, end, start_timestamp, end_timestamp)
    schema = info.schema
    if with_metadata:
        for field in METADATA_FIELDS:
            schema = schema.append(field)
    return pa.RecordBatchReader.from_batches(
        schema, _batches(ns, info, steps, with_metadata, schema))


def read_steps(ns: Namespace, table: int | str, start: int | None = None,
               end: int | None = None, with_metadata: bool = True, *,
               start_timestamp: int | str | None = None,
               end_timestamp: int | str | None = None) -> pa.Table:
    """Rows of one table in steps [start, end) as one Arrow table, in step order.

    With ``with_metadata``, adds ``_region``, ``_table``, ``_sequence``, ``_step`` and
    ``_commit_timestamp`` columns. ``start_timestamp`` (instead of ``start``) starts at
    the first step committed at or after it, ``end_timestamp`` (instead of ``end``)
    ends before the first step committed at or after it: ms since the epoch or ISO-8601
    (see :mod:`pyspark_durable.endpoint.step_times`). The whole result is in memory:
    :func:`read_batches` streams the same rows.
    """
    return read_batches(ns, table, start, end, with_metadata, start_timestamp=start_timestamp,
                        end_timestamp=end_timestamp).read_all()
