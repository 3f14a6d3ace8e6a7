"""The ``durablewal`` sink: one Spark micro-batch = one WAL step, exactly once.

Each task attempt writes its rows as entries of its own WAL attempt (durable,
invisible) and returns the attempt's receipt as its commit message. The driver's
``commit(messages, batchId)`` commits all receipts as the step
``(writer_id = query id, writer_step = batchId)``. A failed or speculative task
attempt's rows are in no receipt Spark hands to ``commit``, so they are never
visible; a batch replayed after a driver crash commits the same pair again, which
the WAL turns into a no-op.
"""

from __future__ import annotations

import itertools
import logging
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from pyspark_durable.codec.casts import cast
from pyspark_durable.codec.keys import U64_MAX
from pyspark_durable.errors import ConfigError, DurableWalError, RoutingError
from pyspark_durable.spark.arrow_types import check_readable, read_schema
from pyspark_durable.spark.options import WalOptions
from pyspark_durable.spark.session_cache import namespace_for
from pyspark_durable.wal import AttemptReceipt, Cleaner, RetentionPolicy
from pyspark_durable.wal.ledger import JUST_CAUGHT_UP_S
from pyspark_durable.wal.metadata import METADATA_NAMES
from pyspark_durable.wal.replay.clocks import clean_due

log = logging.getLogger(__name__)


@dataclass
class WalCommitMessage(WriterCommitMessage):
    """What one task attempt wrote: its WAL attempt receipt."""

    receipt: AttemptReceipt


def _task_identity() -> tuple[str | None, int | None, str]:
    """(query id, batch id, attempt id) of the running Spark task."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return None, None, uuid.uuid4().hex
    query_id = ctx.getLocalProperty("sql.streaming.queryId")
    batch = ctx.getLocalProperty("streaming.sql.batchId")
    attempt = f"p{ctx.partitionId()}-a{ctx.attemptNumber()}-t{ctx.taskAttemptId()}-" \
              f"{uuid.uuid4().hex[:8]}"
    return query_id, None if batch is None else int(batch), attempt


def _stored(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` as the writer's stored schema (``arrow_types.arrow_schema``): Spark's
    batches lack its collations and other metadata, and carry the session's zone."""
    return cast(batch, schema)


def _route_values(batch: pa.RecordBatch, column: str, kind: str) -> pa.Array:
    if column not in batch.schema.names:
        raise ConfigError(f"{kind}Column {column!r} is not a column; columns: "
                          f"{', '.join(batch.schema.names)}")
    values = batch.column(column)
    if values.null_count:
        raise RoutingError(f"{kind}Column {column!r} holds a null value; every row needs a "
                           f"{kind}", column=column)
    return values


def check_event_time_column(schema: pa.Schema, column: str) -> None:
    """``eventTimeColumn`` names a timestamp or date column (refused on the driver,
    before any task writes)."""
    if column not in schema.names:
        raise ConfigError(f"eventTimeColumn {column!r} is not a column; columns: "
                          f"{', '.join(schema.names)}")
    kind = schema.field(column).type
    if not (pa.types.is_timestamp(kind) or pa.types.is_date(kind)):
        raise ConfigError(f"eventTimeColumn {column!r} has type {kind}; it must be a timestamp "
                          "or a date", column=column)


def event_time_of(batch: pa.RecordBatch, column: str) -> tuple[int, int] | None:
    """(min, max) of the batch's event-time column in µs since the epoch (nulls ignored;
    None when every value is null). A timestamp without a zone counts as UTC."""
    values = batch.column(column)
    if pa.types.is_date(values.type):
        values = values.cast(pa.timestamp("s")).cast(pa.timestamp("us"))
    elif values.type.unit != "us":
        values = values.cast(pa.timestamp("us", values.type.tz))
    span = pc.min_max(values.cast(pa.int64()))
    low, high = span["min"].as_py(), span["max"].as_py()
    return None if low is None else (low, high)


