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
import threading
import time
import uuid
from collections.abc import Callable

import pyspark_durable.wal.failpoints as failpoints  # the module: tests swap its hooks
from pyspark_durable.errors import (
    AttemptLost,
    ClockSkew,
    ConfigError,
    IncarnationMismatch,
    LogNotFound,
    OffsetOutOfRange,
    RoutingError,
    StepExpired,
    StepNotCommitted,
    WriterStepExpired,
)
from pyspark_durable.log import LogStore
from pyspark_durable.times import iso
from pyspark_durable.wal.attempt import Attempt
from pyspark_durable.wal.format.receipts import AttemptReceipt, build_runs, event_time_span
from pyspark_durable.wal.format.records import (
    ClocksRecord,
    CommitRecord,
    DedupRecord,
    ExpireRecord,
    MarkRecord,
    NsRecord,
    OneOffsRecord,
    ReaderRecord,
    RetentionRecord,
    StepCommit,
    WriterRecord,
    encode_meta,
)
from pyspark_durable.wal.queries import NamespaceQueries, handed_out
from pyspark_durable.wal.reading import NamespaceReads
from pyspark_durable.wal.replay.clocks import CLOCK_STEP_MS
from pyspark_durable.wal.replay.copies import commit_entries
from pyspark_durable.wal.replay.dedup import DEDUP_ONE_OFFS, DEDUP_STEPS, DEDUP_WINDOW_MS
from pyspark_durable.wal.replay.retention import RetentionPolicy
from pyspark_durable.wal.replay.snapshot_schedule import SnapshotSchedule
from pyspark_durable.wal.replay.state import NamespaceState, ReaderPosition
from pyspark_durable.wal.reserve import using_reserve
from pyspark_durable.wal.tables import NamespaceTables

log = logging.getLogger(__name__)

COMMITS_LOG = "commits"
DEFAULT_TABLE = "default"
ENTRY_MAX_BYTES = 900 * 1024  # below Kafka's default message.max.bytes (1 MiB)


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


