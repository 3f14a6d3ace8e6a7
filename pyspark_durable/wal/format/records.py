"""What the WAL writes into its ``commits`` log, and what writers hand to committers.

Every fact about a namespace is one JSON entry of the namespace's ``commits`` log, in
the order the log gives them; replaying that log (from the latest snapshot) rebuilds
the namespace's whole state, the same in every process:

=============  ===================  ================================================
kind           class                meaning
=============  ===================  ================================================
``ns``         ``NsRecord``         the namespace's name, u8 id and incarnation (the
                                    first one wins)
``table``      ``TableRecord``      a table definition: id, name, Arrow schema
                                    (version 0), payload format
``schema``     ``SchemaRecord``     schema version ``v`` of ``table`` (schema
                                    evolution; the first ``v`` wins)
``tables``     ``TablesRecord``     several ``table`` and ``schema`` records in one
                                    (one write defining many tables at once)
``step``       ``StepCommit``       one committed step: writer id, writer step,
                                    attempts, and its *runs*
``writer``     ``WriterRecord``     a consecutive writer finished a step without rows
``dedup``      ``DedupRecord``      from here on, remember each writer's newest
                                    ``steps`` steps, one-off writers ``window_ms``
``expire``     ``ExpireRecord``     steps below ``before`` are no longer needed by
                                    step readers
``mark``       ``MarkRecord``       entries of ``table`` in ``region`` below sequence
                                    ``seq`` are not needed
``clean``      ``CleanRecord``      a cleaner pass: its time and the bounds it moves
``reader``     ``ReaderRecord``     a reader's next step and hold, or its drop
``retention``  ``RetentionRecord``  the namespace's retention policy
``lost``       ``LostRecord``       an operator recorded that step ``step`` is lost
                                    (``durablewal repair``): its reads say so
=============  ===================  ================================================

Each kind is one class with its encoding (``to_json``) next to its decoding
(``from_json``): the kinds that define tables in :mod:`.table_records`, the others
below. :data:`~.commit_record.RECORD_KINDS` maps a kind to its class,
:func:`decode_record` decodes by kind and
:class:`~pyspark_durable.wal.replay.state.NamespaceState` applies each class with one
handler. Adding a kind is a class here plus its handler there. Every
record also carries ``i``, the incarnation it was written in (the namespace adds it).
The JSON is the format of docs/record-format.md: field names never change, and old
forms (a ``table`` record's ``region``, a ``mark`` without ``region``, runs as JSON
lists of 6, 7 or 8 elements) still decode.

A *run* (:class:`Run`) is region offsets ``[start, end)`` holding entries of one table,
encoded with one schema version of it, written by the step's attempts, with its rows,
bytes and one content digest per entry. A table is not bound to a region: its rows may
live in any number of regions, and sequence numbers count per (region, table). A step
stores its runs compactly (:func:`encode_runs`): a step of a streaming query that
writes 1,000 tables commits a record every micro-batch, and what recovery replays and
every handle refreshes grows with it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark_durable.errors import DecodeError, NewerVersion
from pyspark_durable.wal.format import table_records  # noqa: F401 - registers the table kinds
from pyspark_durable.wal.format.commit_record import RECORD_KINDS, CommitRecord, record_kind
from pyspark_durable.wal.format.runs import Run, decode_runs, encode_runs
from pyspark_durable.wal.format.runs import entry_digest as entry_digest  # bench/profile_file_path.py


@record_kind("ns")
@dataclass(frozen=True, slots=True)
class NsRecord(CommitRecord):
    """The namespace's creation: its name, u8 id and incarnation (None: an older WAL)."""

    name: str
    namespace_id: int
    incarnation: str | None

    def to_json(self) -> dict[str, Any]:
        d = {"k": self.kind, "name": self.name, "id": self.namespace_id}
        return d if self.incarnation is None else {**d, "inc": self.incarnation}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> NsRecord:
        return cls(d["name"], d["id"], d.get("inc"))


