"""What ``durablewal check`` found: problems with coordinates, and what was checked."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from pyspark_durable.errors import CorruptEntryError, DurableWalError, coordinates


class Fix(Enum):
    """What brings a problem back, for ``check`` to say as the next command."""

    CLEAN = "clean"  # a cleaner pass rewrites it (a damaged snapshot)
    RESTORE = "restore"  # only a backup of the damaged file holds what is lost


@dataclass
class Problem:
    """One thing wrong, with its coordinates (region, offset, step, table, ...)."""

    where: dict[str, Any]
    message: str
    fix: Fix | None = None  # None: the runbook's table of errors

    def text(self) -> str:
        prefix = coordinates(**self.where)
        return f"{prefix}: {self.message}" if prefix else self.message

    def to_json(self) -> dict[str, Any]:
        return {"where": self.where, "message": self.message, "text": self.text(),
                "fix": self.fix.value if self.fix else None}


@dataclass
class CheckReport:
    namespace: str
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # not damage: e.g. who can read it
    commit_records: int = 0
    regions: int = 0
    entries: int = 0
    steps: int = 0
    runs: int = 0
    tables: int = 0
    snapshot_at: int | None = None
    deep: bool = False  # --deep: needed entries re-hashed against their steps' digests
    rehashed: int = 0  # entries whose digest was recomputed and compared
    rehashed_bytes: int = 0  # their keys and values
    undigested: int = 0  # needed entries of steps written before digests: nothing to compare

    @property
    def ok(self) -> bool:
        return not self.problems

    def problem(self, message: str, fix: Fix | None = None, **where: Any) -> None:
        """Add a problem; coordinates given as None are left out."""
        self.problems.append(Problem({k: v for k, v in where.items() if v is not None},
                                     message, fix))

    def problem_from(self, exc: DurableWalError, **where: Any) -> None:
        """An error as a problem; the region and offset come first, found or given."""
        found = {k: v for k, v in exc.where.items() if k != "namespace"}
        if str(found.get("log", "")).startswith("region_"):
            found.pop("log")
        merged = {**where, **{k: v for k, v in found.items() if k not in where}}
        # damage (not a newer release's format, a missing right, ...): only a backup has it
        fix = Fix.RESTORE if type(exc) is CorruptEntryError else None
        self.problem(exc.reason, fix, **merged)

    def fixes(self) -> list[Fix | None]:
        """The fixes the problems need, each once, in the order of :class:`Fix` (None,
        the runbook, last)."""
        found = {p.fix for p in self.problems}
        return [f for f in Fix if f in found] + ([None] if None in found else [])

    def summary(self) -> str:
        """What was checked, e.g. ``12 commit-log records, 2 regions, 340 entries, ...``."""
        snap = "no snapshot" if self.snapshot_at is None else \
            f"snapshot at commits offset {self.snapshot_at}"
        counts = [(self.commit_records, "commit-log record"), (self.regions, "region"),
                  (self.entries, "entry"), (self.steps, "needed step"), (self.runs, "run"),
                  (self.tables, "table")]
        text = ", ".join(_plural(n, word) for n, word in counts) + f", {snap}"
        return text + self.deep_summary() if self.deep else text

    def deep_summary(self) -> str:
        """What ``--deep`` added: ``; re-hashed 340 entries (1,234,567 bytes) ...``."""
        text = (f"; re-hashed {_plural(self.rehashed, 'entry')} ({self.rehashed_bytes:,} bytes "
                "of keys and values) against the content digests their steps committed")
        if self.undigested:
            text += (f"; {_plural(self.undigested, 'entry')} of steps written before "
                     "digests not re-hashed (no digest to compare)")
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace, "ok": self.ok,
            "problems": [p.to_json() for p in self.problems],
            "warnings": list(self.warnings),
            "verified": {"commit_records": self.commit_records, "regions": self.regions,
                         "entries": self.entries, "steps": self.steps, "runs": self.runs,
                         "tables": self.tables, "snapshot_at": self.snapshot_at,
                         "deep": {"entries": self.rehashed, "bytes": self.rehashed_bytes,
                                  "without_digest": self.undigested} if self.deep else None},
        }


def _plural(n: int, word: str) -> str:
    if n == 1:
        return f"1 {word}"
    return f"{n} {word[:-1]}ies" if word.endswith("y") else f"{n} {word}s"