class Namespace(NamespaceQueries, NamespaceReads, NamespaceTables):
    """One WAL namespace over a :class:`LogStore`; see the module docstring.

    Outside ``wal/``, ask it questions (:class:`NamespaceQueries`, ``steps``, ``tables``,
    ``table``, ``step_commit``, ``retention``); its replay state ``_state`` is its own.
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
        self._state = NamespaceState.recover(store, self._commits)
        self.snapshots = SnapshotSchedule(store)  # the committer's: every N records
        if self._state.namespace_id is None and not create:
            raise LogNotFound(f"namespace {self.name!r} in {store.location()} is empty: "
                              "nothing was ever committed to it")
        if namespace_id is None:
            namespace_id = self._state.namespace_id
        if self._state.namespace_id is None:
            incarnation = uuid.uuid4().hex
            # the first record carries the incarnation it starts as its tag, too
            self._append_meta({**NsRecord(self.name, namespace_id, incarnation).to_json(),
                               "i": incarnation})
            self.refresh()
            dedup = self._state.dedup  # a racing creator may have appended some already
            policies = [record for missing, record in (
                (dedup.window_ms is None, DedupRecord(DEDUP_WINDOW_MS, DEDUP_STEPS)),  # bounds
                (dedup.step_ms is None, ClocksRecord(CLOCK_STEP_MS)),  # clock rules (clocks.py)
                (dedup.max_one_offs is None, OneOffsRecord(DEDUP_ONE_OFFS)),  # one-off bound
            ) if missing]
            if policies:  # one append: one sync and one mark, however many
                self._append_metas([record.to_json() for record in policies])
                self.refresh()
        if self._state.namespace_id != namespace_id:
            raise ConfigError(
                f"namespace was created with id {self._state.namespace_id}, opened with "
                f"id {namespace_id}", namespace=self.name,
            )
        self.namespace_id = namespace_id

    # -- state ----------------------------------------------------------------

    def refresh(self) -> None:
        """Replay what any process appended to the commits log since we last looked.

        If a cleaner cleaned the log below where we are, the handle heals: it
        recovers again from the newest snapshot (rule 8 of the protocol). The replayed
        state stays inside the WAL; ask the handle's queries what it holds.
        """
        self._refreshed()

    def _refreshed(self) -> NamespaceState:
        """:meth:`refresh`, returning the replayed state (for the WAL's own code)."""
        with self._lock:
            try:
                self._state.replay(self._commits)
            except OffsetOutOfRange:
                log.info("namespace=%s: commits log cleaned below offset %d under this handle; "
                         "recovering from the newest snapshot", self.name, self._state.next_offset)
                self._state = NamespaceState.recover(self.store, self._commits)
            except IncarnationMismatch as exc:
                old = self._state.incarnation
                self.store.reset()  # cached log state describes the WAL that is gone
                self._commits = self.store.open_log(COMMITS_LOG, create=False)
                self._state = NamespaceState.recover(self.store, self._commits)
                raise IncarnationMismatch(
                    f"{exc.args[0].split(': ', 1)[-1]} (this handle knew incarnation {old}; the "
                    f"WAL now is incarnation {self._state.incarnation} with "
                    f"{self._state.next_step} steps; this handle follows it from now on)",
                    namespace=self.name) from exc
            return self._state

    @property
    def incarnation(self) -> str | None:
        """The id this namespace got when it was created (None: an older WAL without one)."""
        return self._state.incarnation

    def append_record(self, record: CommitRecord) -> int:
        """Append one record to the commits log; its offset. Replay decides what it
        means: :meth:`refresh` to see it (a cleaner records its ``clean`` record so)."""
        return self._append_meta(record.to_json())

    def exclusive(self) -> threading.RLock:
        """This handle's lock: hold it to refresh, decide and append as one unit."""
        return self._lock

    def _append_meta(self, record: dict) -> int:
        """Append one record's JSON, tagged with the incarnation it belongs to."""
        return self._append_metas([record])[0]

    def _append_metas(self, records: list[dict]) -> list[int]:
        """Append records' JSON in order as one append, each tagged with the incarnation."""
        tag = {} if self._state.incarnation is None else {"i": self._state.incarnation}
        copies = self.store.record_copies  # one append: the copies share its one sync
        offsets = self._commits.append(commit_entries(
            [encode_meta({**r, **tag}) for r in records], copies))
        return offsets[::copies]  # a record's offset is its original's

    # -- writing --------------------------------------------------------------

    def begin(self, writer_id: str, writer_step: int, attempt_id: str | None = None) -> Attempt:
        """Start a writer attempt for ``(writer_id, writer_step)``."""
        check_writer(writer_id, writer_step, self.name)
        return Attempt(self, writer_id, writer_step, attempt_id or uuid.uuid4().hex)

    def committed_step(self, writer_id: str, writer_step: int) -> int | None:
        """The step that committed ``(writer_id, writer_step)``, or None."""
        check_writer(writer_id, writer_step, self.name)
        return self._refreshed().dedup.committed(writer_id, writer_step)

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
                            build_runs(receipts), int(time.time() * 1000),
                            event_time=event_time_span([r.event_time for r in receipts]),
                            started_ms=started_ms)
        self._raise_if_refused(commit)  # cheap early answer; the replay below decides
        failpoints.reached("commit.checked", writer_step=writer_step)
        offset = self.append_record(commit)
        failpoints.reached("commit.appended")
        step = self.committed_step(writer_id, writer_step)
        if step is None:  # replay refused our record: too old to judge, or a bound before it
            self._raise_if_refused(commit)
            raise AttemptLost(  # pragma: no cover - only age or a bound refuse a new pair
                f"step record at commits offset {offset} was refused", namespace=self.name,
                writer=writer_id, writer_step=writer_step)
        self.snapshot_if_due()
        return step

    def snapshot_if_due(self) -> int | None:
        """After a commit: a snapshot of the state as of the log's end if
        ``SNAPSHOT_EVERY_RECORDS`` records came since the newest one (its version, or
        None), so an open replays a bounded tail even where no cleaner runs
        (:mod:`.snapshot_schedule`)."""
        with self._lock:
            if not self.snapshots.due(self._state):
                return None
            return self.healing(lambda _: self.snapshots.write_if_due(self._refreshed()))

    def note_writer_step(self, writer_id: str, writer_step: int) -> None:
        """Record that a consecutive writer finished ``writer_step`` without rows."""
        check_writer(writer_id, writer_step, self.name)
        last = self._refreshed().dedup.last(writer_id)
        if last is None or last < writer_step:
            self.check_consecutive(writer_id, writer_step)
            self.append_record(WriterRecord(writer_id, writer_step))
            self.snapshot_if_due()

    def check_consecutive(self, writer_id: str, writer_step: int) -> None:
        last = self._state.dedup.last(writer_id)
        if writer_step > 0 and (last is None or last < writer_step - 1):
            known = "none of its steps" if last is None else f"its steps up to {last}"
            raise IncarnationMismatch(
                f"writer step {writer_step} follows step {writer_step - 1}, but this WAL "
                f"(incarnation {self.incarnation}) knows {known}: the WAL was lost, recreated "
                "or restored from an older copy under the writer's checkpoint; start the "
                "writer from a new checkpoint to write into this WAL",
                namespace=self.name, writer=writer_id)

    def _raise_if_refused(self, commit: StepCommit) -> None:
        """The typed error for a record replay refuses (a duplicate is not refused here:
        the committer asked before, and returns the step replay found)."""
        too_old = self._state.dedup.too_old(commit.writer_id, commit.writer_step,
                                           commit.started_ms)
        own_ms, wal_ms = int(time.time() * 1000), self._state.dedup.clock_ms
        if too_old is not None and commit.started_ms is not None and \
                self._state.dedup.step_ms is not None and own_ms < wal_ms - CLOCK_STEP_MS:
            # refused because it began long ago by this host's clock, which is far behind
            # the WAL's: say so, not "too old" (under the clock rules one record moves the
            # WAL's clock at most CLOCK_STEP_MS, so it is most likely this clock)
            raise ClockSkew(
                f"this process's clock reads {iso(own_ms)}, {(wal_ms - own_ms) / 3_600_000:.1f}"
                f" h behind the WAL's clock {iso(wal_ms)} (its newest commit time); {too_old}. "
                "Nothing was committed: correct this host's clock (NTP) and write again; if "
                "this clock is right, records older than the WAL's clock rules pushed its "
                "clock ahead: start the writer at the WAL's clock (Namespace.one_off_start_ms)",
                own_ms=own_ms, wal_ms=wal_ms, namespace=self.name,
                writer=commit.writer_id, writer_step=commit.writer_step)
        if too_old is not None:
            raise WriterStepExpired(
                f"{too_old}: the WAL no longer knows whether it was committed, so it commits "
                "nothing; write the rows under a new writer id", namespace=self.name,
                writer=commit.writer_id, writer_step=commit.writer_step)
        run = self._state.lost_run(commit)
        if run is not None:
            raise AttemptLost(
                f"entries from offset {run.start} may have been cleaned (a cleaner recorded "
                f"bound {self._state.clean_bounds[run.region_id]} before the step committed); "
                "write the step again", namespace=self.name, region=run.region_id,
                writer=commit.writer_id, writer_step=commit.writer_step)

    # -- reading --------------------------------------------------------------

    def steps(self, refresh: bool = True) -> range:
        """Committed steps still readable: [first retained, next step).

        ``refresh=False``: as of this handle's last refresh, for a caller that just
        refreshed (on Kafka a refresh costs broker round trips).
        """
        s = self._refreshed() if refresh else self._state
        return range(s.expired_before, s.next_step)

    def step_commit(self, step: int) -> StepCommit:
        """A copy of a step's commit record (a committed step never changes: no refresh needed)."""
        check_step_arg("step", step, self.name)
        if step >= self._state.next_step or step < self._state.expired_before:
            self.refresh()

        def ask(s: NamespaceState) -> StepCommit:
            if step < s.expired_before:
                raise StepExpired(
                    f"step {step} was expired; available steps are "
                    f"[{s.expired_before}, {s.next_step})", namespace=self.name, step=step)
            if step >= s.next_step:
                raise StepNotCommitted(
                    f"step {step} is not committed yet; committed steps are "
                    f"[{s.expired_before}, {s.next_step})", namespace=self.name, step=step)
            return handed_out(s.step(step))

        return self.healing(ask)  # a healed state may have expired it meanwhile

    # -- retention ------------------------------------------------------------

    def expire(self, step: int) -> None:
        """Steps below ``step`` are no longer needed by step readers."""
        check_step_arg("expire step", step, self.name)
        s = self._refreshed()
        if step > s.next_step:
            raise StepNotCommitted(f"cannot expire up to {step}: only steps below "
                                   f"{s.next_step} are committed", namespace=self.name)
        self._freeing(lambda st: step > st.expired_before, ExpireRecord(step))

    def mark_deleted(self, table: int | str, sequence: int, region_id: int | None = None) -> None:
        """Entries of ``table`` in a region with sequence below ``sequence`` are not needed.

        Sequences count per (region, table): ``region_id`` may be left out only when
        the table's entries live in one region.
        """
        check_step_arg("sequence", sequence, self.name)
        info = self.table(table)
        regions = self._state.table_regions(info.table_id)
        if region_id is None:
            if len(regions) > 1:
                raise RoutingError(f"table has entries in regions {sorted(regions)}: name the "
                                   "region whose sequences are marked", namespace=self.name,
                                   table=info.name)
            region_id = next(iter(regions), 0)
        check_step_arg("region", region_id, self.name)
        key = (region_id, info.table_id)
        current = self._state.marks.get(key, 0)
        limit = self._state.next_sequences.get(key, 0)
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
        s = self._refreshed()
        if next_step > s.next_step:
            raise StepNotCommitted(f"reader {reader_id!r} cannot have read up to step {next_step}"
                                   f": committed steps end at {s.next_step}", namespace=self.name)
        if s.readers.get(reader_id) != ReaderPosition(next_step, hold):
            self.append_record(ReaderRecord(reader_id, next_step, hold))
            self.refresh()

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
            if needed(self._refreshed()):
                self.append_record(record)
                self.refresh()

        using_reserve(self.store, append)

    def set_dedup_window(self, window_ms: int, steps: int = DEDUP_STEPS) -> None:
        """Bound deduplication from here on (:mod:`.dedup`): one-off writers are remembered
        ``window_ms``, every writer's newest ``steps`` writer steps; no-op if unchanged."""
        for name, value in (("dedup window", window_ms), ("dedup steps", steps)):
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"{name} {value!r} is not an integer > 0", namespace=self.name)
        d = self._refreshed().dedup
        if (d.window_ms, d.steps) != (window_ms, steps):
            self.append_record(DedupRecord(window_ms, steps))
            self.refresh()

    def retention(self) -> RetentionPolicy:
        return RetentionPolicy.from_json(self._refreshed().retention)

    def close(self) -> None:
        self.store.close()
