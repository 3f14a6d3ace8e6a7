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
   snapshots never go backwards. A committer writes one too, every
   ``SNAPSHOT_EVERY_RECORDS`` records (:mod:`.snapshot_schedule`), so a namespace no
   cleaner ever cleans still opens by replaying a bounded tail; only cleaners trim the
   log. A handle that finds the log cleaned under it recovers again from the newest
   snapshot (it heals), in every process.

Recovery is the latest snapshot (state as of a commits-log offset) plus a replay of
the commits log after it; region logs are never scanned to recover.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence

import pyarrow as pa

import pyspark_durable.wal.failpoints as failpoints  # the module: tests swap its hooks
from pyspark_durable.errors import (
    AttemptLost,
    ClockSkew,
    ConfigError,
    IncarnationMismatch,
    LogNotFound,
    StepNotCommitted,
    WriterStepExpired,
)
from pyspark_durable.log import LogStore
from pyspark_durable.times import iso
from pyspark_durable.wal.arguments import check_step_arg, check_writer
from pyspark_durable.wal.attempt import Attempt
from pyspark_durable.wal.format.commit_record import CommitRecord
from pyspark_durable.wal.format.receipts import AttemptReceipt, build_runs, event_time_span
from pyspark_durable.wal.format.records import (
    ClocksRecord,
    DedupRecord,
    ExpireRecord,
    NsRecord,
    OneOffsRecord,
    ReaderRecord,
    RetentionRecord,
    StepCommit,
    WriterRecord,
)
from pyspark_durable.wal.ledger import JUST_CAUGHT_UP_S, Ledger
from pyspark_durable.wal.queries import NamespaceInfo
from pyspark_durable.wal.reading import StepBatch, StepReads
from pyspark_durable.wal.replay.clocks import CLOCK_STEP_MS
from pyspark_durable.wal.replay.dedup import DEDUP_ONE_OFFS, DEDUP_STEPS, DEDUP_WINDOW_MS
from pyspark_durable.wal.replay.retention import RetentionPolicy
from pyspark_durable.wal.replay.state import NamespaceState
from pyspark_durable.wal.replay.stored_state import ReaderPosition
from pyspark_durable.wal.reserve import using_reserve
from pyspark_durable.wal.tables import TableCatalog

log = logging.getLogger(__name__)

DEFAULT_TABLE = "default"
ENTRY_MAX_BYTES = 900 * 1024  # below Kafka's default message.max.bytes (1 MiB)


