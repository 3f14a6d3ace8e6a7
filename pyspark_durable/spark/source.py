"""The ``durablewal`` source: stream and batch readers over committed steps.

Offsets are ``{"step": N}``: the next step to read. Spark keeps them in the
checkpoint's offsets log, so a restarted query resumes at the first step it had not
finished, with no loss and no duplicate (a step is read whole or not at all).
Partitions are (region, steps) pairs; ``read`` yields ``pyarrow.RecordBatch``es of
the table's columns plus the metadata columns of :mod:`pyspark_durable.wal.metadata`.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    DataSourceStreamReader,
    Filter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from pyspark_durable.endpoint.step_times import (
    end_step_for,
    first_step_reaching,
    first_step_since,
)
from pyspark_durable.errors import (
    ConfigError,
    CorruptOffset,
    IncarnationMismatch,
    StepExpired,
    StepNotCommitted,
)
from pyspark_durable.spark.arrow_types import readable
from pyspark_durable.spark.options import WalOptions
from pyspark_durable.spark.partitions import SPLIT_MIN_ROWS, WalPartition, split_region
from pyspark_durable.spark.pushdown import Pruning, push
from pyspark_durable.spark.session_cache import namespace_for
from pyspark_durable.times import iso
from pyspark_durable.wal import Namespace, StepCommit
from pyspark_durable.wal.format.records import Run
from pyspark_durable.wal.metadata import METADATA_NAMES, metadata_columns
from pyspark_durable.wal.replay.stored_state import ReaderPosition

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class ReadPlan:
    """What to read and how it looks, fixed on the driver, shipped to executors."""

    opts: WalOptions
    table_ids: frozenset[int] | None
    regions: frozenset[int] | None
    arrow_schema: pa.Schema  # of the rows handed to Spark
    with_metadata: bool

    def rows_of(self, commit: StepCommit) -> tuple[int, int]:
        rows = size = 0
        for run in commit.runs:
            if self.selects(run.region_id, run.table_id):
                rows += run.rows
                size += run.size_bytes
        return rows, size

    def selects(self, region_id: int, table_id: int) -> bool:
        return (self.table_ids is None or table_id in self.table_ids) and (
            self.regions is None or region_id in self.regions)

    def partitions(self, ns: Namespace, start: int, end: int,
                   pruning: Pruning | None = None) -> list[WalPartition]:
        """Tasks for steps ``[start, end)``: per region, whole steps up to a target size
        (:meth:`target_rows`), and a step above it split into windows of its entries. A
        step recorded lost is planned, so that its task fails naming it, unless
        ``failOnDataLoss=false``: then it is skipped with a warning, as an expired one."""
        per_region: dict[int, list[tuple[int, list[Run]]]] = {}
        total = 0
        lost = {} if self.opts.fail_on_data_loss else ns.info.lost_steps()
        for step in range(start, end):
            if step in lost:
                log.warning("namespace=%s step=%d: skipped, recorded lost by durablewal repair "
                            "(failOnDataLoss=false): %s", ns.name, step, lost[step])
                continue
            commit = ns.step_commit(step)
            if pruning and not pruning.admits_step(step, commit.timestamp_ms):
                continue
            for region_id in commit.regions:
                if self.regions is not None and region_id not in self.regions:
                    continue
                runs = [r for r in commit.runs
                        if r.region_id == region_id and self.selects(r.region_id, r.table_id)]
                if pruning and not runs:  # pushed filters left nothing here to read
                    continue
                per_region.setdefault(region_id, []).append((step, runs))
                total += sum(r.rows for r in runs)
        target = self.target_rows(total)
        return [p for region_id in sorted(per_region)
                for p in split_region(region_id, per_region[region_id], target)]

    def target_rows(self, total: int) -> int:
        """Rows per task: ``maxRowsPerPartition`` at most, and few enough tasks for
        ``minPartitions`` (by default the driver's cores, and then a split piece keeps at
        least ``SPLIT_MIN_ROWS``: a small read is not worth a task per core)."""
        most = self.opts.max_rows_per_partition
        if self.opts.min_partitions is not None:
            return max(1, min(most, -(-total // self.opts.min_partitions)))
        return max(1, min(most, max(SPLIT_MIN_ROWS, -(-total // (os.cpu_count() or 1)))))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, WalPartition):
            return  # Spark plans one placeholder partition when there is nothing to read
        ns = namespace_for(self.opts, create=False)
        names = {}
        payload = pa.schema([f for f in self.arrow_schema
                             if f.name not in METADATA_NAMES])
        meta = self.arrow_schema.names[len(payload):] if self.with_metadata else []
        tables = None if self.table_ids is None else set(self.table_ids)
        for sb in ns.read_region_steps(partition.region_id, partition.steps, tables,
                                       partition.windows):
            name = names.get(sb.table_id) or names.setdefault(
                sb.table_id, ns.tables.lookup(sb.table_id).name)
            first_row = 0
            for batch in sb.batches:
                n = batch.num_rows
                if n == 0:
                    continue
                # by name: a table without a column of the union reads it as null
                cols = []
                for f in payload:
                    i = batch.schema.get_field_index(f.name)
                    cols.append(batch.column(i) if i >= 0 else pa.nulls(n, f.type))
                out = readable(pa.RecordBatch.from_arrays(cols, names=payload.names), payload,
                               namespace=ns.name, region=partition.region_id, table=name,
                               step=sb.step)
                if meta:  # those of the read schema, in its order, already in their types
                    out = pa.RecordBatch.from_arrays(
                        [*out.columns, *metadata_columns(sb, name, n, first_row, meta)],
                        schema=self.arrow_schema)
                first_row += n
                yield out


# The functions below read ``ns`` as of its last refresh: their callers got it from
# namespace_for, which catches up with the WAL (one catch-up per planning call).


def first_step(ns: Namespace, opts: WalOptions, stream: bool = False) -> int:
    """The step ``startingStep`` (or ``startingTimestamp``) names; past the end: typed error."""
    if opts.starting_timestamp_ms is not None:
        return first_step_since(ns, opts.starting_timestamp_ms, "option startingTimestamp",
                                stream=stream)
    if opts.starting_event_time_ms is not None:
        return first_step_reaching(ns, opts.starting_event_time_ms * 1000,
                                   "option startingEventTime", stream=stream)
    steps = ns.steps(refresh=False)
    if opts.starting_step == "earliest":
        return steps.start
    if opts.starting_step == "latest":
        return steps.stop
    step = int(opts.starting_step)
    if step > steps.stop:
        raise StepNotCommitted(
            f"option startingStep={step} is past the committed steps [{steps.start}, "
            f"{steps.stop}): a read starts at most at the next step, {steps.stop} "
            "(startingStep=latest)", namespace=ns.name, step=step)
    return step


def offset(ns: Namespace, step: int) -> dict:
    """A source offset: the next step, in one namespace and incarnation of the WAL."""
    return {"step": step, "incarnation": ns.info.incarnation, "namespace": ns.name}


def offset_step(ns: Namespace, found: object, what: str = "the checkpoint's offset") -> int:
    """The step of an offset this source wrote; anything else is :class:`CorruptOffset`.

    A checkpoint is only ever written by this source, so a negative, non-integer or
    foreign offset is damage, not data loss: no ``failOnDataLoss`` setting may guess a
    position for it (a guess re-delivers or skips what the checkpoint says).
    """
    steps = ns.steps(refresh=False)
    where = f"the WAL has steps [{steps.start}, {steps.stop})"
    if not isinstance(found, dict):
        raise CorruptOffset(f"{what} {found!r} is not an object {{\"step\": N, ...}} "
                            f"written by this source; {where}", namespace=ns.name)
    step = found.get("step")
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise CorruptOffset(f"{what} {found!r} names step {step!r}, not a step number >= 0: "
                            f"the checkpoint is damaged; {where}", namespace=ns.name)
    other = found.get("namespace", ns.name)
    if other != ns.name:
        raise CorruptOffset(f"{what} (step {step}) is of namespace {other!r}, not of "
                            f"{ns.name!r}: the checkpoint belongs to another query; start this "
                            f"one from a new checkpoint; {where}", namespace=ns.name)
    incarnation = found.get("incarnation")
    if incarnation is not None and not isinstance(incarnation, str):
        raise CorruptOffset(f"{what} {found!r} names incarnation {incarnation!r}, not an id: "
                            f"the checkpoint is damaged; {where}", namespace=ns.name)
    return step


def resume_step(ns: Namespace, opts: WalOptions, start: object) -> int:
    """Where a checkpointed offset resumes in the WAL as it is now.

    A damaged offset is :class:`CorruptOffset` whatever ``failOnDataLoss`` says. An
    offset of another incarnation (the WAL was lost or recreated under the
    checkpoint) or past the WAL's end (restored from an older copy) is data loss:
    an error naming both, or with ``failOnDataLoss=false`` a warning, then reading
    goes on from the WAL's first step (another incarnation) or its end (past it).
    """
    step = offset_step(ns, start)
    steps = ns.steps(refresh=False)
    known = start.get("incarnation")  # type: ignore[union-attr]  # a dict: offset_step
    problem, resume = None, step
    if known is not None and known != ns.info.incarnation:
        problem = (f"the checkpoint's offset (step {step}) is in WAL incarnation {known}, but "
                   f"the WAL now is incarnation {ns.info.incarnation} with steps "
                   f"[{steps.start}, {steps.stop}): it was lost or recreated")
        resume = steps.start
    elif step > steps.stop:
        problem = (f"the checkpoint's offset is step {step}, past the WAL's last step "
                   f"{steps.stop - 1} (steps [{steps.start}, {steps.stop}) in incarnation "
                   f"{ns.info.incarnation}): the WAL went back (restored from an older copy?)")
        resume = steps.stop
    if problem is None:
        return check_available(ns, opts, step)
    if opts.fail_on_data_loss:
        raise IncarnationMismatch(problem + "; set failOnDataLoss=false to go on reading "
                                  "the WAL as it is now", namespace=ns.name)
    log.warning("namespace=%s: %s; reading on from step %d (failOnDataLoss=false)",
                ns.name, problem, resume)
    return check_available(ns, opts, resume)


def check_available(ns: Namespace, opts: WalOptions, start: int) -> int:
    """Where reading really starts: ``start``, or an error/skip if it was expired."""
    steps = ns.steps(refresh=False)
    if start >= steps.start:
        return start
    if opts.fail_on_data_loss:
        raise StepExpired(
            f"step {start} was expired; available steps are [{steps.start}, {steps.stop}). "
            "Set failOnDataLoss=false to skip to the first available step",
            namespace=ns.name, step=start)
    log.warning("namespace=%s: steps [%d, %d) were expired and are skipped "
                "(failOnDataLoss=false)", ns.name, start, steps.start)
    return steps.start


class WalStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader with admission control and Trigger.AvailableNow."""

    def __init__(self, plan: ReadPlan) -> None:
        self.plan = plan
        self.opts = plan.opts
        self._target: int | None = None
        # minRowsPerTrigger waits at most maxTriggerDelay from here: the last batch
        # admitted, or the first offset request of this run (monotonic seconds)
        self._waiting_since: float | None = None

    def initialOffset(self) -> dict:
        ns = namespace_for(self.opts, create=False)
        return offset(ns, self._record(ns, first_step(ns, self.opts, stream=True)))

    def _record(self, ns: Namespace, step: int) -> int:
        """With ``readerId``: record that this reader needs steps from ``step`` on.

        Spark hands a batch's ``start`` only once the batch before it is done, and asks
        for it on every trigger, with or without new data; :meth:`commit` comes only
        when Spark plans a batch with data, so recording there alone would leave the
        last batch of a run unrecorded (an ``availableNow`` query that read everything
        would never register, an idle one would stay a batch behind). With
        ``holdRetention`` the record also keeps ``step`` from expiring. A cleaner may
        expire ``step`` just before the record lands: the caller checks again. Nothing
        is appended while the position stands (an idle query asks every few ms).
        """
        reader = self.opts.reader_id
        wanted = ReaderPosition(step, self.opts.hold_retention)
        if (reader is not None and ns.info.reader_position(reader) != wanted
                and step <= ns.steps(refresh=False).stop):
            ns.commit_reader(reader, step, hold=self.opts.hold_retention)  # refreshes after
        return step

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = namespace_for(self.opts, create=False).steps(refresh=False).stop

    def getDefaultReadLimit(self) -> ReadLimit:
        o = self.opts
        if o.max_rows_per_trigger is not None:
            return ReadMaxRows(o.max_rows_per_trigger)
        if o.max_bytes_per_trigger is not None:
            return ReadMaxBytes(o.max_bytes_per_trigger)
        if o.min_rows_per_trigger is not None:
            return ReadMinRows(o.min_rows_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        ns = namespace_for(self.opts, create=False)
        # hold where this batch begins, then check again: a cleaner may have expired it
        begin = check_available(ns, self.opts, self._record(ns, resume_step(ns, self.opts, start)))
        end = ns.steps(refresh=False).stop
        if self._target is not None:
            end = min(end, max(self._target, begin))
        if self.opts.max_steps_per_trigger is not None:
            end = min(end, begin + self.opts.max_steps_per_trigger)
        if isinstance(limit, ReadMaxRows | ReadMaxBytes):
            budget = limit.max_rows if isinstance(limit, ReadMaxRows) else limit.max_bytes
            used = 0
            for step in range(begin, end):
                rows, size = self.plan.rows_of(ns.step_commit(step))
                used += rows if isinstance(limit, ReadMaxRows) else size
                if used > budget and step > begin:
                    end = step
                    break
        elif isinstance(limit, ReadMinRows) and self._target is None:
            now = time.monotonic()
            if self._waiting_since is None:
                self._waiting_since = now
            rows = sum(self.plan.rows_of(ns.step_commit(s))[0] for s in range(begin, end))
            waited_ms = (now - self._waiting_since) * 1000
            if rows < limit.min_rows and (end == begin or
                                          waited_ms < self.opts.max_trigger_delay_ms):
                return offset(ns, begin)
            self._waiting_since = now  # a batch runs: the next one may wait as long again
        return offset(ns, end)

    def reportLatestOffset(self) -> dict:
        ns = namespace_for(self.opts, create=False)
        return offset(ns, ns.steps(refresh=False).stop)

    def partitions(self, start: dict, end: dict) -> list[WalPartition]:
        ns = namespace_for(self.opts, create=False)
        begin = resume_step(ns, self.opts, start)
        stop = offset_step(ns, end, "the batch's end offset")
        if end.get("incarnation", ns.info.incarnation) != ns.info.incarnation:
            # a batch planned in a WAL that is gone (failOnDataLoss=false got here): it
            # reads nothing, and the next batch starts at the new WAL's first step
            return []
        return self.plan.partitions(ns, begin, max(begin, stop))

    def read(self, partition: WalPartition) -> Iterator[pa.RecordBatch]:
        return self.plan.read(partition)

    def commit(self, end: dict) -> None:
        if self.opts.reader_id is None:
            return
        from pyspark_durable.endpoint import DurableInputEndpoint

        ns = namespace_for(self.opts, create=False)
        step = offset_step(ns, end, "the committed batch's end offset") - 1
        if step >= 0:
            DurableInputEndpoint(ns, self.opts.reader_id,
                                 hold_retention=self.opts.hold_retention).commit(step)


class WalBatchReader(DataSourceReader):
    """Batch ``spark.read``: steps [startingStep, endingStep)."""

    def __init__(self, plan: ReadPlan) -> None:
        self.plan = plan
        self.pruning = Pruning()

    def partitions(self) -> list[WalPartition]:
        return batch_partitions(self.plan, self.pruning)

    def read(self, partition: WalPartition) -> Iterator[pa.RecordBatch]:
        return self.plan.read(partition)


class PushdownBatchReader(WalBatchReader):
    """The batch reader Spark's filter-pushdown worker gets. A separate class because
    Spark refuses a reader that implements ``pushFilters`` while
    ``spark.sql.python.filterPushdown.enabled`` is off (its default), so the plain
    reader must not have one; the data source picks this one only when Spark is
    pushing (:func:`pyspark_durable.spark.pushdown.spark_is_pushing`)."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        """Take the filters on ``_step``, ``_commit_timestamp``, ``_region`` and ``_table``
        (see :mod:`pyspark_durable.spark.pushdown`); hand the rest back to Spark."""
        self.pruning, rest = push(filters, self.plan.with_metadata)
        if self.pruning.columns.keys() & {"_region", "_table"}:
            ns = namespace_for(self.plan.opts, create=False)
            tables = {i for i, t in ns.tables.by_id().items()
                      if self.pruning.admits("_table", t.name)}
            regions = {r for r in ns.info.regions() if self.pruning.admits("_region", r)}
            self.plan = replace(
                self.plan,
                table_ids=frozenset(tables if self.plan.table_ids is None
                                    else tables & self.plan.table_ids),
                regions=frozenset(regions if self.plan.regions is None
                                  else regions & self.plan.regions))
        return rest


def batch_partitions(plan: ReadPlan, pruning: Pruning) -> list[WalPartition]:
    """What a batch read plans: steps [startingStep, endingStep) (or the times), less
    what pushed filters prune."""
    ns = namespace_for(plan.opts, create=False)
    opts = plan.opts
    steps = ns.steps(refresh=False)
    asked = first_step(ns, opts)  # past the next step: StepNotCommitted
    end = steps.stop if opts.ending_step is None else opts.ending_step
    if opts.ending_timestamp_ms is not None:
        end = end_step_for(ns, opts.ending_timestamp_ms)
    if end > steps.stop:
        raise StepNotCommitted(
            f"option endingStep={end} is past the last committed step {steps.stop - 1}; "
            f"committed steps are [{steps.start}, {steps.stop})", namespace=ns.name,
            step=end)
    if asked > end:
        begun = f"startingStep={opts.starting_step}" if opts.starting_timestamp_ms is None \
            else f"startingTimestamp={iso(opts.starting_timestamp_ms)}"
        ended = f"endingStep={end}" if opts.ending_timestamp_ms is None \
            else f"endingTimestamp={iso(opts.ending_timestamp_ms)} (step {end})"
        raise ConfigError(
            f"option {begun} (step {asked}) is after {ended}: a batch reads steps "
            f"[start, end); committed steps are [{steps.start}, {steps.stop})",
            namespace=ns.name)
    start = check_available(ns, opts, asked)  # expired: StepExpired, or skipped
    return plan.partitions(ns, start, max(start, end), pruning)
