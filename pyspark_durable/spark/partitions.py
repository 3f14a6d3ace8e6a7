"""The tasks of a read: which steps of which region each Spark task reads, and the
windows of entries a step larger than a task's share is cut into.

The rule that keeps a split read the whole read is in
:meth:`pyspark_durable.wal.reading.StepReads.read_region_steps`: a window of a
run is a run, checked entry by entry against its step.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from pyspark_durable.wal.format.records import Run

SPLIT_MIN_ROWS = 100_000  # by default a read is not split into pieces smaller than this


def split_region(region_id: int, steps: list[tuple[int, list[Run]]],
                 target: int) -> list[WalPartition]:
    """One region's steps (each with its runs to read) as tasks of about ``target`` rows:
    whole steps while they fit, and a larger step cut into windows of consecutive
    entries (rows per entry estimated from its run), each its own task."""
    parts: list[WalPartition] = []
    rows_in = 0
    for step, runs in steps:
        rows = sum(r.rows for r in runs)
        if rows <= target or sum(r.entries for r in runs) < 2:
            if not parts or parts[-1].windows is not None or rows_in + rows > target:
                parts.append(WalPartition(region_id, []))
                rows_in = 0
            parts[-1].add(step)
            rows_in += rows
            continue
        cut, acc = None, 0.0
        for run in sorted(runs, key=lambda r: r.start):
            per_entry = run.rows / run.entries
            for offset in range(run.start, run.end):
                if cut is None:
                    cut = offset
                acc += per_entry
                if acc >= target:
                    parts.append(WalPartition(region_id, [step], [(cut, offset + 1)]))
                    cut, acc = None, 0.0
        if cut is not None:
            parts.append(WalPartition(region_id, [step], [(cut, max(r.end for r in runs))]))
        rows_in = target  # the next step starts a task of its own
    return parts


@dataclass
class WalPartition(InputPartition):
    """Steps of one region that one Spark task reads; ``windows`` (one per step, None for
    the whole step) are the region offsets ``[start, end)`` of a step split over tasks."""

    region_id: int
    steps: list[int]
    windows: list[tuple[int, int] | None] | None = None

    def add(self, step: int, window: tuple[int, int] | None = None) -> None:
        self.steps.append(step)
        if window is not None and self.windows is None:
            self.windows = [None] * (len(self.steps) - 1)
        if self.windows is not None:
            self.windows.append(window)
