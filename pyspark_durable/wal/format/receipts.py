"""What writers hand to committers: the entries an attempt wrote, its receipt, and the
runs a step is built from (rule 2-3 of the protocol in :mod:`.namespace`)."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark_durable.wal.format.runs import Run


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
