"""The namespace state rebuilt by replaying the commits log, and its snapshots.

Per (region, table) it holds HoraeDB's table metadata inside a region:
``next_sequence_num``, ``latest_marked_deleted`` and (through the step index) the
sequence -> offset mapping; per table its schema versions; per namespace the step
index, the committed (writer, writer_step) pairs, the expiry point, the clean bound
of every region, reader positions and the retention policy. A snapshot is this state
*as of a commits-log offset*, so recovery is: load the newest snapshot, replay the
commits log from that offset.

Replay is a pure function of the records in log order: whether a ``step`` record
becomes a step depends only on records before it (the pairs committed so far and
the clean bounds recorded so far), so every process, whatever snapshot it started
from, numbers the same steps. That is why a snapshot keeps the clean bounds *as of
its offset*, not the newest ones.
"""

from __future__ import annotations

import bisect
import json
import logging
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pyspark_durable.errors import (
    CorruptEntryError,
    DecodeError,
    IncarnationMismatch,
    OffsetOutOfRange,
)
from pyspark_durable.log import Log, LogStore
from pyspark_durable.wal.records import (
    RECORD_KINDS,
    CleanRecord,
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
    TablesRecord,
    WriterRecord,
    decode_record,
)

log = logging.getLogger(__name__)

SNAPSHOT_NAME = "wal"
SNAPSHOT_VERSION = 3  # 3: sequences per (region, table), schema versions
SNAPSHOT_HEAD = struct.Struct(">4sII")  # magic | crc32 of the payload | payload length
SNAPSHOT_MAGIC = b"DWS2"


def seal_snapshot(payload: bytes) -> bytes:
    """A snapshot as stored: a header with the payload's CRC and length, then the payload."""
    return SNAPSHOT_HEAD.pack(SNAPSHOT_MAGIC, zlib.crc32(payload), len(payload)) + payload


