"""What the namespace state holds, and the snapshot that stores it.

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

How the commits log changes this state (recovery and replay) is
:class:`~pyspark_durable.wal.replay.state.NamespaceState`'s, which derives from
:class:`StoredState`; which steps are still needed is here, since a snapshot keeps
only those.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Self

import pyarrow as pa

from pyspark_durable.errors import DecodeError, NewerVersion
from pyspark_durable.wal.format.columns import decode_block, encode_blocks
from pyspark_durable.wal.format.records import StepCommit
from pyspark_durable.wal.format.snapshot_file import SNAPSHOT_NAME, open_snapshot, seal_snapshot
from pyspark_durable.wal.format.table_records import TableInfo
from pyspark_durable.wal.replay.chunk_table import CHUNK_SCHEMA, ChunkList
from pyspark_durable.wal.replay.dedup import Dedup
from pyspark_durable.wal.replay.oneoff_block import ONE_OFF_SCHEMA
from pyspark_durable.wal.replay.step_index import Chunk, StepIndex

# 4: as of the log's end, with the step index's chunks; 5: the chunks and the one-off
# writers as Arrow columns after the JSON document (an open makes no object per row);
# 6: 5 whose chunks may cover commits records written with copies, written where the
# store writes them, so a release that would count the copies as steps refuses it by name
SNAPSHOT_VERSION = 6
SNAPSHOT_VERSION_WITHOUT_COPIES = 5


@dataclass(frozen=True, slots=True)
class ReaderPosition:
    """A registered reader: the next step it needs, and whether it holds retention."""

    next_step: int
    hold: bool


@dataclass
class StoredState:
    """The state of one namespace as of ``next_offset`` of its commits log."""

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
    def from_snapshot(cls, namespace: str, raw: bytes, version: int | None = None) -> Self:
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
