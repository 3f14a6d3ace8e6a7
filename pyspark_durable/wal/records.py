"""What the WAL writes into its ``commits`` log, and what writers hand to committers.

Every fact about a namespace is one JSON entry of the namespace's ``commits`` log, in
the order the log gives them; replaying that log (from the latest snapshot) rebuilds
the namespace's whole state, the same in every process:

=========  ==========================================================================
kind       meaning
=========  ==========================================================================
``ns``     the namespace's name and u8 id (first entry; the first one wins)
``table``  a table definition: id, name, region, Arrow schema, payload format
``step``   one committed step: writer id, writer step, attempts, and its *runs*
``expire`` steps below ``before`` are no longer needed by step readers
``mark``   entries of ``table`` below sequence ``seq`` are no longer needed
=========  ==========================================================================

A *run* is ``[region, table, start, end, rows, bytes]``: the region offsets
``[start, end)`` hold entries of one table written by the step's attempts.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from pyspark_durable.errors import DecodeError


@dataclass(frozen=True, slots=True)
class TableInfo:
    """A table: where its rows live (one region, always) and how they are encoded."""

    table_id: int
    name: str
    region_id: int
    schema: pa.Schema
    payload_format: str

    def to_json(self) -> dict[str, Any]:
        return {
            "k": "table", "id": self.table_id, "name": self.name, "region": self.region_id,
            "schema": base64.b64encode(self.schema.serialize().to_pybytes()).decode(),
            "format": self.payload_format,
        }

    @staticmethod
    def from_json(d: dict[str, Any]) -> TableInfo:
        schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(d["schema"])))
        return TableInfo(d["id"], d["name"], d["region"], schema, d["format"])

    def same_definition(self, other: TableInfo) -> bool:
        return (self.region_id, self.payload_format) == (other.region_id, other.payload_format) \
            and self.schema.equals(other.schema)


@dataclass(frozen=True, slots=True)
class Run:
    """Consecutive region offsets holding entries of one table, written for one step."""

    region_id: int
    table_id: int
    start: int
    end: int
    rows: int
    size_bytes: int

    @property
    def entries(self) -> int:
        return self.end - self.start


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
    first_sequences: dict[int, int] = field(default_factory=dict)  # table -> first sequence

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
            "runs": [[r.region_id, r.table_id, r.start, r.end, r.rows, r.size_bytes]
                     for r in self.runs],
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
        if last and (last.region_id, last.table_id, last.end) == (e.region_id, e.table_id, e.offset):
            runs[-1] = Run(last.region_id, last.table_id, last.start, e.offset + 1,
                           last.rows + e.rows, last.size_bytes + e.size_bytes)
        else:
            runs.append(Run(e.region_id, e.table_id, e.offset, e.offset + 1, e.rows, e.size_bytes))
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