def open_snapshot(raw: bytes, namespace: str, version: int | None) -> bytes:
    """The payload of a stored snapshot, checked; every byte is covered by the CRC."""
    where = {"namespace": namespace, "snapshot": SNAPSHOT_NAME, "version": version}
    if len(raw) < SNAPSHOT_HEAD.size:
        raise CorruptEntryError(f"snapshot is {len(raw)} bytes, shorter than its header",
                                **where)
    magic, crc, length = SNAPSHOT_HEAD.unpack_from(raw)
    payload = raw[SNAPSHOT_HEAD.size:]
    if magic != SNAPSHOT_MAGIC:
        raise CorruptEntryError(f"snapshot starts with {magic!r}, expected {SNAPSHOT_MAGIC!r} "
                                "(bytes 0-3)", **where)
    if length != len(payload):
        raise CorruptEntryError(f"snapshot header says {length} payload bytes, the snapshot "
                                f"holds {len(payload)} (bytes 8-11; truncated or damaged)",
                                **where)
    if zlib.crc32(payload) != crc:
        raise CorruptEntryError(f"snapshot payload fails its CRC (stored {crc:08x}, computed "
                                f"{zlib.crc32(payload):08x}; bytes 4-7 or 12-{len(raw) - 1})",
                                **where)
    return payload
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
    index: list[StepCommit] = field(default_factory=list)  # steps base_step .. next_step-1
    base_step: int = 0
    next_step: int = 0
    expired_before: int = 0
    pairs: dict[tuple[str, int], int] = field(default_factory=dict)
    # (region, table) -> next sequence number / latest marked deleted
    next_sequences: dict[tuple[int, int], int] = field(default_factory=dict)
    marks: dict[tuple[int, int], int] = field(default_factory=dict)
    next_offset: int = 0  # where replay of the commits log continues
    snapshot_offset: int = 0  # the commits-log offset the loaded snapshot describes
    clean_bounds: dict[int, int] = field(default_factory=dict)  # region -> bound, newest
    base_bounds: dict[int, int] = field(default_factory=dict)  # as of snapshot_offset
    bound_history: list[tuple[int, dict[int, int]]] = field(default_factory=list)
    last_clean_ms: int = 0
    readers: dict[str, ReaderPosition] = field(default_factory=dict)
    retention: dict[str, Any] = field(default_factory=dict)
    incarnation: str | None = None  # made when the namespace is created
    writer_last: dict[str, int] = field(default_factory=dict)  # newest writer step seen

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
        except DecodeError as exc:
            damage.append(str(exc))
            return None

    def replay(self, commits: Log) -> None:
        """Apply the records after ``next_offset``; OffsetOutOfRange if they were cleaned.

        Every record names the incarnation it was written in: a log that went back, or
        holds another incarnation's records, is :class:`IncarnationMismatch`.
        """
        try:
            # one bounds check (on Kafka: broker round trips), not one here and one in read
            entries = commits.read(self.next_offset)
        except OffsetOutOfRange:
            high = commits.high_watermark()
            if high < self.next_offset:
                raise IncarnationMismatch(
                    f"the commits log ends at offset {high}, but this handle already read up "
                    f"to {self.next_offset}: the WAL was lost, recreated or restored from an "
                    "older copy", namespace=self.namespace, log="commits") from None
            raise
        for entry in entries:
            record, tag = decode_record(entry.value, namespace=self.namespace,
                                        offset=entry.offset)
            # processes creating a namespace at once each append an `ns` record with
            # their own id; the first one wins and the others are ignored, not damage
            if tag is not None and self.incarnation is not None and tag != self.incarnation \
                    and not isinstance(record, NsRecord):
                raise IncarnationMismatch(
                    f"record at offset {entry.offset} belongs to incarnation {tag}, this "
                    f"handle knows incarnation {self.incarnation}: the WAL was recreated",
                    namespace=self.namespace, log="commits", offset=entry.offset)
            self.apply(record, entry.offset)
            self.next_offset = entry.offset + 1

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
        pair = (commit.writer_id, commit.writer_step)
        if pair in self.pairs:
            return  # a duplicate commit of a pair: never a second step
        if self.lost_run(commit) is not None:
            return  # a cleaner recorded its bound first: the entries may be gone
        commit.step, commit.commit_offset = self.next_step, offset
        for run in commit.runs:  # sequences count per (region, table), in run order
            first = self.next_sequences.get(run.key, 0)
            commit.first_sequences.setdefault(run.key, first)
            self.next_sequences[run.key] = first + run.entries
        self.index.append(commit)
        self.pairs[pair] = self.next_step
        self.note_writer(commit.writer_id, commit.writer_step)
        self.next_step += 1

    def _apply_writer(self, r: WriterRecord, offset: int) -> None:
        self.note_writer(r.writer_id, r.writer_step)

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
        for region_id, bound in r.bounds.items():
            self.clean_bounds[region_id] = max(self.clean_bounds.get(region_id, 0), bound)
        if r.bounds:
            self.bound_history.append((offset, dict(r.bounds)))
        self.last_clean_ms = max(self.last_clean_ms, r.timestamp_ms)

    def _apply_reader(self, r: ReaderRecord, offset: int) -> None:
        if r.drop:
            self.readers.pop(r.reader_id, None)
        else:
            self.readers[r.reader_id] = ReaderPosition(r.next_step, r.hold)

    def _apply_retention(self, r: RetentionRecord, offset: int) -> None:
        self.retention = dict(r.policy)

    def note_writer(self, writer_id: str, writer_step: int) -> None:
        self.writer_last[writer_id] = max(self.writer_last.get(writer_id, -1), writer_step)

    def lost_run(self, commit: StepCommit) -> Run | None:
        """A run of ``commit`` starting below its region's clean bound, if any."""
        for run in commit.runs:
            if run.start < self.clean_bounds.get(run.region_id, 0):
                return run
        return None

    def step(self, step: int) -> StepCommit:
        if step < self.base_step:
            raise OffsetOutOfRange(f"step {step} is no longer indexed (first is {self.base_step})",
                                   namespace=self.namespace, step=step)
        commit = self.index[step - self.base_step]
        assert commit.step == step, (commit.step, step)
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
        """Per region, the first offset a needed step refers to."""
        starts: dict[int, int] = {}
        for commit in self.index:
            if self.needed(commit):
                for run in commit.runs:
                    starts[run.region_id] = min(starts.get(run.region_id, run.start), run.start)
        return starts

    def bounds_at(self, offset: int) -> dict[int, int]:
        """The clean bounds as replay knew them just before commits-log ``offset``."""
        bounds = dict(self.base_bounds)
        for at, recorded in self.bound_history:
            if at >= offset:
                break
            for region_id, bound in recorded.items():
                bounds[region_id] = max(bounds.get(region_id, 0), bound)
        return bounds

    def first_needed_position(self) -> int:
        """Index position of the first step still needed (len(index) if none)."""
        for i, commit in enumerate(self.index):
            if self.needed(commit):
                return i
        return len(self.index)

    def regions(self) -> list[int]:
        """Regions that hold committed entries (sequences never go back, nor does this)."""
        return sorted({r for r, _ in self.next_sequences})

    def table_regions(self, table_id: int) -> dict[int, int]:
        """Region -> next sequence number, for the regions holding entries of a table."""
        return {r: n for (r, t), n in sorted(self.next_sequences.items()) if t == table_id}

    def sequence_step(self, region_id: int, table_id: int, sequence: int) -> StepCommit | None:
        """The indexed step holding ``sequence`` of a (region, table) (sequence -> offset)."""
        key = (region_id, table_id)
        firsts = [(c.first_sequences[key], c) for c in self.index if key in c.first_sequences]
        pos = bisect.bisect_right([f for f, _ in firsts], sequence) - 1
        return firsts[pos][1] if pos >= 0 else None

    # -- snapshots --------------------------------------------------------------

    def snapshot(self) -> tuple[int, bytes]:
        """Encode the state as of the first needed step's commit offset."""
        pos = self.first_needed_position()
        later = self.index[pos:]
        at = later[0].commit_offset if later else self.next_offset
        next_step = later[0].step if later else self.next_step
        next_seq = dict(self.next_sequences)
        for commit in later:
            for run in commit.runs:
                next_seq[run.key] -= run.entries
        pairs: dict[str, list[list[int]]] = {}
        for (writer, wstep), step in sorted(self.pairs.items(), key=lambda kv: kv[1]):
            if step >= next_step:
                continue
            runs = pairs.setdefault(writer, [])
            if runs and runs[-1][0] + runs[-1][2] == wstep and runs[-1][1] + runs[-1][2] == step:
                runs[-1][2] += 1
            else:
                runs.append([wstep, step, 1])
        doc = {
            "v": SNAPSHOT_VERSION, "namespace_id": self.namespace_id, "at": at,
            "incarnation": self.incarnation,
            "next_step": next_step, "expired_before": self.expired_before,
            "tables": [t.snapshot_json() for t in self.tables.values()],
            "next_sequences": [[r, t, n] for (r, t), n in next_seq.items()],
            "marks": [[r, t, n] for (r, t), n in self.marks.items()],
            "pairs": pairs,
            # what replay after `at` must see exactly as the first replay did
            "bounds": {str(k): v for k, v in self.bounds_at(at).items()},
            # latest-wins facts: replaying their older records after `at` ends the same
            "last_clean_ms": self.last_clean_ms,
            "readers": {r: [p.next_step, p.hold] for r, p in self.readers.items()},
            "retention": self.retention,
            "writer_last": self.writer_last,  # a max: replaying later records ends the same
        }
        return at, seal_snapshot(json.dumps(doc, separators=(",", ":")).encode())

    @classmethod
    def from_snapshot(cls, namespace: str, raw: bytes, version: int | None = None) -> NamespaceState:
        """Decode a snapshot; damage is a :class:`CorruptEntryError` naming its version."""
        payload = open_snapshot(raw, namespace, version)
        try:
            doc = json.loads(payload)
            if doc.get("v") == 2:
                doc = _upgrade_v2(doc)
            if doc.get("v") != SNAPSHOT_VERSION:
                raise DecodeError(f"snapshot format: expected {SNAPSHOT_VERSION}, "
                                  f"given {doc.get('v')}", namespace=namespace,
                                  snapshot=SNAPSHOT_NAME, version=version)
            state = cls(namespace, namespace_id=doc["namespace_id"],
                        incarnation=doc["incarnation"])
            state.writer_last = dict(doc["writer_last"])
            state.tables = {t["id"]: TableInfo.from_json(t) for t in doc["tables"]}
            state.base_step = state.next_step = doc["next_step"]
            state.expired_before = doc["expired_before"]
            state.next_sequences = {(r, t): n for r, t, n in doc["next_sequences"]}
            state.marks = {(r, t): n for r, t, n in doc["marks"]}
            for writer, runs in doc["pairs"].items():
                for wstep, step, count in runs:
                    for i in range(count):
                        state.pairs[(writer, wstep + i)] = step + i
            state.next_offset = state.snapshot_offset = doc["at"]
            state.base_bounds = {int(k): v for k, v in doc["bounds"].items()}
            state.clean_bounds = dict(state.base_bounds)
            state.last_clean_ms = doc["last_clean_ms"]
            state.readers = {r: ReaderPosition(n, bool(h)) for r, (n, h) in doc["readers"].items()}
            state.retention = dict(doc["retention"])
            return state
        except (ValueError, KeyError, TypeError) as exc:
            raise DecodeError(f"snapshot is unreadable: {exc!r}", namespace=namespace,
                              snapshot=SNAPSHOT_NAME, version=version) from exc

    def trim(self, pos: int, at: int) -> None:
        """Forget indexed steps before ``pos`` (after a snapshot at ``at`` made them unneeded)."""
        if pos > 0:
            self.base_step = self.index[pos].step if pos < len(self.index) else self.next_step
            del self.index[:pos]
        if at > self.snapshot_offset:
            self.base_bounds = self.bounds_at(at)
            self.bound_history = [(o, b) for o, b in self.bound_history if o >= at]
            self.snapshot_offset = at


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
    ExpireRecord: NamespaceState._apply_expire,
    MarkRecord: NamespaceState._apply_mark,
    CleanRecord: NamespaceState._apply_clean,
    ReaderRecord: NamespaceState._apply_reader,
    RetentionRecord: NamespaceState._apply_retention,
}
assert set(_APPLY) == set(RECORD_KINDS.values()), "a record kind without a replay handler"
