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
=============  ===================  ================================================

Each kind is one class below with its encoding (``to_json``) next to its decoding
(``from_json``); :data:`RECORD_KINDS` maps a kind to its class, :func:`decode_record`
decodes by kind and :class:`~pyspark_durable.wal.state.NamespaceState` applies each
class with one handler. Adding a kind is a class here plus its handler there. Every
record also carries ``i``, the incarnation it was written in (the namespace adds it).
The JSON is the format of docs/record-format.md: field names never change, and old
forms (a ``table`` record's ``region``, a ``mark`` without ``region``, 6-element runs)
still decode.

A *run* is ``[region, table, start, end, rows, bytes, schema_version]``: the region
offsets ``[start, end)`` hold entries of one table, encoded with one schema version
of it, written by the step's attempts. A table is not bound to a region: its rows
may live in any number of regions, and sequence numbers count per (region, table).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import pyarrow as pa
import xxhash

from pyspark_durable.errors import DecodeError


def schema_to_b64(schema: pa.Schema) -> str:
    return base64.b64encode(schema.serialize().to_pybytes()).decode()


def schema_from_b64(text: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


class CommitRecord:
    """One fact of the commits log; each kind is a subclass pairing ``to_json`` with
    ``from_json``, registered in :data:`RECORD_KINDS` by :func:`record_kind`."""

    __slots__ = ()
    kind: ClassVar[str]

    def to_json(self) -> dict[str, Any]:
        raise NotImplementedError

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CommitRecord:
        raise NotImplementedError


RECORD_KINDS: dict[str, type[CommitRecord]] = {}  # kind (the ``k`` field) -> its class
_R = TypeVar("_R", bound=type[CommitRecord])


def record_kind(kind: str) -> Callable[[_R], _R]:
    """Register a record class as the one that encodes and decodes ``kind``."""
    def register(cls: _R) -> _R:
        assert kind not in RECORD_KINDS, kind
        cls.kind = kind
        RECORD_KINDS[kind] = cls
        return cls
    return register


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


@record_kind("table")
@dataclass(frozen=True, slots=True)
class TableRecord(CommitRecord):
    """A table definition with its schema version 0 (the first one of an id wins)."""

    table_id: int
    name: str
    schema: pa.Schema
    payload_format: str

    def to_json(self) -> dict[str, Any]:
        return {"k": self.kind, "id": self.table_id, "name": self.name,
                "schema": schema_to_b64(self.schema), "format": self.payload_format}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TableRecord:
        # an old record's `region` (a table bound to one region) is ignored: tables span regions
        return cls(d["id"], d["name"], schema_from_b64(d["schema"]), d["format"])

    def info(self) -> TableInfo:
        return TableInfo(self.table_id, self.name, (self.schema,), self.payload_format)


@record_kind("schema")
@dataclass(frozen=True, slots=True)
class SchemaRecord(CommitRecord):
    """Schema version ``version`` of a table (the first record of a version wins)."""

    table_id: int
    version: int
    schema: pa.Schema

    def to_json(self) -> dict[str, Any]:
        return {"k": self.kind, "table": self.table_id, "v": self.version,
                "schema": schema_to_b64(self.schema)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SchemaRecord:
        return cls(d["table"], d["v"], schema_from_b64(d["schema"]))


@dataclass(frozen=True, slots=True)
class TableInfo:
    """A table: its name, its schema versions (oldest first) and its payload format.

    Schema versions only ever add nullable columns or widen types (see
    :mod:`pyspark_durable.wal.schemas`), so rows of any version read as the newest.
    """

    table_id: int
    name: str
    schemas: tuple[pa.Schema, ...]
    payload_format: str

    @property
    def schema(self) -> pa.Schema:
        """The newest schema version."""
        return self.schemas[-1]

    @property
    def version(self) -> int:
        return len(self.schemas) - 1

    def snapshot_json(self) -> dict[str, Any]:
        """The ``table`` record that defines the table, plus its later schema versions."""
        record = TableRecord(self.table_id, self.name, self.schemas[0], self.payload_format)
        return {**record.to_json(), "schemas": [schema_to_b64(s) for s in self.schemas[1:]]}

    @staticmethod
    def from_json(d: dict[str, Any]) -> TableInfo:
        """A snapshot's table (:meth:`snapshot_json`)."""
        first = TableRecord.from_json(d).info()
        return TableInfo(first.table_id, first.name,
                         (*first.schemas, *(schema_from_b64(s) for s in d.get("schemas", ()))),
                         first.payload_format)

    def with_version(self, schema: pa.Schema) -> TableInfo:
        return TableInfo(self.table_id, self.name, (*self.schemas, schema), self.payload_format)


@dataclass(frozen=True, slots=True)
class Run:
    """Consecutive region offsets holding entries of one table, written for one step."""

    region_id: int
    table_id: int
    start: int
    end: int
    rows: int
    size_bytes: int
    schema_version: int = 0
    digests: str = ""  # DIGEST_HEX hex digits per entry (entry_digest); "": not recorded

    @property
    def entries(self) -> int:
        return self.end - self.start

    @property
    def key(self) -> tuple[int, int]:
        """(region, table): what sequence numbers count in."""
        return self.region_id, self.table_id


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
            "runs": [[r.region_id, r.table_id, r.start, r.end, r.rows, r.size_bytes,
                      r.schema_version, *([r.digests] if r.digests else [])]
                     for r in self.runs],
            **({"et": list(self.event_time)} if self.event_time else {}),
            **({"sm": self.started_ms} if self.started_ms is not None else {}),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> StepCommit:
        # runs of 6 elements (written before schema versions) are schema version 0, of 7
        # (before content digests) carry no digests: their reads are not verified
        return cls(d["w"], d["ws"], tuple(d["att"]), tuple(Run(*r) for r in d["runs"]), d["ts"],
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


@dataclass(frozen=True, slots=True)
class WrittenEntry:
    """One entry an attempt appended: enough for the committer to build runs."""

    region_id: int
    table_id: int
    offset: int
    rows: int
    size_bytes: int
    schema_version: int = 0
    digest: str = ""  # entry_digest of its key and value


@dataclass(frozen=True, slots=True)
class AttemptReceipt:
    """What a writer attempt hands its committer (in Spark: the commit message)."""

    attempt_id: str
    writer_id: str
    writer_step: int
    entries: tuple[WrittenEntry, ...]
    event_time: tuple[int, int] | None = None  # (min, max) µs of the rows it wrote

    @property
    def rows(self) -> int:
        return sum(e.rows for e in self.entries)


def event_time_span(spans: list[tuple[int, int] | None]) -> tuple[int, int] | None:
    """The (min, max) covering every given span (None: none was recorded)."""
    known = [s for s in spans if s is not None]
    return (min(s[0] for s in known), max(s[1] for s in known)) if known else None


def build_runs(receipts: list[AttemptReceipt]) -> tuple[Run, ...]:
    """Merge the entries of all attempts into runs, ordered by (region, offset)."""
    entries = sorted(
        (e for r in receipts for e in r.entries), key=lambda e: (e.region_id, e.offset)
    )
    runs: list[Run] = []
    for e in entries:
        last = runs[-1] if runs else None
        if last and (last.region_id, last.table_id, last.end, last.schema_version) == (
                e.region_id, e.table_id, e.offset, e.schema_version):
            digests = last.digests + e.digest if last.digests and e.digest else ""
            runs[-1] = Run(last.region_id, last.table_id, last.start, e.offset + 1,
                           last.rows + e.rows, last.size_bytes + e.size_bytes, e.schema_version,
                           digests)
        else:
            runs.append(Run(e.region_id, e.table_id, e.offset, e.offset + 1, e.rows, e.size_bytes,
                            e.schema_version, e.digest))
    return tuple(runs)


DIGEST_HEX = 16  # hex digits of one entry's digest


def entry_digest(key: bytes, value: Any) -> str:
    """An entry's content digest as its step records it: XXH3-64 of its key and value.

    Not a security hash: it catches bytes that changed while the log's own CRC still
    matches (a frame rewritten with a new CRC, a copy restored from elsewhere, another
    cluster's topic under the same name). XXH3 hashes ~20 GB/s, so verifying every read
    costs little beside decoding it."""
    h = xxhash.xxh3_64(key)
    h.update(value)
    return h.hexdigest()


def encode_meta(d: dict[str, Any]) -> bytes:
    """A record's JSON as stored: compact, keys sorted."""
    return json.dumps(d, separators=(",", ":"), sort_keys=True).encode()


def decode_meta(data: bytes, *, namespace: str, offset: int) -> dict[str, Any]:
    try:
        d = json.loads(data)
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
    naming the offset.
    """
    d = decode_meta(data, namespace=namespace, offset=offset)
    kind = d["k"]
    cls = RECORD_KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise DecodeError(f"unknown commit-log record kind {kind!r}",
                          namespace=namespace, log="commits", offset=offset)
    try:
        return cls.from_json(d), d.get("i")
    except (KeyError, TypeError, ValueError) as exc:
        raise DecodeError(f"commit-log {kind} record is malformed: {exc!r}",
                          namespace=namespace, log="commits", offset=offset) from exc