class Namespace:
    """One WAL namespace over a :class:`LogStore`; see the module docstring.

    A façade over the namespace's :class:`Ledger` (the commits log and the state
    replayed from it): its tables (``tables``, a :class:`TableCatalog`), its answers
    (``info``, a :class:`NamespaceInfo`), its reads (``steps``, ``step_commit``,
    ``read_*``) and its writes (``begin``, ``commit`` and the records of readers,
    retention and expiry). The ledger itself (``ledger``) is the door of the WAL's own
    upkeep (cleaner, check, repair), not of code outside ``wal/``.
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
        self.ledger = ledger = Ledger(store, create=create)
        if ledger.state.namespace_id is None and not create:
            raise LogNotFound(f"namespace {self.name!r} in {store.location()} is empty: "
                              "nothing was ever committed to it")
        if namespace_id is None:
            namespace_id = ledger.state.namespace_id
        if ledger.state.namespace_id is None:
            incarnation = uuid.uuid4().hex
            # the first record carries the incarnation it starts as its tag, too
            ledger.append_json([{**NsRecord(self.name, namespace_id, incarnation).to_json(),
                                 "i": incarnation}])
            dedup = ledger.refreshed().dedup  # a racing creator may have appended some already
            policies = [record for missing, record in (
                (dedup.window_ms is None, DedupRecord(DEDUP_WINDOW_MS, DEDUP_STEPS)),  # bounds
                (dedup.step_ms is None, ClocksRecord(CLOCK_STEP_MS)),  # clock rules (clocks.py)
                (dedup.max_one_offs is None, OneOffsRecord(DEDUP_ONE_OFFS)),  # one-off bound
            ) if missing]
            if policies:  # one append: one sync and one mark, however many
                ledger.append_json([record.to_json() for record in policies])
                ledger.refreshed()
        if ledger.state.namespace_id != namespace_id:
            raise ConfigError(
                f"namespace was created with id {ledger.state.namespace_id}, opened with "
                f"id {namespace_id}", namespace=self.name,
            )
        self.namespace_id: int = namespace_id
        self.tables = TableCatalog(ledger)
        self.info = NamespaceInfo(ledger)
        self._reads = StepReads(ledger, namespace_id)

    def refresh(self, within_s: float = 0.0) -> None:
        """Replay what any process appended to the commits log since we last looked
        (``within_s``: unless this handle caught up that recently, for a caller whose
        next step catches up or re-decides anyway).

        If a cleaner cleaned the log below where we are, the handle heals: it
        recovers again from the newest snapshot (rule 8 of the protocol). The replayed
        state stays inside the WAL; ask ``info``, ``tables`` and the reads what it holds.
        """
        self.ledger.refreshed(within_s)

    # -- reading --------------------------------------------------------------

    def steps(self, refresh: bool = True) -> range:
        """Committed steps still readable: [first retained, next step) (:class:`StepReads`)."""
        return self._reads.steps(refresh)

    def step_commit(self, step: int) -> StepCommit:
        """A copy of a committed step's record (:class:`StepReads`)."""
        return self._reads.step_commit(step)

    def read_step(
        self, step: int, tables: set[int] | None = None, regions: set[int] | None = None
    ) -> Iterator[StepBatch]:
        """The rows of one committed step, region by region, in offset order."""
        return self._reads.read_step(step, tables, regions)

    def read_region_steps(
        self, region_id: int, steps: Iterable[int], tables: set[int] | None = None,
        windows: Sequence[tuple[int, int] | None] | None = None,
    ) -> Iterator[StepBatch]:
        """The rows of ``steps`` in one region, step by step: what one Spark task reads
        (:meth:`StepReads.read_region_steps`)."""
        return self._reads.read_region_steps(region_id, steps, tables, windows)

    def read_step_table(self, step: int, tables: set[int] | None = None,
                        regions: set[int] | None = None) -> pa.Table | None:
        """A step's rows of one schema as one Arrow table (None if empty)."""
        return self._reads.read_step_table(step, tables, regions)

    # -- writing --------------------------------------------------------------

    def begin(self, writer_id: str, writer_step: int, attempt_id: str | None = None) -> Attempt:
        """Start a writer attempt for ``(writer_id, writer_step)``."""
        check_writer(writer_id, writer_step, self.name)
        return Attempt(self, writer_id, writer_step, attempt_id or uuid.uuid4().hex)

    def committed_step(self, writer_id: str, writer_step: int) -> int | None:
        """The step that committed ``(writer_id, writer_step)``, or None."""
        check_writer(writer_id, writer_step, self.name)
        return self.ledger.refreshed().dedup.committed(writer_id, writer_step)

    def commit(self, writer_id: str, writer_step: int, receipts: list[AttemptReceipt],
               consecutive: bool = False, started_ms: int | None = None) -> int:
        """Commit the attempts' entries as one step; idempotent per (writer, step).

        Raises :class:`AttemptLost` (retriable) when a cleaner's bound was ordered
        before this step's record and covers its entries: nothing is acknowledged.
        With ``consecutive`` (a writer that numbers its steps 0, 1, 2, ... like a Spark
        query), a writer step whose predecessor this WAL never saw is
        :class:`IncarnationMismatch`: the writer wrote into a WAL that was lost,
        recreated or restored from an older copy. ``started_ms`` marks a one-off writer
        (a batch write): when its writer step began, the same for every retry of this
        commit; the WAL forgets such writers after its deduplication window
        (:mod:`.dedup`). A pair too old to judge is :class:`WriterStepExpired`.
        """
        check_writer(writer_id, writer_step, self.name)
        # the early answers below use a state caught up just now (a driver's cached
        # handle was, an instant before): the replay after the append decides again
        done = self.ledger.refreshed(JUST_CAUGHT_UP_S).dedup.committed(writer_id, writer_step)
        if done is not None:
            log.info("namespace=%s writer=%s writer_step=%s: already committed as step %d",
                     self.name, writer_id, writer_step, done)
            return done
        if consecutive:
            self._check_consecutive(writer_id, writer_step)
        for r in receipts:
            if (r.writer_id, r.writer_step) != (writer_id, writer_step):
                raise ConfigError(
                    f"attempt {r.attempt_id} belongs to ({r.writer_id}, {r.writer_step}), "
                    f"not ({writer_id}, {writer_step})", namespace=self.name)
        # so the step's record names runs of its own writer's attempts only
        assert all((r.writer_id, r.writer_step) == (writer_id, writer_step) for r in receipts)
        commit = StepCommit(writer_id, writer_step, tuple(r.attempt_id for r in receipts),
                            build_runs(receipts), int(time.time() * 1000),
                            event_time=event_time_span([r.event_time for r in receipts]),
                            started_ms=started_ms)
        self._raise_if_refused(commit)  # cheap early answer; the replay below decides
        failpoints.reached("commit.checked", writer_step=writer_step)
        offset = self.ledger.append_replayed(commit)
        failpoints.reached("commit.appended")
        step = self.ledger.state.dedup.committed(writer_id, writer_step)
        assert step is None or step < self.ledger.state.next_step  # a pair names a replayed step
        if step is None:  # replay refused our record: too old to judge, or a bound before it
            self._raise_if_refused(commit)
            raise AttemptLost(  # pragma: no cover - only age or a bound refuse a new pair
                f"step record at commits offset {offset} was refused", namespace=self.name,
                writer=writer_id, writer_step=writer_step)
        self.ledger.snapshot_if_due()
        return step

    def note_writer_step(self, writer_id: str, writer_step: int) -> None:
        """Record that a consecutive writer finished ``writer_step`` without rows."""
        check_writer(writer_id, writer_step, self.name)
        last = self.ledger.refreshed().dedup.last(writer_id)
        if last is None or last < writer_step:
            self._check_consecutive(writer_id, writer_step)
            self.ledger.append(WriterRecord(writer_id, writer_step))
            self.ledger.snapshot_if_due()

    def _check_consecutive(self, writer_id: str, writer_step: int) -> None:
        """A consecutive writer's step must follow one this WAL knows (or be its first)."""
        last = self.ledger.state.dedup.last(writer_id)
        if writer_step > 0 and (last is None or last < writer_step - 1):
            known = "none of its steps" if last is None else f"its steps up to {last}"
            raise IncarnationMismatch(
                f"writer step {writer_step} follows step {writer_step - 1}, but this WAL "
                f"(incarnation {self.ledger.incarnation}) knows {known}: the WAL was lost, recreated "
                "or restored from an older copy under the writer's checkpoint; start the "
                "writer from a new checkpoint to write into this WAL",
                namespace=self.name, writer=writer_id)

    def _raise_if_refused(self, commit: StepCommit) -> None:
        """The typed error for a record replay refuses (a duplicate is not refused here:
        the committer asked before, and returns the step replay found)."""
        too_old = self.ledger.state.dedup.too_old(commit.writer_id, commit.writer_step,
                                           commit.started_ms)
        own_ms, wal_ms = int(time.time() * 1000), self.ledger.state.dedup.clock_ms
        if too_old is not None and commit.started_ms is not None and \
                self.ledger.state.dedup.step_ms is not None and own_ms < wal_ms - CLOCK_STEP_MS:
            # refused because it began long ago by this host's clock, which is far behind
            # the WAL's: say so, not "too old" (under the clock rules one record moves the
            # WAL's clock at most CLOCK_STEP_MS, so it is most likely this clock)
            raise ClockSkew(
                f"this process's clock reads {iso(own_ms)}, {(wal_ms - own_ms) / 3_600_000:.1f}"
                f" h behind the WAL's clock {iso(wal_ms)} (its newest commit time); {too_old}. "
                "Nothing was committed: correct this host's clock (NTP) and write again; if "
                "this clock is right, records older than the WAL's clock rules pushed its "
                "clock ahead: start the writer at the WAL's clock (Namespace.info.one_off_start_ms)",
                own_ms=own_ms, wal_ms=wal_ms, namespace=self.name,
                writer=commit.writer_id, writer_step=commit.writer_step)
        if too_old is not None:
            raise WriterStepExpired(
                f"{too_old}: the WAL no longer knows whether it was committed, so it commits "
                "nothing; write the rows under a new writer id", namespace=self.name,
                writer=commit.writer_id, writer_step=commit.writer_step)
        run = self.ledger.state.lost_run(commit)
        if run is not None:
            raise AttemptLost(
                f"entries from offset {run.start} may have been cleaned (a cleaner recorded "
                f"bound {self.ledger.state.clean_bounds[run.region_id]} before the step committed); "
                "write the step again", namespace=self.name, region=run.region_id,
                writer=commit.writer_id, writer_step=commit.writer_step)

    # -- retention ------------------------------------------------------------

    def expire(self, step: int) -> None:
        """Steps below ``step`` are no longer needed by step readers."""
        check_step_arg("expire step", step, self.name)
        s = self.ledger.refreshed()
        if step > s.next_step:
            raise StepNotCommitted(f"cannot expire up to {step}: only steps below "
                                   f"{s.next_step} are committed", namespace=self.name)
        self._freeing(lambda st: step > st.expired_before, ExpireRecord(step))

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
        s = self.ledger.refreshed()
        if next_step > s.next_step:
            raise StepNotCommitted(f"reader {reader_id!r} cannot have read up to step {next_step}"
                                   f": committed steps end at {s.next_step}", namespace=self.name)
        if s.readers.get(reader_id) != ReaderPosition(next_step, hold):
            self.ledger.append(ReaderRecord(reader_id, next_step, hold))
            self.ledger.refreshed()

    def drop_reader(self, reader_id: str) -> None:
        """Forget a reader (it no longer holds retention)."""
        self._freeing(lambda st: reader_id in st.readers, ReaderRecord(reader_id, drop=True))

    def set_retention(self, policy: RetentionPolicy) -> None:
        """Keep ``policy`` with the namespace (every cleaner applies it); no-op if unchanged."""
        self._freeing(lambda st: st.retention != policy.to_json(),
                      RetentionRecord(policy.to_json()))

    def _freeing(self, needed: Callable[[NamespaceState], bool], record: CommitRecord) -> None:
        """Append ``record`` if ``needed`` says so after a replay: a record that lets a
        cleaner free space, so on a full disk it may spend the store's reserve
        (:mod:`.reserve`; a second try decides again from a fresh replay)."""

        def append() -> None:
            if needed(self.ledger.refreshed()):
                self.ledger.append(record)
                self.ledger.refreshed()

        using_reserve(self.store, append)

    def set_dedup_window(self, window_ms: int, steps: int = DEDUP_STEPS) -> None:
        """Bound deduplication from here on (:mod:`.dedup`): one-off writers are remembered
        ``window_ms``, every writer's newest ``steps`` writer steps; no-op if unchanged."""
        for name, value in (("dedup window", window_ms), ("dedup steps", steps)):
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"{name} {value!r} is not an integer > 0", namespace=self.name)
        d = self.ledger.refreshed().dedup
        if (d.window_ms, d.steps) != (window_ms, steps):
            self.ledger.append(DedupRecord(window_ms, steps))
            self.ledger.refreshed()

    def retention(self) -> RetentionPolicy:
        """The retention policy kept with the namespace (after a refresh)."""
        return RetentionPolicy.from_json(self.ledger.refreshed().retention)

    def close(self) -> None:
        """Close the store this namespace was opened on."""
        self.store.close()
