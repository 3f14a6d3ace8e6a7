"""A namespace of the WAL: tables in regions, attempts, atomic idempotent steps.

Protocol (how steps stay atomic and exactly-once with many writer processes):

1. A writer *attempt* (one Spark task attempt) appends entries to region logs. Each
   entry's key carries the attempt-local index as its sequence field; headers carry
   the attempt id. The entries are durable but invisible: nothing refers to them.
2. The committer (the Spark driver) appends one ``step`` record to the ``commits``
   log listing the runs of region offsets of the attempts it accepts. That append
   is the commit point: a step is all of its runs or, before it, nothing.
3. Replaying the commits log in order numbers steps 0, 1, 2, ... and fixes the
   sequence numbers of each (region, table): its ``next_sequence_num``, then +1 per
   entry in offset order (a table may span regions; each region counts its own).
   A ``step`` record whose ``(writer_id, writer_step)`` appeared before
   is a duplicate and is ignored by every reader, so a replayed batch or a racing
   committer never adds rows; the committer returns the first step of the pair.
4. Entries no step refers to (failed, aborted, superseded attempts) are never read;
   the cleaner deletes them with the rest of the segments below what is needed.

Retention is ordered through the same log (the rule that makes cleaning safe):

5. Before a cleaner deletes anything in a region, it appends a ``clean`` record with
   the region's *bound*; only entries below a recorded bound are ever deleted.
6. A ``step`` record with a run that starts below a bound recorded *before it* in
   the log is no step (replay refuses it, in every process alike). The committer
   replays past its own record before it answers: an accepted record is the
   acknowledgement, a refused one is :class:`AttemptLost` (retriable). So no step
   whose entries may have been cleaned is ever acknowledged.
7. After its ``clean`` record, the cleaner replays to the end of the log and deletes
   a region only below ``min(bound, first offset of any step still needed)``: steps
   ordered before the bound are in that replay, steps ordered after it start at or
   above it. So no cleaner deletes what an acknowledged, needed step refers to,
   however many cleaners and committers interleave, in any processes.
8. A cleaner writes a snapshot (versioned by its commits-log offset) before it
   cleans the commits log below that offset; recovery takes the highest version, so
   snapshots never go backwards. A handle that finds the log cleaned under it
   recovers again from the newest snapshot (it heals), in every process.

Recovery is the latest snapshot (state as of a commits-log offset) plus a replay of
the commits log after it; region logs are never scanned to recover.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace

import pyarrow as pa

from pyspark_durable.codec import codec_for, decode_key, decode_value
from pyspark_durable.codec.keys import U64_MAX
from pyspark_durable.codec.payload import PayloadCodec
from pyspark_durable.errors import (
    AttemptLost,
    ConfigError,
    CorruptEntryError,
    IncarnationMismatch,
    LogNotFound,
    OffsetOutOfRange,
    RoutingError,
    SchemaMismatch,
    StepExpired,
    StepNotCommitted,
)
from pyspark_durable.log import Entry, LogStore, Record
from pyspark_durable.wal import failpoints
from pyspark_durable.wal.attempt import Attempt
from pyspark_durable.wal.queries import NamespaceQueries
from pyspark_durable.wal.records import (
    AttemptReceipt,
    CommitRecord,
    ExpireRecord,
    MarkRecord,
    NsRecord,
    ReaderRecord,
    RetentionRecord,
    Run,
    SchemaRecord,
    StepCommit,
    TableInfo,
    TableRecord,
    WriterRecord,
    build_runs,
    encode_meta,
)
from pyspark_durable.wal.retention import RetentionPolicy
from pyspark_durable.wal.schemas import conform, fits, merge
from pyspark_durable.wal.state import NamespaceState, ReaderPosition

log = logging.getLogger(__name__)

COMMITS_LOG = "commits"
DEFAULT_TABLE = "default"
ENTRY_MAX_BYTES = 900 * 1024  # below Kafka's default message.max.bytes (1 MiB)
HIGH_BIT = 1 << 63
EVOLVE_ATTEMPTS = 8  # schema versions racing writers append before ours lands
# foreign entries (other attempts, other tables) one region read may pass over to serve
# two runs with one read: cheaper than a second bounds check and fetch set-up
READ_GAP_ENTRIES = 32


def check_writer(writer_id: object, writer_step: object, namespace: str) -> None:
    """Writer ids are non-empty strings and writer steps integers >= 0 (typed errors)."""
    if not isinstance(writer_id, str) or not writer_id:
        raise ConfigError(f"writer id {writer_id!r} is not a non-empty string",
                          namespace=namespace)
    if not isinstance(writer_step, int) or isinstance(writer_step, bool) or writer_step < 0:
        raise ConfigError(f"writer step {writer_step!r} is not an integer >= 0",
                          namespace=namespace, writer=writer_id)


def check_step_arg(name: str, value: object, namespace: str) -> int:
    """Step and sequence arguments are integers >= 0 (typed errors, never a silent no-op)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigError(f"{name} {value!r} is not an integer >= 0", namespace=namespace)
    return value


