"""How far a registered reader is behind the WAL's end: steps, rows, bytes, seconds.

A reader registers with ``readerId`` (see README, Retention): the commit log records
the next step it needs. Its lag is what lies between that step and the next step to
be committed. ``durablewal lag`` and :class:`pyspark_durable.spark.lag.LagListener`
both ask here, so they say the same thing.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

from pyspark_durable.wal import Namespace


@dataclass(frozen=True)
class ReaderLag:
    """One reader's distance to the WAL's end, as of one refresh of the namespace."""

    reader: str
    next_step: int  # the first step the reader has not committed
    end_step: int  # the WAL's next step
    steps_behind: int
    rows_behind: int  # of the retained steps it has not read
    bytes_behind: int
    expired_behind: int  # steps it has not read that were expired (lost to it)
    seconds_behind: float  # now minus the commit time of its next step; 0 when caught up
    holds_retention: bool

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def text(self) -> str:
        expired = f", {self.expired_behind} expired" if self.expired_behind else ""
        return (f"reader {self.reader!r}: {self.steps_behind} steps, {self.rows_behind} rows, "
                f"{self.bytes_behind} bytes, {self.seconds_behind:.1f} s behind (next step "
                f"{self.next_step}, WAL end {self.end_step}{expired})")


def reader_lags(ns: Namespace, now_ms: int | None = None) -> list[ReaderLag]:
    """Every registered reader's lag, by reader id; refreshes ``ns`` once."""
    steps = ns.steps()
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    lags = []
    for reader, position in sorted(ns.readers().items()):
        first = max(position.next_step, steps.start)
        commits = [ns.step_commit(s) for s in range(first, steps.stop)]
        seconds = 0.0
        if commits:
            seconds = max(0.0, (now_ms - commits[0].timestamp_ms) / 1000)
        lags.append(ReaderLag(
            reader=reader, next_step=position.next_step, end_step=steps.stop,
            steps_behind=max(0, steps.stop - position.next_step),
            rows_behind=sum(c.rows for c in commits),
            bytes_behind=sum(c.size_bytes for c in commits),
            expired_behind=max(0, min(steps.start, steps.stop) - position.next_step),
            seconds_behind=seconds, holds_retention=position.hold))
    return lags
