"""The namespace state rebuilt by replaying the commits log: recovery from a snapshot,
replay of the records after it, and one handler per record kind.

Replay is a pure function of the records in log order: whether a ``step`` record
becomes a step depends only on records before it (the pairs committed so far and
the clean bounds recorded so far), so every process, whatever snapshot it started
from, numbers the same steps. That is why a snapshot
(:mod:`~pyspark_durable.wal.replay.stored_state`) holds the state exactly as of its
offset (the clean bounds and the remembered pairs included), and the step index
records which step records in its chunks' ranges replay refused.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from pyspark_durable.errors import (
    CorruptEntryError,
    DecodeError,
    IncarnationMismatch,
    NewerVersion,
    OffsetOutOfRange,
)
from pyspark_durable.log import Log, LogStore
from pyspark_durable.wal.format.commit_record import RECORD_KINDS, CommitRecord
from pyspark_durable.wal.format.records import (
    CleanRecord,
    ClocksRecord,
    DedupRecord,
    ExpireRecord,
    LostRecord,
    MarkRecord,
    NsRecord,
    OneOffsRecord,
    ReaderRecord,
    RetentionRecord,
    Run,
    StepCommit,
    WriterRecord,
    decode_record,
)
from pyspark_durable.wal.format.snapshot_file import SNAPSHOT_NAME
from pyspark_durable.wal.format.table_records import SchemaRecord, TableRecord, TablesRecord
from pyspark_durable.wal.replay.copies import CommitsReader
from pyspark_durable.wal.replay.step_index import chunk_loader
from pyspark_durable.wal.replay.stored_state import ReaderPosition, StoredState

log = logging.getLogger(__name__)

RECOVER_ATTEMPTS = 8  # snapshot then replay, retried while cleaners race ahead of us


class NamespaceState(StoredState):
    """The namespace state, rebuilt from a snapshot and the commits log after it (what
    it holds and how it is stored is :class:`~.stored_state.StoredState`'s)."""

    # -- replay -----------------------------------------------------------------

    @classmethod
    def recover(cls, store: LogStore, commits: Log) -> NamespaceState:
        """The newest snapshot plus a replay of the log after it.

        A cleaner in another process may write a newer snapshot and clean the log
        between our reading the snapshot and the log; then we start over. Cleaners
        write a snapshot before they clean the log below it, so a retry finds one.
        """
        damage: list[str] = []
        for _ in range(RECOVER_ATTEMPTS):
            damage.clear()
            versions = store.snapshot_versions(SNAPSHOT_NAME)
            for version in reversed([None, *versions]):  # newest first; None: no snapshot
                state = cls._from_stored(store, version, damage)
                if state is None:
                    continue  # damaged or pruned meanwhile: the one before is a copy
                try:
                    state.replay(commits)
                except OffsetOutOfRange:
                    if version is None or version == versions[-1]:
                        break  # a newer snapshot may have appended meanwhile: start over
                    continue
                for problem in damage:
                    log.warning("namespace=%s: %s; recovered from snapshot version %s",
                                store.namespace, problem, version)
                state.attach(commits)
                return state
        low = commits.low_watermark()
        raise CorruptEntryError(
            f"no snapshot can be replayed: the commits log starts at {low}"
            + (f"; {'; '.join(damage)}" if damage else
               f" and the newest snapshot describes offset {state.next_offset}"),
            namespace=store.namespace, log="commits")

    @classmethod
    def _from_stored(cls, store: LogStore, version: int | None,
                     damage: list[str]) -> NamespaceState | None:
        if version is None:
            return cls(store.namespace)
        raw = store.read_snapshot_version(SNAPSHOT_NAME, version)
        if raw is None:
            return None
        try:
            return cls.from_snapshot(store.namespace, raw, version)
        except NewerVersion:
            raise  # a newer release's state: an older copy would drop what it recorded
        except DecodeError as exc:
            damage.append(str(exc))
            return None

    def attach(self, commits: Log) -> None:
        """Read the steps the snapshot's chunks cover from ``commits`` when asked."""
        def decode(value: bytes, offset: int) -> CommitRecord:
            return decode_record(value, namespace=self.namespace, offset=offset)[0]
        read = commits.read  # the read of the log as attached, as each chunk load uses it
        self.index.attach(chunk_loader(
            lambda start, end: CommitsReader(commits, start, end, read=read),
            decode, self.namespace))

    def replay(self, commits: Log, through: int | None = None) -> None:
        """Apply the records after ``next_offset``; OffsetOutOfRange if they were cleaned.

        With ``through``, an acknowledged end (this handle's own append's), only the
        records below it, read on from where this replay stopped
        (:meth:`~pyspark_durable.log.base.Log.read_following`: no bounds asked).

        Every record names the incarnation it was written in: a log that went back, or
        holds another incarnation's records, is :class:`IncarnationMismatch`.
        """
        try:
            # one bounds check (on Kafka: broker round trips), not one here and one in read
            records = CommitsReader(commits, self.next_offset) if through is None else \
                CommitsReader(commits, self.next_offset, through, read=commits.read_following)
        except OffsetOutOfRange:
            high = commits.high_watermark()
            if high < self.next_offset:
                raise IncarnationMismatch(
                    f"the commits log ends at offset {high}, but this handle already read up "
                    f"to {self.next_offset}: the WAL was lost, recreated or restored from an "
                    "older copy", namespace=self.namespace, log="commits") from None
            raise
        for offset, entry in records:
            record, tag = decode_record(entry.value, namespace=self.namespace, offset=offset)
            # processes creating a namespace at once each append an `ns` record with
            # their own id; the first one wins and the others are ignored, not damage
            if tag is not None and self.incarnation is not None and tag != self.incarnation \
                    and not isinstance(record, NsRecord):
                raise IncarnationMismatch(
                    f"record at offset {offset} belongs to incarnation {tag}, this "
                    f"handle knows incarnation {self.incarnation}: the WAL was recreated",
                    namespace=self.namespace, log="commits", offset=offset)
            self.apply(record, offset)
            self.next_offset = records.position
            self.replayed += 1
        self.next_offset = records.position  # past a last record's copy, skipped unread

    def replay_own(self, value: bytes, offset: int, end: int) -> bool:
        """Apply the record this handle itself appended at ``offset`` (its entries, copies
        included, end at ``end``), as :meth:`replay` would, if the replay stands right
        before it: nothing appended between can change what it means, so the log need
        not be read back (on S3 a LIST, on Kafka a fetch). False if it does not stand
        there: then a replay must read the log."""
        if self.next_offset != offset:
            return False
        record, _ = decode_record(value, namespace=self.namespace, offset=offset)
        self.apply(record, offset)
        self.next_offset = end
        self.replayed += 1
        return True

    def apply(self, record: CommitRecord, offset: int) -> None:
        """Apply one decoded record, read at commits-log ``offset``, by its kind."""
        _APPLY[type(record)](self, record, offset)

    def _apply_ns(self, r: NsRecord, offset: int) -> None:
        if self.namespace_id is None:  # the first one wins
            self.namespace_id = r.namespace_id
            self.incarnation = r.incarnation  # (None: made by a version without them)

    def _apply_table(self, r: TableRecord, offset: int) -> None:
        if r.table_id not in self.tables:  # the first definition wins
            self.tables[r.table_id] = r.info()

    def _apply_schema(self, r: SchemaRecord, offset: int) -> None:
        info = self.tables.get(r.table_id)
        if info is not None and r.version == len(info.schemas):  # the first version v wins
            self.tables[r.table_id] = info.with_version(r.schema)

    def _apply_tables(self, r: TablesRecord, offset: int) -> None:
        # several definitions in one record: each as its own `table`/`schema` record
        # would be, in order, so the first definition of an id still wins
        for each in r.records():
            self.apply(each, offset)

    def _apply_step(self, commit: StepCommit, offset: int) -> None:
        self.dedup.tick_step(commit.timestamp_ms)
        if self.refusal(commit) is not None:
            # a duplicate commit of a pair is never a second step, nor is one too old to
            # judge (dedup.py); a run below a bound a cleaner recorded first may be gone.
            # The index remembers the refusal: a step read back later is numbered as now.
            self.index.note_refused(offset)
            return
        commit.step, commit.commit_offset = self.next_step, offset
        for run in commit.runs:  # sequences count per (region, table), in run order
            first = self.next_sequences.get(run.key, 0)
            commit.first_sequences.setdefault(run.key, first)
            self.next_sequences[run.key] = first + run.entries
        self.index.append(commit)
        self.dedup.accept(commit.writer_id, commit.writer_step, self.next_step, commit.started_ms)
        self.next_step += 1

    def refusal(self, commit: StepCommit) -> str | None:
        """Why replay would not make ``commit`` a step now (None: it would)."""
        done = self.dedup.committed(commit.writer_id, commit.writer_step)
        if done is not None:
            return f"a duplicate of step {done}"
        too_old = self.dedup.too_old(commit.writer_id, commit.writer_step, commit.started_ms)
        if too_old is not None:
            return too_old
        run = self.lost_run(commit)
        if run is not None:
            return f"its run from region {run.region_id} offset {run.start} may be cleaned"
        return None

    def _apply_writer(self, r: WriterRecord, offset: int) -> None:
        self.dedup.note(r.writer_id, r.writer_step)

    def _apply_dedup(self, r: DedupRecord, offset: int) -> None:
        self.dedup.set_policy(r.window_ms, r.steps)

    def _apply_clocks(self, r: ClocksRecord, offset: int) -> None:
        self.dedup.set_clock_rules(r.step_ms)

    def _apply_oneoffs(self, r: OneOffsRecord, offset: int) -> None:
        self.dedup.set_one_offs(r.writers)

    def _apply_expire(self, r: ExpireRecord, offset: int) -> None:
        self.expired_before = max(self.expired_before, r.before)

    def _apply_mark(self, r: MarkRecord, offset: int) -> None:
        if r.region_id is not None:
            keys = [(r.region_id, r.table_id)]
        else:  # written when a table lived in one region: its (region, table) pairs
            keys = [k for k in self.next_sequences if k[1] == r.table_id]
        for key in keys:
            self.marks[key] = max(self.marks.get(key, 0), r.sequence)

    def _apply_clean(self, r: CleanRecord, offset: int) -> None:
        self.bounds_unrecorded = False  # a pass records a bound for every region it cleans
        for region_id, bound in r.bounds.items():
            self.clean_bounds[region_id] = max(self.clean_bounds.get(region_id, 0), bound)
        # the newest pass in log order, not the largest time: one pass from a host ahead
        # must not hold every writer's schedule for days (a schedule, never a step's fate)
        self.last_clean_ms = r.timestamp_ms
        self.dedup.tick_clean(r.timestamp_ms)

    def _apply_reader(self, r: ReaderRecord, offset: int) -> None:
        if r.drop:
            self.readers.pop(r.reader_id, None)
        else:
            self.readers[r.reader_id] = ReaderPosition(r.next_step, r.hold)

    def _apply_retention(self, r: RetentionRecord, offset: int) -> None:
        self.retention = dict(r.policy)

    def _apply_lost(self, r: LostRecord, offset: int) -> None:
        self.lost.setdefault(r.step, r.why)  # the first record of a step wins

    def lost_run(self, commit: StepCommit) -> Run | None:
        """A run of ``commit`` starting below its region's clean bound, if any."""
        for run in commit.runs:
            if run.start < self.clean_bounds.get(run.region_id, 0):
                return run
        return None

    def step(self, step: int) -> StepCommit:
        """An indexed step (read back from the commits log if a snapshot covers it)."""
        if step < self.base_step:
            raise OffsetOutOfRange(f"step {step} is no longer indexed (first is {self.base_step})",
                                   namespace=self.namespace, step=step)
        commit = self.index[step - self.base_step]
        if commit.step != step:
            raise CorruptEntryError(f"the step index holds step {commit.step} where step {step} "
                                    "belongs", namespace=self.namespace, log="commits",
                                    offset=commit.commit_offset)
        return commit

    def first_step_committed_at(self, timestamp_ms: int) -> int:
        """The first step whose running maximum of commit times reaches ``timestamp_ms``."""
        return max(self.base_step, self.index.first_committed_at(timestamp_ms))

    def regions(self) -> list[int]:
        """Regions that hold committed entries (sequences never go back, nor does this)."""
        return sorted({r for r, _ in self.next_sequences})

    def table_regions(self, table_id: int) -> dict[int, int]:
        """Region -> next sequence number, for the regions holding entries of a table."""
        return {r: n for (r, t), n in sorted(self.next_sequences.items()) if t == table_id}

# one handler per record kind (records.RECORD_KINDS): replay dispatches on the class
_APPLY: dict[type, Callable[[NamespaceState, Any, int], None]] = {
    NsRecord: NamespaceState._apply_ns,
    TableRecord: NamespaceState._apply_table,
    SchemaRecord: NamespaceState._apply_schema,
    TablesRecord: NamespaceState._apply_tables,
    StepCommit: NamespaceState._apply_step,
    WriterRecord: NamespaceState._apply_writer,
    DedupRecord: NamespaceState._apply_dedup,
    ClocksRecord: NamespaceState._apply_clocks,
    OneOffsRecord: NamespaceState._apply_oneoffs,
    ExpireRecord: NamespaceState._apply_expire,
    MarkRecord: NamespaceState._apply_mark,
    CleanRecord: NamespaceState._apply_clean,
    ReaderRecord: NamespaceState._apply_reader,
    RetentionRecord: NamespaceState._apply_retention,
    LostRecord: NamespaceState._apply_lost,
}
assert set(_APPLY) == set(RECORD_KINDS.values()), "a record kind without a replay handler"