def table_id_for_name(name: str) -> int:
    """A stable id for a table name (ids >= 2**63); small integers stay user ids."""
    import hashlib

    digest = hashlib.sha256(name.encode()).digest()
    return int.from_bytes(digest[:8], "big") | HIGH_BIT


@dataclass(frozen=True, slots=True)
class StepBatch:
    """Rows of one entry of a step (in the table's newest schema), with where they came from."""

    step: int
    region_id: int
    table_id: int
    sequence_num: int
    offset: int
    commit_timestamp_ms: int
    batches: list[pa.RecordBatch]


@dataclass(slots=True)
class _RunRead:
    """One run of a committed step to read, with what checking its entries needs."""

    commit: StepCommit
    run: Run
    seq0: int  # sequence number of the run's first entry
    attempts: set[bytes]
    codec: PayloadCodec | None = field(default=None)


class Namespace(NamespaceQueries):
    """One WAL namespace over a :class:`LogStore`; see the module docstring.

    Outside ``wal/``, ask it questions (:class:`NamespaceQueries`, ``steps``, ``tables``,
    ``table``, ``step_commit``, ``retention``); never read ``state``.
    """

    def __init__(
        self, store: LogStore, namespace_id: int | None = 0,
        entry_max_bytes: int = ENTRY_MAX_BYTES, create: bool = True,
    ) -> None:
        """Open (with ``create``: create) a namespace.

        Without ``create`` nothing is created, neither the namespace nor any log: a
        missing namespace is :class:`LogNotFound` listing the namespaces there are, and
        ``namespace_id=None`` takes the id the namespace was created with.
        """
        if namespace_id is None and create:
            namespace_id = 0
        if namespace_id is not None and (not isinstance(namespace_id, int) or isinstance(
                namespace_id, bool) or not 0 <= namespace_id <= 255):
            raise ConfigError(f"namespace id {namespace_id!r} is not a u8 (0..255)",
                              namespace=store.namespace)
        self.store = store
        self.name = store.namespace
        self.entry_max_bytes = entry_max_bytes
        self._lock = threading.RLock()
        try:
            self._commits = store.open_log(COMMITS_LOG, create=create)
        except LogNotFound:
            names = [n for n in store.sibling_namespaces() if n != self.name]
            raise LogNotFound(f"unknown namespace {self.name!r}; namespaces: "
                              f"{', '.join(names) or 'none'} in {store.location()}") from None
        self.state = NamespaceState.recover(store, self._commits)
        if self.state.namespace_id is None and not create:
            raise LogNotFound(f"namespace {self.name!r} in {store.location()} is empty: "
                              "nothing was ever committed to it")
        if namespace_id is None:
            namespace_id = self.state.namespace_id
        if self.state.namespace_id is None:
            incarnation = uuid.uuid4().hex
            # the first record carries the incarnation it starts as its tag, too
            self._append_meta({**NsRecord(self.name, namespace_id, incarnation).to_json(),
                               "i": incarnation})
            self.refresh()
        if self.state.namespace_id != namespace_id:
            raise ConfigError(
                f"namespace was created with id {self.state.namespace_id}, opened with "
                f"id {namespace_id}", namespace=self.name,
            )
        self.namespace_id = namespace_id

    # -- state ----------------------------------------------------------------

    def refresh(self) -> NamespaceState:
        """Replay what any process appended to the commits log since we last looked.

        If a cleaner cleaned the log below where we are, the handle heals: it
        recovers again from the newest snapshot (rule 8 of the protocol).
        """
        with self._lock:
            try:
                self.state.replay(self._commits)
            except OffsetOutOfRange:
                log.info("namespace=%s: commits log cleaned below offset %d under this handle; "
                         "recovering from the newest snapshot", self.name, self.state.next_offset)
                self.state = NamespaceState.recover(self.store, self._commits)
            except IncarnationMismatch as exc:
                old = self.state.incarnation
                self.store.reset()  # cached log state describes the WAL that is gone
                self._commits = self.store.open_log(COMMITS_LOG, create=False)
                self.state = NamespaceState.recover(self.store, self._commits)
                raise IncarnationMismatch(
                    f"{exc.args[0].split(': ', 1)[-1]} (this handle knew incarnation {old}; the "
                    f"WAL now is incarnation {self.state.incarnation} with "
                    f"{self.state.next_step} steps; this handle follows it from now on)",
                    namespace=self.name) from exc
            return self.state

    @property
    def incarnation(self) -> str | None:
        """The id this namespace got when it was created (None: an older WAL without one)."""
        return self.state.incarnation

    def append_record(self, record: CommitRecord) -> int:
        """Append one record to the commits log; its offset. Replay decides what it
        means: :meth:`refresh` to see it (a cleaner records its ``clean`` record so)."""
        return self._append_meta(record.to_json())

    def exclusive(self) -> threading.RLock:
        """This handle's lock: hold it to refresh, decide and append as one unit."""
        return self._lock

    def _append_meta(self, record: dict) -> int:
        """Append one record's JSON, tagged with the incarnation it belongs to."""
        if self.state.incarnation is not None:
            record = {**record, "i": self.state.incarnation}
        return self._commits.append([Record(b"", encode_meta(record))])[0]

    # -- tables ---------------------------------------------------------------

    def tables(self, refresh: bool = True) -> dict[int, TableInfo]:
        """Table id -> table (a copy). ``refresh=False``: as of the last refresh."""
        return dict((self.refresh() if refresh else self.state).tables)

    def resolve_table(self, table: int | str) -> int:
        """A table reference to its id: an ``int`` is an id, a ``str`` is always a name.

        A name is never read as a number: ``"7"``, ``"007"`` and ``"\u0667"`` are three
        tables, none of them table id 7 (ids are asked for explicitly, as an ``int``).
        """
        if isinstance(table, bool):
            raise RoutingError(f"table {table!r} is not a name (str) or id (int)",
                               namespace=self.name)
        if isinstance(table, int):
            if not 0 <= table <= U64_MAX:
                raise RoutingError(f"table id {table} is not a u64", namespace=self.name)
            return table
        if isinstance(table, str) and table:
            return table_id_for_name(table)
        raise RoutingError(f"table {table!r} is not a name (non-empty str) or id (int)",
                           namespace=self.name)

    def table(self, table: int | str) -> TableInfo:
        table_id = self.resolve_table(table)
        info = self.state.tables.get(table_id) or self.refresh().tables.get(table_id)
        if info is None:
            known = ", ".join(t.name for t in self.state.tables.values()) or "none"
            kind = "table id" if isinstance(table, int) else "table"
            hint = ""
            by_id = [t for t in self.state.tables.values()
                     if isinstance(table, str) and t.name == table and t.table_id != table_id]
            if by_id:  # created by id, or by an older version from a numeric name
                hint = (f"; table id {by_id[0].table_id} is named {table!r} (created by id, or "
                        "from a numeric name by an older version): read it by its id, "
                        f"{by_id[0].table_id} in Python or tables=[{by_id[0].table_id}] in Spark")
            raise RoutingError(f"unknown {kind} {table!r}; tables: {known}{hint}",
                               namespace=self.name)
        return info

    def define_table(
        self, table: int | str, schema: pa.Schema, payload_format: str = "arrow",
        merge_schema: bool = False,
    ) -> TableInfo:
        """The table rows of ``schema`` are written to, created if new.

        Rows fit the table when their columns are some of its columns, of its types or
        narrower ones of the same kind (missing columns are written null). With
        ``merge_schema``, rows that do not fit add a schema version: new nullable
        columns, lossless widenings. Racing writers each append the version they want;
        the first record of a version number wins, the others merge again on top of it.
        """
        table_id = self.resolve_table(table)
        codec_for(payload_format, schema)  # rejects unknown formats and unmappable types
        name = table if isinstance(table, str) else str(table_id)
        where = {"namespace": self.name, "table": name}
        for _ in range(EVOLVE_ATTEMPTS):
            existing = self.state.tables.get(table_id) or self.refresh().tables.get(table_id)
            if existing is None:
                self.append_record(TableRecord(table_id, name, schema, payload_format))
                existing = self.refresh().tables[table_id]  # the first definition wins
            if existing.payload_format != payload_format:
                raise SchemaMismatch(
                    f"payload format {payload_format!r} differs from the table's "
                    f"{existing.payload_format!r}", **where)
            if fits(schema, existing.schema):
                return existing
            newest = self.refresh().tables[table_id]  # another writer may have merged already
            if newest is not existing:
                continue
            try:
                merged = merge(existing.schema, schema, what="the table")
            except SchemaMismatch as exc:  # a real type conflict: no option allows it
                raise SchemaMismatch(exc.args[0], **where) from None
            if not merge_schema:
                raise SchemaMismatch(
                    f"rows have new columns or wider types: table has "
                    f"{_fmt(existing.schema)}, rows have {_fmt(schema)}; to add a schema "
                    "version with them set .option(\"mergeSchema\", \"true\") (Spark) or "
                    "merge_schema=True", **where)
            codec_for(payload_format, merged)
            self.append_record(SchemaRecord(table_id, len(existing.schemas), merged))
            self.refresh()
            log.info("namespace=%s table=%s: schema version %d is %s", self.name, name,
                     len(existing.schemas), _fmt(merged))
        raise SchemaMismatch(f"the table's schema kept changing under {EVOLVE_ATTEMPTS} "
                             "merges by other writers; write again", **where)

    # -- writing --------------------------------------------------------------

    def begin(self, writer_id: str, writer_step: int, attempt_id: str | None = None) -> Attempt:
        """Start a writer attempt for ``(writer_id, writer_step)``."""
        check_writer(writer_id, writer_step, self.name)
        return Attempt(self, writer_id, writer_step, attempt_id or uuid.uuid4().hex)

    def committed_step(self, writer_id: str, writer_step: int) -> int | None:
        """The step that committed ``(writer_id, writer_step)``, or None."""
        check_writer(writer_id, writer_step, self.name)
        return self.refresh().pairs.get((writer_id, writer_step))

    def commit(self, writer_id: str, writer_step: int, receipts: list[AttemptReceipt],
               consecutive: bool = False) -> int:
        """Commit the attempts' entries as one step; idempotent per (writer, step).

        Raises :class:`AttemptLost` (retriable) when a cleaner's bound was ordered
        before this step's record and covers its entries: nothing is acknowledged.
        With ``consecutive`` (a writer that numbers its steps 0, 1, 2, ... like a Spark
        query), a writer step whose predecessor this WAL never saw is
        :class:`IncarnationMismatch`: the writer wrote into a WAL that was lost,
        recreated or restored from an older copy.
        """
        done = self.committed_step(writer_id, writer_step)
        if done is not None:
            log.info("namespace=%s writer=%s writer_step=%s: already committed as step %d",
                     self.name, writer_id, writer_step, done)
            return done
        if consecutive:
            self.check_consecutive(writer_id, writer_step)
        for r in receipts:
            if (r.writer_id, r.writer_step) != (writer_id, writer_step):
                raise ConfigError(
                    f"attempt {r.attempt_id} belongs to ({r.writer_id}, {r.writer_step}), "
                    f"not ({writer_id}, {writer_step})", namespace=self.name)
        commit = StepCommit(writer_id, writer_step, tuple(r.attempt_id for r in receipts),
                            build_runs(receipts), int(time.time() * 1000))
        self._raise_if_lost(commit)  # cheap early answer; the replay below decides
        failpoints.reached("commit.checked", writer_step=writer_step)
        offset = self.append_record(commit)
        failpoints.reached("commit.appended")
        step = self.committed_step(writer_id, writer_step)
        if step is None:  # replay refused our record: a clean bound was ordered before it
            self._raise_if_lost(commit)
            raise AttemptLost(  # pragma: no cover - only a bound can refuse a new pair
                f"step record at commits offset {offset} was refused", namespace=self.name,
                writer=writer_id, writer_step=writer_step)
        return step

    def note_writer_step(self, writer_id: str, writer_step: int) -> None:
        """Record that a consecutive writer finished ``writer_step`` without rows."""
        check_writer(writer_id, writer_step, self.name)
        if self.refresh().writer_last.get(writer_id, -1) < writer_step:
            self.check_consecutive(writer_id, writer_step)
            self.append_record(WriterRecord(writer_id, writer_step))

    def check_consecutive(self, writer_id: str, writer_step: int) -> None:
        last = self.state.writer_last.get(writer_id)
        if writer_step > 0 and (last is None or last < writer_step - 1):
            known = "none of its steps" if last is None else f"its steps up to {last}"
            raise IncarnationMismatch(
                f"writer step {writer_step} follows step {writer_step - 1}, but this WAL "
                f"(incarnation {self.incarnation}) knows {known}: the WAL was lost, recreated "
                "or restored from an older copy under the writer's checkpoint; start the "
                "writer from a new checkpoint to write into this WAL",
                namespace=self.name, writer=writer_id)

    def _raise_if_lost(self, commit: StepCommit) -> None:
        run = self.state.lost_run(commit)
        if run is not None:
            raise AttemptLost(
                f"entries from offset {run.start} may have been cleaned (a cleaner recorded "
                f"bound {self.state.clean_bounds[run.region_id]} before the step committed); "
                "write the step again", namespace=self.name, region=run.region_id,
                writer=commit.writer_id, writer_step=commit.writer_step)

    # -- reading --------------------------------------------------------------

    def steps(self, refresh: bool = True) -> range:
        """Committed steps still readable: [first retained, next step).

        ``refresh=False``: as of this handle's last refresh, for a caller that just
        refreshed (on Kafka a refresh costs broker round trips).
        """
        s = self.refresh() if refresh else self.state
        return range(s.expired_before, s.next_step)

    def step_commit(self, step: int) -> StepCommit:
        """The commit record of a step (a committed step never changes: no refresh needed)."""
        check_step_arg("step", step, self.name)
        s = self.state
        if step >= s.next_step or step < s.expired_before:
            s = self.refresh()
        if step < s.expired_before:
            raise StepExpired(
                f"step {step} was expired; available steps are "
                f"[{s.expired_before}, {s.next_step})", namespace=self.name, step=step)
        if step >= s.next_step:
            raise StepNotCommitted(
                f"step {step} is not committed yet; committed steps are "
                f"[{s.expired_before}, {s.next_step})", namespace=self.name, step=step)
        return s.step(step)

    def read_step(
        self, step: int, tables: set[int] | None = None, regions: set[int] | None = None
    ) -> Iterator[StepBatch]:
        """Yield the rows of one committed step, region by region, in offset order."""
        return self._read_runs(self._selected_runs([self.step_commit(step)], tables, regions))

    def read_region_steps(
        self, region_id: int, steps: Iterable[int], tables: set[int] | None = None,
        windows: Sequence[tuple[int, int] | None] | None = None,
    ) -> Iterator[StepBatch]:
        """Yield the rows of ``steps`` in one region, step by step: what one Spark task reads.

        The same rows as ``read_step`` per step, but runs that lie close together in the
        region log are read with one ``read``: its bounds check and fetch set-up are paid
        once per group, not once per step (on Kafka each is a broker round trip).

        ``windows`` (one per step, None for the whole step) reads only the step's entries
        at region offsets ``[start, end)``: tasks that split a large step read disjoint
        windows of it, and each entry keeps its sequence number and is checked against
        its step as in a whole read (a run is consecutive offsets, so a window of it is
        a run of ``end - start`` entries).
        """
        commits = [self.step_commit(step) for step in steps]
        return self._read_runs(self._selected_runs(commits, tables, {region_id}, windows))

    def _selected_runs(self, commits: list[StepCommit], tables: set[int] | None,
                       regions: set[int] | None,
                       windows: Sequence[tuple[int, int] | None] | None = None
                       ) -> list[_RunRead]:
        """The runs to read, in yield order, each with its first sequence number."""
        out = []
        for i, commit in enumerate(commits):
            attempts = {a.encode() for a in commit.attempts}
            next_seq = dict(commit.first_sequences)
            window = None if windows is None else windows[i]
            for run in commit.runs:
                seq0 = next_seq[run.key]
                next_seq[run.key] = seq0 + run.entries
                if (tables is None or run.table_id in tables) and (
                        regions is None or run.region_id in regions):
                    if window is not None:
                        start, end = max(run.start, window[0]), min(run.end, window[1])
                        if start >= end:
                            continue
                        seq0 += start - run.start
                        run = replace(run, start=start, end=end)  # rows: still the run's
                    out.append(_RunRead(commit, run, seq0, attempts))
        return out

    def _read_runs(self, runs: list[_RunRead]) -> Iterator[StepBatch]:
        """Read runs group by group; a group is consecutive runs of one region in rising
        offset order with at most ``READ_GAP_ENTRIES`` foreign entries between two."""
        group: list[_RunRead] = []
        for item in runs:
            if group and (item.run.region_id != group[-1].run.region_id
                          or not 0 <= item.run.start - group[-1].run.end <= READ_GAP_ENTRIES):
                yield from self._read_group(group)
                group = []
            group.append(item)
        if group:
            yield from self._read_group(group)

    def _read_group(self, group: list[_RunRead]) -> Iterator[StepBatch]:
        region_id = group[0].run.region_id
        region = self.store.open_region(region_id, create=False)
        try:
            # committed runs were acknowledged: read to their end, whatever this
            # handle's view of the region's end (Kafka: another process appended)
            entries = region.read_acknowledged(group[0].run.start, group[-1].run.end)
        except OffsetOutOfRange:
            for item in group:  # expired meanwhile: raises StepExpired
                self.step_commit(item.commit.step)
            raise
        it = iter(group)
        item: _RunRead | None = next(it)
        count, last = 0, -1
        for entry in entries:
            if entry.offset <= last:
                raise CorruptEntryError(
                    f"the log returned offset {entry.offset} after {last}",
                    namespace=self.name, region=region_id, offset=entry.offset)
            last = entry.offset
            while item is not None and entry.offset >= item.run.end:
                self._check_count(item, count)
                item, count = next(it, None), 0
            if item is None:
                raise CorruptEntryError(
                    f"the log returned offset {entry.offset}, past the read's end "
                    f"{group[-1].run.end}", namespace=self.name, region=region_id,
                    offset=entry.offset)
            if entry.offset < item.run.start:
                continue  # between two runs: another attempt's or another table's entry
            count += 1
            yield self._step_batch(item, entry, count - 1)
        if item is not None:
            self._check_count(item, count)
        for rest in it:  # runs the read never reached: entries are missing
            self._check_count(rest, 0)

    def _check_count(self, item: _RunRead, count: int) -> None:
        run = item.run
        if count != run.entries:
            raise CorruptEntryError(
                f"run [{run.start}, {run.end}) of step {item.commit.step} read back {count} "
                "entries", namespace=self.name, region=run.region_id)

    def _step_batch(self, item: _RunRead, entry: Entry, index: int) -> StepBatch:
        """Check one entry against the step that committed it; decode its rows."""
        commit, run = item.commit, item.run
        info = self.state.tables[run.table_id]
        if run.schema_version >= len(info.schemas):
            raise CorruptEntryError(
                f"step {commit.step} names schema version {run.schema_version} of table "
                f"{info.name}, which has {len(info.schemas)}", namespace=self.name,
                region=run.region_id)
        if entry.header("a") not in item.attempts:
            raise CorruptEntryError(
                f"entry belongs to attempt {entry.header('a')!r}, not to step "
                f"{commit.step}", namespace=self.name, region=run.region_id,
                offset=entry.offset)
        key = decode_key(entry.key, expect_namespace_id=self.namespace_id,
                         expect_region_id=run.region_id, offset=entry.offset)
        if key.table_id != run.table_id:
            raise CorruptEntryError(
                f"entry holds table {key.table_id}, the step says {run.table_id}",
                namespace=self.name, region=run.region_id, offset=entry.offset)
        payload = decode_value(entry.value, region_id=run.region_id, offset=entry.offset)
        if item.codec is None:
            item.codec = codec_for(info.payload_format, info.schemas[run.schema_version])
        batches = item.codec.decode(payload)
        if run.schema_version != info.version:  # older rows read as the newest schema
            batches = [conform(b, info.schema) for b in batches]
        return StepBatch(commit.step, run.region_id, run.table_id, item.seq0 + index,
                         entry.offset, commit.timestamp_ms, batches)

    def read_step_table(self, step: int, tables: set[int] | None = None,
                        regions: set[int] | None = None) -> pa.Table | None:
        """Convenience: a step's rows of one schema as one Arrow table (None if empty)."""
        batches = [b for sb in self.read_step(step, tables, regions) for b in sb.batches]
        return pa.Table.from_batches(batches) if batches else None

    # -- retention ------------------------------------------------------------

    def expire(self, step: int) -> None:
        """Steps below ``step`` are no longer needed by step readers."""
        check_step_arg("expire step", step, self.name)
        s = self.refresh()
        if step > s.next_step:
            raise StepNotCommitted(f"cannot expire up to {step}: only steps below "
                                   f"{s.next_step} are committed", namespace=self.name)
        if step > s.expired_before:
            self.append_record(ExpireRecord(step))
            self.refresh()

    def mark_deleted(self, table: int | str, sequence: int, region_id: int | None = None) -> None:
        """Entries of ``table`` in a region with sequence below ``sequence`` are not needed.

        Sequences count per (region, table): ``region_id`` may be left out only when
        the table's entries live in one region.
        """
        check_step_arg("sequence", sequence, self.name)
        info = self.table(table)
        regions = self.state.table_regions(info.table_id)
        if region_id is None:
            if len(regions) > 1:
                raise RoutingError(f"table has entries in regions {sorted(regions)}: name the "
                                   "region whose sequences are marked", namespace=self.name,
                                   table=info.name)
            region_id = next(iter(regions), 0)
        check_step_arg("region", region_id, self.name)
        key = (region_id, info.table_id)
        current = self.state.marks.get(key, 0)
        limit = self.state.next_sequences.get(key, 0)
        if sequence > limit:
            raise RoutingError(f"sequence {sequence} is past the next sequence {limit} of the "
                               f"table in region {region_id}", namespace=self.name,
                               table=info.name, region=region_id)
        if sequence > current:
            self.append_record(MarkRecord(info.table_id, sequence, region_id))
            self.refresh()

    # -- readers and the retention policy ------------------------------------------

    def commit_reader(self, reader_id: str, next_step: int, hold: bool = False) -> None:
        """Record that reader ``reader_id`` needs steps from ``next_step`` on.

        With ``hold``, the retention policy never expires a step this reader still
        needs (an abandoned reader then holds retention until :meth:`drop_reader`).
        """
        if not isinstance(reader_id, str) or not reader_id:
            raise ConfigError(f"reader id {reader_id!r} is not a non-empty string",
                              namespace=self.name)
        check_step_arg("reader next step", next_step, self.name)
        s = self.refresh()
        if next_step > s.next_step:
            raise StepNotCommitted(f"reader {reader_id!r} cannot have read up to step {next_step}"
                                   f": committed steps end at {s.next_step}", namespace=self.name)
        if s.readers.get(reader_id) != ReaderPosition(next_step, hold):
            self.append_record(ReaderRecord(reader_id, next_step, hold))
            self.refresh()

    def drop_reader(self, reader_id: str) -> None:
        """Forget a reader (it no longer holds retention)."""
        if reader_id in self.refresh().readers:
            self.append_record(ReaderRecord(reader_id, drop=True))
            self.refresh()

    def set_retention(self, policy: RetentionPolicy) -> None:
        """Keep ``policy`` with the namespace (every cleaner applies it); no-op if unchanged."""
        if self.refresh().retention != policy.to_json():
            self.append_record(RetentionRecord(policy.to_json()))
            self.refresh()

    def retention(self) -> RetentionPolicy:
        return RetentionPolicy.from_json(self.refresh().retention)

    def close(self) -> None:
        self.store.close()


def _fmt(schema: pa.Schema) -> str:
    return "(" + ", ".join(f"{f.name}: {f.type}" for f in schema) + ")"