def write_batches(opts: WalOptions, batches: Iterator[pa.RecordBatch], writer_id: str,
                  writer_step: int, attempt_id: str, schema: pa.Schema) -> AttemptReceipt:
    """Route rows by region/table and append them as one WAL attempt; ``schema`` is the
    Arrow form of the writer's Spark schema (``arrow_types.arrow_schema``)."""
    ns = namespace_for(opts)
    attempt = ns.begin(writer_id, writer_step, attempt_id)
    drop = [c for c in (opts.region_column, opts.table_column) if c]
    readers = read_schema(schema)  # what a reader's rows look like: values must fit it
    for batch in batches:
        if batch.num_rows == 0:
            continue
        batch = _stored(batch, schema)
        check_readable(batch, readers, namespace=opts.namespace,
                       table=None if opts.table_column else opts.table)
        if opts.event_time_column:
            span = event_time_of(batch, opts.event_time_column)
            if span is not None:
                attempt.note_event_time(*span)
        reserved = [c for c in batch.schema.names if c in METADATA_NAMES and c not in drop]
        if reserved:  # the source's metadata columns are regenerated on read, never stored
            batch = batch.drop_columns(reserved)
        regions = tables = None
        if opts.region_column:
            regions = _route_values(batch, opts.region_column, "region")
            if not pa.types.is_integer(regions.type):
                raise RoutingError(f"regionColumn {opts.region_column!r} has type "
                                   f"{regions.type}, expected an integer type",
                                   column=opts.region_column)
            low, high = pc.min(regions).as_py(), pc.max(regions).as_py()
            if low < 0 or high > U64_MAX:
                bad = low if low < 0 else high
                raise RoutingError(f"regionColumn {opts.region_column!r} holds {bad}; regions "
                                   "are integers in [0, 2**64)", column=opts.region_column,
                                   value=bad)
        if opts.table_column:
            tables = _route_values(batch, opts.table_column, "table")
            if pa.types.is_integer(tables.type):  # integers are table ids, strings names
                if pc.min(tables).as_py() < 0:
                    raise RoutingError(f"tableColumn {opts.table_column!r} holds "
                                       f"{pc.min(tables).as_py()}; table ids are integers in "
                                       "[0, 2**64)", column=opts.table_column)
                tables = tables.cast(pa.uint64())
            else:  # a name, never a number read as an id
                tables = tables.cast(pa.string())
        payload = batch.drop_columns(drop) if drop else batch
        if regions is None and tables is None:
            attempt.write(opts.table, payload, opts.region, opts.payload_format,
                          opts.merge_schema)
            continue
        keys = pa.table({"r": regions if regions is not None else
                         pa.array([opts.region] * batch.num_rows, pa.int64()),
                         "t": tables if tables is not None else
                         pa.array([opts.table] * batch.num_rows, pa.string())})
        groups = list(route(keys, payload))  # slices of one sorted copy: no more memory
        # the batch's new tables defined in one commits record, not one fsync'd append each
        ns.tables.define_many([(table, rows.schema) for _, table, rows in groups],
                         opts.payload_format, opts.merge_schema)
        for region, table, rows in groups:
            attempt.write(table, rows, region, opts.payload_format, opts.merge_schema)
    return attempt.receipt()


def route(keys: pa.Table, payload: pa.RecordBatch
          ) -> Iterator[tuple[int, str | int, pa.RecordBatch]]:
    """The rows of each (region ``r``, table ``t``) of ``keys``, in one pass: one stable
    sort and one take, then a slice per group (rows keep their order within a group).
    A batch of one group is handed on as it is."""
    r, t = keys.column("r"), keys.column("t")
    change = pc.or_(pc.not_equal(r[1:], r[:-1]), pc.not_equal(t[1:], t[:-1]))
    if not pc.any(change).as_py():  # one group, in order already (or one row)
        yield int(r[0].as_py()), t[0].as_py(), payload
        return
    order = pc.sort_indices(keys, sort_keys=[("r", "ascending"), ("t", "ascending")])
    keys, payload = keys.take(order), payload.take(order)
    r, t = keys.column("r"), keys.column("t")
    change = pc.or_(pc.not_equal(r[1:], r[:-1]), pc.not_equal(t[1:], t[:-1]))
    starts = [0, *(i + 1 for i in pc.indices_nonzero(change).to_pylist()), len(keys)]
    for start, end in itertools.pairwise(starts):
        yield int(r[start].as_py()), t[start].as_py(), payload.slice(start, end - start)


