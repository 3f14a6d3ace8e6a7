"""How far a registered reader is behind the WAL's end: steps, rows, bytes, seconds.

A reader registers with ``readerId`` (see docs/operations.md, Retention): the commit log records
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
    for reader, position in sorted(ns.info.readers().items()):
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


# name, HELP text, ReaderLag field: gauges in Prometheus's base units (seconds, bytes)
PROMETHEUS_GAUGES = (
    ("durablewal_reader_lag_steps", "Committed steps the reader has not read (its next step to "
     "the WAL's end); 0 when caught up.", "steps_behind"),
    ("durablewal_reader_lag_rows", "Rows of the retained steps the reader has not read.",
     "rows_behind"),
    ("durablewal_reader_lag_bytes", "Bytes of the retained steps the reader has not read.",
     "bytes_behind"),
    ("durablewal_reader_lag_seconds", "Now minus the commit time of the reader's next step; "
     "0 when caught up, so it does not grow while a caught-up reader idles.", "seconds_behind"),
    ("durablewal_reader_expired_steps", "Steps the reader had not read that retention "
     "expired (lost to it).", "expired_behind"),
    ("durablewal_reader_next_step", "The first step the reader has not committed.", "next_step"),
    ("durablewal_reader_holds_retention", "1 if the reader holds retention (holdRetention).",
     "holds_retention"),
)


def _label(value: str) -> str:
    """A label value escaped as the text exposition format asks: backslash, quote, newline."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def prometheus_text(namespace: str, end_step: int, lags: list[ReaderLag]) -> str:
    """The readers' lag in Prometheus's text exposition format, one gauge family per
    measure labelled by namespace and reader, plus the WAL's next step: what a node
    exporter's textfile collector reads. Written by hand: seven gauges do not need a
    client library."""
    ns = f'namespace="{_label(namespace)}"'
    lines = ["# HELP durablewal_wal_next_step The step the namespace commits next (its end).",
             "# TYPE durablewal_wal_next_step gauge", f"durablewal_wal_next_step{{{ns}}} {end_step}"]
    for name, help_, field in PROMETHEUS_GAUGES:
        lines += [f"# HELP {name} {help_}", f"# TYPE {name} gauge"]
        for lag in lags:
            value = getattr(lag, field)
            value = int(value) if isinstance(value, bool) else value
            lines.append(f'{name}{{{ns},reader="{_label(lag.reader)}"}} {value}')
    return "\n".join(lines) + "\n"
