"""What the WAL writes into its ``commits`` log, and what writers hand to committers.

Every fact about a namespace is one JSON entry of the namespace's ``commits`` log, in
the order the log gives them; replaying that log (from the latest snapshot) rebuilds
the namespace's whole state, the same in every process:

=========  ==========================================================================
kind       meaning
=========  ==========================================================================
``ns``     the namespace's name and u8 id (first entry; the first one wins)
``table``  a table definition: id, name, Arrow schema (version 0), payload format
``schema`` schema version ``v`` of ``table`` (schema evolution; the first ``v`` wins)
``step``   one committed step: writer id, writer step, attempts, and its *runs*
``expire`` steps below ``before`` are no longer needed by step readers
``mark``   entries of ``table`` in ``region`` below sequence ``seq`` are not needed
=========  ==========================================================================

A *run* is ``[region, table, start, end, rows, bytes, schema_version]``: the region
offsets ``[start, end)`` hold entries of one table, encoded with one schema version
of it, written by the step's attempts. A table is not bound to a region: its rows
may live in any number of regions, and sequence numbers count per (region, table).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from pyspark_durable.errors import DecodeError


def schema_to_b64(schema: pa.Schema) -> str:
    return base64.b64encode(schema.serialize().to_pybytes()).decode()


def schema_from_b64(text: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


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

    def to_json(self) -> dict[str, Any]:
        """The ``table`` record that defines the table (schema version 0)."""
        return {"k": "table", "id": self.table_id, "name": self.name,
                "schema": schema_to_b64(self.schemas[0]), "format": self.payload_format}

    def snapshot_json(self) -> dict[str, Any]:
        return {**self.to_json(), "schemas": [schema_to_b64(s) for s in self.schemas[1:]]}

    @staticmethod
    def from_json(d: dict[str, Any]) -> TableInfo:
        schemas = [schema_from_b64(d["schema"])] + [schema_from_b64(s)
                                                    for s in d.get("schemas", ())]
        return TableInfo(d["id"], d["name"], tuple(schemas), d["format"])

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

    @property
    def entries(self) -> int:
        return self.end - self.start

    @property
    def key(self) -> tuple[int, int]:
        """(region, table): what sequence numbers count in."""
        return self.region_id, self.table_id


@dataclass(slots=True)
class StepCommit:
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
            "k": "step", "w": self.writer_id, "ws": self.writer_step,
            "att": list(self.attempts), "ts": self.timestamp_ms,
            "runs": [[r.region_id, r.table_id, r.start, r.end, r.rows, r.size_bytes,
                      r.schema_version] for r in self.runs],
        }

    @staticmethod
    def from_json(d: dict[str, Any]) -> StepCommit:
        return StepCommit(
            d["w"], d["ws"], tuple(d["att"]), tuple(Run(*r) for r in d["runs"]), d["ts"]
        )


@dataclass(frozen=True, slots=True)
class WrittenEntry:
    """One entry an attempt appended: enough for the committer to build runs."""

    region_id: int
    table_id: int
    offset: int
    rows: int
    size_bytes: int
    schema_version: int = 0


@dataclass(frozen=True, slots=True)
class AttemptReceipt:
    """What a writer attempt hands its committer (in Spark: the commit message)."""

    attempt_id: str
    writer_id: str
    writer_step: int
    entries: tuple[WrittenEntry, ...]

    @property
    def rows(self) -> int:
        return sum(e.rows for e in self.entries)


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
            runs[-1] = Run(last.region_id, last.table_id, last.start, e.offset + 1,
                           last.rows + e.rows, last.size_bytes + e.size_bytes, e.schema_version)
        else:
            runs.append(Run(e.region_id, e.table_id, e.offset, e.offset + 1, e.rows, e.size_bytes,
                            e.schema_version))
    return tuple(runs)


def encode_meta(d: dict[str, Any]) -> bytes:
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