def commit_receipts(opts: WalOptions, messages: list, writer_id: str | None,
                    writer_step: int, consecutive: bool,
                    started_ms: int | None = None) -> int | None:
    """Commit a job's receipts as one step; a streaming writer's batches are consecutive,
    a batch write's writer is one-off (``started_ms``: when the job began)."""
    receipts = [m.receipt for m in messages if isinstance(m, WalCommitMessage)]
    if writer_id is None:
        writer_id = next((r.writer_id for r in receipts), None)
    if writer_id is None:
        return None  # no task ran: nothing to commit, no writer to note
    ns = namespace_for(opts)
    if not any(r.entries for r in receipts):
        if consecutive:  # no step, but the WAL remembers the batch for the next one's check
            ns.note_writer_step(writer_id, writer_step)
        return None
    if started_ms is not None:  # a driver whose clock is behind the WAL's starts at the
        # WAL's clock: a start the WAL can judge (ns.commit keeps it for its own retries)
        started_ms = ns.info.one_off_start_ms(started_ms)
    step = ns.commit(writer_id, writer_step, receipts, consecutive=consecutive,
                     started_ms=started_ms)
    log.info("namespace=%s writer=%s writer_step=%d committed as step %d (%d rows)",
             opts.namespace, writer_id, writer_step, step, sum(r.rows for r in receipts))
    return step


def keep_retention(opts: WalOptions) -> None:
    """The driver's retention duties after a commit: the policy, and a due cleaner pass.

    The time of the last pass is the newest ``clean`` record's, kept in the
    namespace, so every driver writing to it (each commit may run in a fresh Python
    process) shares one schedule. A failed pass does not undo the committed step: it
    is logged with its typed error and tried again at the next commit.
    """
    # the commit just caught the handle up: a pass due an instant ago is still due, and
    # two drivers' passes at once are safe
    ns = namespace_for(opts, within_s=JUST_CAUGHT_UP_S)
    if opts.retention_ms is not None or opts.retention_steps is not None:
        ns.set_retention(RetentionPolicy(opts.retention_ms, opts.retention_steps))
    if not opts.auto_clean:
        return
    # a last pass more than an interval in the future (a host
    # ahead wrote it) is ignored, so one pass from that host stops nobody's cleaning
    if not clean_due(time.time() * 1000, ns.info.last_clean_ms(), opts.clean_interval_ms):
        return
    try:
        report = Cleaner(ns, grace_ms=opts.clean_grace_ms).run_once()
    except DurableWalError as exc:
        log.warning("namespace=%s: the driver's cleaner pass failed, retried at the next "
                    "commit: %s", opts.namespace, exc)
        return
    log.info("namespace=%s: driver's cleaner pass freed %d entries; first retained step %d",
             opts.namespace, report.freed_entries, report.first_retained_step)


class WalStreamWriter(DataSourceStreamArrowWriter):
    """Streaming sink; Arrow batches in, one step per micro-batch."""

    def __init__(self, opts: WalOptions, schema: pa.Schema) -> None:
        self.opts = opts
        self.schema = schema

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WalCommitMessage:
        query_id, batch_id, attempt_id = _task_identity()
        if query_id is None or batch_id is None:
            raise ConfigError("the streaming sink runs without a query id or batch id")
        return WalCommitMessage(write_batches(self.opts, iterator, f"query-{query_id}",
                                              batch_id, attempt_id, self.schema))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        commit_receipts(self.opts, messages, None, batchId, consecutive=True)
        keep_retention(self.opts)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """One line, never an error: Spark aborts a batch when ``q.stop()`` kills its tasks
        (an expected end) or when a task failed (Spark reports that failure itself), and
        the attempts' entries need nothing done: no step refers to them."""
        written = sum(1 for m in messages if isinstance(m, WalCommitMessage))
        log.warning("namespace=%s: micro-batch %d aborted (query stopped, or a task failed: "
                    "Spark's log says which); its rows stay invisible (%d of %d tasks had "
                    "written)", self.opts.namespace, batchId, written, len(messages))


class WalBatchWriter(DataSourceArrowWriter):
    """Batch ``df.write``: one job = one step, under a writer id made for the job."""

    def __init__(self, opts: WalOptions, schema: pa.Schema) -> None:
        self.opts = opts
        self.schema = schema
        self.writer_id = f"batch-{uuid.uuid4().hex}"
        # one-off: the WAL forgets this writer after its dedup window (wal/replay/dedup.py)
        self.started_ms = int(time.time() * 1000)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WalCommitMessage:
        _, _, attempt_id = _task_identity()
        return WalCommitMessage(write_batches(self.opts, iterator, self.writer_id, 0,
                                              attempt_id, self.schema))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        commit_receipts(self.opts, messages, self.writer_id, 0, consecutive=False,
                        started_ms=self.started_ms)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log.warning("namespace=%s: batch write %s aborted; its rows stay invisible",
                    self.opts.namespace, self.writer_id)
