"""The namespace state rebuilt by replaying the commits log, and its snapshots.

Per (region, table) it holds HoraeDB's table metadata inside a region:
``next_sequence_num``, ``latest_marked_deleted`` and (through the step index) the
sequence -> offset mapping; per table its schema versions; per namespace the step
index, the committed (writer, writer_step) pairs, the expiry point, the clean bound
of every region, reader positions and the retention policy. A snapshot is this state
*as of a commits-log offset* (the log's end when the cleaner wrote it), so recovery is:
load the newest snapshot, replay the commits log from that offset. The steps a
snapshot covers are not in it: it holds their :class:`~.step_index.Chunk` s, and a step
is read back from the commits log when someone asks for it, so opening costs what the
snapshot holds, not what was ever committed.

Replay is a pure function of the records in log order: whether a ``step`` record
becomes a step depends only on records before it (the pairs committed so far and
the clean bounds recorded so far), so every process, whatever snapshot it started
from, numbers the same steps. That is why a snapshot holds the state exactly as of
its offset (the clean bounds and the remembered pairs included), and the step index
records which step records in its chunks' ranges replay refused.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from pyspark_durable.errors import (
    CorruptEntryError,
    DecodeError,
    IncarnationMismatch,
    NewerVersion,
    OffsetOutOfRange,
)
from pyspark_durable.log import Log, LogStore
from pyspark_durable.wal.format.columns import decode_block, encode_blocks
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
from pyspark_durable.wal.format.snapshot_file import SNAPSHOT_NAME, open_snapshot, seal_snapshot
from pyspark_durable.wal.format.table_records import (
    SchemaRecord,
    TableInfo,
    TableRecord,
    TablesRecord,
)
from pyspark_durable.wal.replay.chunk_table import CHUNK_SCHEMA, ChunkList
from pyspark_durable.wal.replay.copies import CommitsReader
from pyspark_durable.wal.replay.dedup import Dedup
from pyspark_durable.wal.replay.oneoff_block import ONE_OFF_SCHEMA
from pyspark_durable.wal.replay.step_index import Chunk, StepIndex, chunk_loader

log = logging.getLogger(__name__)

# 4: as of the log's end, with the step index's chunks; 5: the chunks and the one-off
# writers as Arrow columns after the JSON document (an open makes no object per row);
# 6: 5 whose chunks may cover commits records written with copies, written where the
# store writes them, so a release that would count the copies as steps refuses it by name
SNAPSHOT_VERSION = 6
SNAPSHOT_VERSION_WITHOUT_COPIES = 5
RECOVER_ATTEMPTS = 8  # snapshot then replay, retried while cleaners race ahead of us


@dataclass(frozen=True, slots=True)
class ReaderPosition:
    """A registered reader: the next step it needs, and whether it holds retention."""

    next_step: int
    hold: bool


@dataclass
class NamespaceState:
    namespace: str
    namespace_id: int | None = None
    tables: dict[int, TableInfo] = field(default_factory=dict)
    index: StepIndex = field(default_factory=lambda: StepIndex(0))  # steps base_step ..
    next_step: int = 0
    expired_before: int = 0
    dedup: Dedup = field(default_factory=Dedup)  # the (writer, writer_step) pairs remembered
    # (region, table) -> next sequence number / latest marked deleted
    next_sequences: dict[tuple[int, int], int] = field(default_factory=dict)
    marks: dict[tuple[int, int], int] = field(default_factory=dict)
    next_offset: int = 0  # where replay of the commits log continues
    snapshot_offset: int = 0  # the commits-log offset the loaded snapshot describes
    keep_from: int = 0  # the loaded snapshot's: its steps are read back from here on
    clean_bounds: dict[int, int] = field(default_factory=dict)  # region -> bound, newest
    last_clean_ms: int = 0
    readers: dict[str, ReaderPosition] = field(default_factory=dict)
    retention: dict[str, Any] = field(default_factory=dict)
    lost: dict[int, str] = field(default_factory=dict)  # step -> why, recorded by repair
    incarnation: str | None = None  # made when the namespace is created
    # recovered from a format 1 snapshot: that release cleaned regions without recording
    # bounds (no `clean` records existed), until the next cleaner pass records them
    bounds_unrecorded: bool = False
    replayed: int = 0  # records applied since this state was loaded (an open's tail, then refreshes)

    @property
    def pairs(self) -> dict[tuple[str, int], int]:
        """The remembered (writer, writer_step) pairs and their steps (a copy)."""
        return {(w, ws): step for w, state in self.dedup.writers.items()
                for ws, step in state.pairs.items()}

    @property
    def writer_last(self) -> dict[str, int]:
        """Each remembered writer's highest writer step (a copy)."""
        return {w: state.last for w, state in self.dedup.writers.items() if state.last >= 0}

    @property
    def base_step(self) -> int:
        """The first step still indexed (readable); steps below it are not needed."""
        return self.index.base

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

    def replay(self, commits: Log) -> None:
        """Apply the records after ``next_offset``; OffsetOutOfRange if they were cleaned.

        Every record names the incarnation it was written in: a log that went back, or
        holds another incarnation's records, is :class:`IncarnationMismatch`.
        """
        try:
            # one bounds check (on Kafka: broker round trips), not one here and one in read
            records = CommitsReader(commits, self.next_offset)
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

    # -- retention ----------------------------------------------------------------

    def needed(self, commit: StepCommit) -> bool:
        """A step's entries are needed while the step is retained or a table claims them."""
        if commit.step >= self.expired_before:
            return True
        for key, first in commit.first_sequences.items():
            mark = self.marks.get(key)
            if mark is None:
                continue  # a (region, table) never marked holds no claim of its own
            last = first + sum(r.entries for r in commit.runs if r.key == key)
            if last > mark:
                return True
        return False

    def needed_starts(self) -> dict[int, int]:
        """Per region, the first offset a needed step refers to (or a little below)."""
        return self.index.needed_starts(self.needed, self.expired_before, self.marks)

    def first_needed_step(self) -> int:
        """The first step still needed (``next_step`` if none)."""
        return self.index.first_needed_step(self.needed, self.expired_before, self.marks)

    def first_step_committed_at(self, timestamp_ms: int) -> int:
        """The first step whose running maximum of commit times reaches ``timestamp_ms``."""
        return max(self.base_step, self.index.first_committed_at(timestamp_ms))

    def regions(self) -> list[int]:
        """Regions that hold committed entries (sequences never go back, nor does this)."""
        return sorted({r for r, _ in self.next_sequences})

    def table_regions(self, table_id: int) -> dict[int, int]:
        """Region -> next sequence number, for the regions holding entries of a table."""
        return {r: n for (r, t), n in sorted(self.next_sequences.items()) if t == table_id}

    # -- snapshots --------------------------------------------------------------

    def snapshot(self, first_needed: int | None = None, *,
                 record_copies: int = 1) -> tuple[int, bytes]:
        """Fold the steps still needed into chunks; encode the state as of ``next_offset``
        (in format 6 when the store writes ``record_copies`` > 1 of each record, else 5).

        Steps before the first needed one leave the index (no snapshot needs them
        again; ``first_needed``: that step, if the caller just asked for it). The state
        is exact as of the log's end, so a replay after it decides every record as a
        replay of the whole log does.
        """
        self.index.fold(self.first_needed_step() if first_needed is None else first_needed)
        at = self.next_offset
        chunks = self.index.chunks
        dedup, one_offs = self.dedup.encode()
        index = chunks.table()
        blocks, where = encode_blocks({"one_offs": one_offs, "index": index})
        doc = {
            "v": SNAPSHOT_VERSION if record_copies > 1 else SNAPSHOT_VERSION_WITHOUT_COPIES,
            "namespace_id": self.namespace_id, "at": at,
            "incarnation": self.incarnation,
            "next_step": self.next_step, "expired_before": self.expired_before,
            "tables": [t.snapshot_json() for t in self.tables.values()],
            "next_sequences": [[r, t, n] for (r, t), n in self.next_sequences.items()],
            "marks": [[r, t, n] for (r, t), n in self.marks.items()],
            "dedup": dedup,
            "bounds": {str(k): v for k, v in self.clean_bounds.items()},
            "last_clean_ms": self.last_clean_ms,
            "readers": {r: [p.next_step, p.hold] for r, p in self.readers.items()},
            "retention": self.retention,
            # recorded losses of steps still indexed (an expired one is gone anyway)
            "lost": {str(s): why for s, why in self.lost.items() if s >= self.index.base},
            # the steps it covers (the `index` block), read back from the commits log
            # from keep_from on
            "blocks": where,
            "refused": list(self.index.refused),  # refused after the last chunk
            "first_step": self.index.base,  # the first indexed step, inside the first chunk
            "keep_from": chunks[0].start if chunks else at,
        }
        self.index.rebase(index)
        self.snapshot_offset = at
        return at, seal_snapshot(json.dumps(doc, separators=(",", ":")).encode(), blocks)

    @staticmethod
    def snapshot_keep_from(namespace: str, raw: bytes, version: int) -> int:
        """The commits offset from which a stored snapshot's steps are read back."""
        try:
            doc = json.loads(open_snapshot(raw, namespace, version)[0])
            return int(doc.get("keep_from", doc["at"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise DecodeError(f"snapshot is unreadable: {exc!r}", namespace=namespace,
                              snapshot=SNAPSHOT_NAME, version=version) from exc

    @classmethod
    def from_snapshot(cls, namespace: str, raw: bytes, version: int | None = None) -> NamespaceState:
        """Decode a snapshot; damage is a :class:`CorruptEntryError` naming its version.

        Formats 5 and 6 load alike (the chunk reader knows a copy by its key). Every
        older format loads: 4 (chunks and writers in the JSON document); 3 (as of
        the first needed step, without chunks), whose replay rebuilds the steps it did not
        cover, as before; 2 and 1 upgraded to 3. A newer one is :class:`NewerVersion`
        naming both formats.
        """
        payload, blocks = open_snapshot(raw, namespace, version)
        try:
            doc = json.loads(payload)
            found = doc.get("v")
            if isinstance(found, int) and found > SNAPSHOT_VERSION:
                raise NewerVersion("snapshot format", found, SNAPSHOT_VERSION,
                                   namespace=namespace, snapshot=SNAPSHOT_NAME, version=version)
            if found == 1:
                doc = _upgrade_v1(doc)
            if doc.get("v") == 2:
                doc = _upgrade_v2(doc)
            if doc.get("v") not in (3, 4, 5, SNAPSHOT_VERSION):
                raise DecodeError(f"snapshot format: expected {SNAPSHOT_VERSION}, "
                                  f"given {doc.get('v')}", namespace=namespace,
                                  snapshot=SNAPSHOT_NAME, version=version)
            state = cls(namespace, namespace_id=doc["namespace_id"],
                        incarnation=doc.get("incarnation"))  # none before commit 5f93c14
            state.tables = {t["id"]: TableInfo.from_json(t) for t in doc["tables"]}
            state.next_step = doc["next_step"]
            one_offs, chunks = _blocks(doc, blocks)
            if chunks and chunks.next_step(len(chunks) - 1) != state.next_step:
                raise ValueError(f"its step index ends at step "
                                 f"{chunks.next_step(len(chunks) - 1)}, its next step is "
                                 f"{state.next_step}")
            first = doc.get("first_step", chunks.first_step(0) if chunks else state.next_step)
            state.index = StepIndex(first if chunks else state.next_step, chunks,
                                    refused=doc.get("refused", ()))
            state.expired_before = doc["expired_before"]
            state.next_sequences = {(r, t): n for r, t, n in doc["next_sequences"]}
            state.marks = {(r, t): n for r, t, n in doc["marks"]}
            state.dedup = Dedup.from_json(doc["dedup"], one_offs) if "dedup" in doc else \
                Dedup.from_pairs(doc["pairs"], doc.get("writer_last", {}))
            state.next_offset = state.snapshot_offset = doc["at"]
            state.keep_from = int(doc.get("keep_from", doc["at"]))
            state.clean_bounds = {int(k): v for k, v in doc["bounds"].items()}
            state.last_clean_ms = doc["last_clean_ms"]
            state.readers = {r: ReaderPosition(n, bool(h)) for r, (n, h) in doc["readers"].items()}
            state.retention = dict(doc["retention"])
            state.lost = {int(s): str(why) for s, why in doc.get("lost", {}).items()}
            state.bounds_unrecorded = found == 1
            return state
        except (ValueError, KeyError, TypeError) as exc:
            raise DecodeError(f"snapshot is unreadable: {exc!r}", namespace=namespace,
                              snapshot=SNAPSHOT_NAME, version=version) from exc


def _blocks(doc: dict[str, Any], blocks: bytes) -> tuple[pa.Table | None, ChunkList]:
    """A snapshot's one-off writers and step-index chunks: Arrow blocks from format 5 on,
    JSON lists in the document before."""
    if doc["v"] < 5:
        return None, ChunkList(extra=[Chunk.from_json(c) for c in doc.get("index", [])])
    where = doc["blocks"]
    return (decode_block(blocks, where, "one_offs", ONE_OFF_SCHEMA),
            ChunkList(decode_block(blocks, where, "index", CHUNK_SCHEMA)))


def _upgrade_v1(doc: dict[str, Any]) -> dict[str, Any]:
    """A version 1 snapshot (before commit ee5e358: no clean bounds, readers or retention
    policy existed yet) as version 2."""
    return {**doc, "v": 2, "bounds": {}, "last_clean_ms": 0, "readers": {}, "retention": {}}


def _upgrade_v2(doc: dict[str, Any]) -> dict[str, Any]:
    """A version 2 snapshot (a table lived in one region) as version 3."""
    home = {t["id"]: t["region"] for t in doc["tables"]}
    return {**doc, "v": 3,
            "next_sequences": [[home[int(t)], int(t), n] for t, n in doc["next_sequences"].items()],
            "marks": [[home[int(t)], int(t), n] for t, n in doc["marks"].items()]}


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