@record_kind("step")
@dataclass(slots=True)
class StepCommit(CommitRecord):
    """A committed step; ``step`` and ``first_sequences`` are fixed by replay order."""

    writer_id: str
    writer_step: int
    attempts: tuple[str, ...]
    runs: tuple[Run, ...]
    timestamp_ms: int
    step: int = -1
    commit_offset: int = -1
    # (region, table) -> the sequence number of the step's first entry there
    first_sequences: dict[tuple[int, int], int] = field(default_factory=dict)
    # (min, max) of the writer's event-time column over the step's rows, in microseconds
    # since the epoch (Spark's eventTimeColumn); None: not recorded
    event_time: tuple[int, int] | None = None
    # a one-off writer (a batch write): when its writer step began; replay forgets the
    # writer after the dedup window and refuses a commit that began before it
    started_ms: int | None = None

    @property
    def rows(self) -> int:
        return sum(r.rows for r in self.runs)

    @property
    def size_bytes(self) -> int:
        return sum(r.size_bytes for r in self.runs)

    @property
    def regions(self) -> list[int]:
        return sorted({r.region_id for r in self.runs})

    @property
    def tables(self) -> list[int]:
        return sorted({r.table_id for r in self.runs})

    def to_json(self) -> dict[str, Any]:
        return {
            "k": self.kind, "w": self.writer_id, "ws": self.writer_step,
            "att": list(self.attempts), "ts": self.timestamp_ms,
            "runs": encode_runs(self.runs),
            **({"et": list(self.event_time)} if self.event_time else {}),
            **({"sm": self.started_ms} if self.started_ms is not None else {}),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> StepCommit:
        # runs stored as JSON lists (before the compact form) still decode: decode_runs
        return cls(d["w"], d["ws"], tuple(d["att"]), decode_runs(d["runs"]), d["ts"],
                   event_time=tuple(d["et"]) if d.get("et") else None,
                   started_ms=d.get("sm"))


@record_kind("dedup")
@dataclass(frozen=True, slots=True)
class DedupRecord(CommitRecord):
    """From here on, deduplication is bounded: each writer's newest ``steps`` writer
    steps are remembered, and one-off writers for ``window_ms`` (the latest one wins)."""

    window_ms: int
    steps: int

    def to_json(self) -> dict[str, Any]:
        return {"k": self.kind, "window_ms": self.window_ms, "steps": self.steps}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> DedupRecord:
        window_ms, steps = d["window_ms"], d["steps"]
        if not (isinstance(window_ms, int) and isinstance(steps, int) and window_ms > 0
                and steps > 0):
            raise ValueError(f"dedup window {window_ms!r} ms, {steps!r} steps")
        return cls(window_ms, steps)


@record_kind("clocks")
@dataclass(frozen=True, slots=True)
class ClocksRecord(CommitRecord):
    """From here on, the clock rules of :mod:`.clocks` hold: a step record moves the WAL's
    clock at most ``step_ms`` past the step clock, a cleaner pass never past it by more,
    and a one-off writer is refused only if it began no later than one the WAL forgot.
    A kind of its own, so that a version without these rules fails loudly on it instead
    of judging the records after it differently (the latest one wins)."""

    step_ms: int

    def to_json(self) -> dict[str, Any]:
        return {"k": self.kind, "step_ms": self.step_ms}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ClocksRecord:
        step_ms = d["step_ms"]
        if not (isinstance(step_ms, int) and not isinstance(step_ms, bool) and step_ms > 0):
            raise ValueError(f"clock step {step_ms!r} ms")
        return cls(step_ms)


@record_kind("oneoffs")
@dataclass(frozen=True, slots=True)
class OneOffsRecord(CommitRecord):
    """From here on, at most ``writers`` one-off writers are remembered: past that, the
    one with the oldest start is forgotten, as the window forgets (:mod:`.dedup`), so
    a process's memory is bounded however many batch writes the window holds. A kind of
    its own, so that a version without the bound fails loudly on it instead of
    remembering writers the others forgot (the latest one wins)."""

    writers: int

    def to_json(self) -> dict[str, Any]:
        return {"k": self.kind, "writers": self.writers}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> OneOffsRecord:
        writers = d["writers"]
        if not (isinstance(writers, int) and not isinstance(writers, bool) and writers > 0):
            raise ValueError(f"one-off writers {writers!r}")
        return cls(writers)


@record_kind("writer")
@dataclass(frozen=True, slots=True)
class WriterRecord(CommitRecord):
    """A consecutive writer finished ``writer_step`` without rows (no step is made)."""

    writer_id: str
    writer_step: int

    def to_json(self) -> dict[str, Any]:
        return {"k": self.kind, "w": self.writer_id, "ws": self.writer_step}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> WriterRecord:
        return cls(d["w"], d["ws"])


@record_kind("expire")
@dataclass(frozen=True, slots=True)
class ExpireRecord(CommitRecord):
    """Steps below ``before`` are no longer needed by step readers."""

    before: int

    def to_json(self) -> dict[str, Any]:
        return {"k": self.kind, "before": self.before}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ExpireRecord:
        return cls(d["before"])


@record_kind("mark")
@dataclass(frozen=True, slots=True)
class MarkRecord(CommitRecord):
    """Entries of a (region, table) below ``sequence`` are not needed by the table.

    ``region_id`` None: an old record, written when a table lived in one region; it
    applies to every (region, table) pair replay knows for the table.
    """

    table_id: int
    sequence: int
    region_id: int | None

    def to_json(self) -> dict[str, Any]:
        d = {"k": self.kind, "table": self.table_id, "seq": self.sequence}
        return d if self.region_id is None else {**d, "region": self.region_id}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> MarkRecord:
        return cls(d["table"], d["seq"], d.get("region"))


@record_kind("clean")
@dataclass(frozen=True, slots=True)
class CleanRecord(CommitRecord):
    """A cleaner pass: its time and, per region, the bound it moves (maybe none)."""

    timestamp_ms: int
    bounds: Mapping[int, int]

    def to_json(self) -> dict[str, Any]:
        return {"k": self.kind, "ts": self.timestamp_ms,
                "regions": {str(r): b for r, b in self.bounds.items()}}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CleanRecord:
        return cls(d["ts"], {int(r): b for r, b in d["regions"].items()})


@record_kind("reader")
@dataclass(frozen=True, slots=True)
class ReaderRecord(CommitRecord):
    """A reader's position (the next step it needs, whether it holds retention), or,
    with ``drop``, that the reader is forgotten; the latest record of a reader wins."""

    reader_id: str
    next_step: int = 0
    hold: bool = False
    drop: bool = False

    def to_json(self) -> dict[str, Any]:
        if self.drop:
            return {"k": self.kind, "id": self.reader_id, "drop": True}
        return {"k": self.kind, "id": self.reader_id, "next": self.next_step, "hold": self.hold}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ReaderRecord:
        if d.get("drop"):
            return cls(d["id"], drop=True)
        return cls(d["id"], d["next"], bool(d["hold"]))


@record_kind("retention")
@dataclass(frozen=True, slots=True)
class RetentionRecord(CommitRecord):
    """The namespace's retention policy (``RetentionPolicy.to_json``); the latest wins."""

    policy: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"k": self.kind, "policy": dict(self.policy)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RetentionRecord:
        return cls(dict(d["policy"]))


@record_kind("lost")
@dataclass(frozen=True, slots=True)
class LostRecord(CommitRecord):
    """Step ``step`` is lost (an entry it needs is damaged or gone, found by ``check``),
    and an operator recorded it so (``durablewal repair``): a read of it is
    :class:`~pyspark_durable.errors.StepLost` naming ``why``, never a guess. The first
    record of a step wins. A kind of its own, so that an older release fails on it
    rather than read the step as damage nobody knew of."""

    step: int
    why: str

    def to_json(self) -> dict[str, Any]:
        return {"k": self.kind, "step": self.step, "why": self.why}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> LostRecord:
        return cls(int(d["step"]), str(d["why"]))


def encode_meta(d: dict[str, Any]) -> bytes:
    """A record's JSON as stored: compact, keys sorted."""
    return json.dumps(d, separators=(",", ":"), sort_keys=True).encode()


def decode_meta(data: bytes, *, namespace: str, offset: int) -> dict[str, Any]:
    try:
        # UTF-8 is what encode_meta writes: decoded here, json skips guessing the encoding
        d = json.loads(str(data, "utf-8"))
        if not isinstance(d, dict) or "k" not in d:
            raise ValueError("not a commit-log record")
        return d
    except ValueError as exc:
        raise DecodeError(f"commit log entry is garbage: {exc}", namespace=namespace,
                          log="commits", offset=offset) from exc


def decode_record(data: bytes, *, namespace: str,
                  offset: int) -> tuple[CommitRecord, str | None]:
    """A stored record as its kind's class, with the incarnation it was tagged with.

    An unknown kind, or a record missing a field of its kind, is a :class:`DecodeError`
    naming the offset; a field in a newer release's format (compact runs) is
    :class:`NewerVersion`.
    """
    d = decode_meta(data, namespace=namespace, offset=offset)
    kind = d["k"]
    cls = RECORD_KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise DecodeError(f"unknown commit-log record kind {kind!r}",
                          namespace=namespace, log="commits", offset=offset)
    try:
        return cls.from_json(d), d.get("i")
    except NewerVersion as exc:  # a newer release's record: refused, named where it is
        raise exc.located(namespace=namespace, log="commits", offset=offset) from None
    except (KeyError, TypeError, ValueError) as exc:
        raise DecodeError(f"commit-log {kind} record is malformed: {exc!r}",
                          namespace=namespace, log="commits", offset=offset) from exc
