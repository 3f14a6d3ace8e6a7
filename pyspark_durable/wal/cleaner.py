"""The cleaner: snapshot first, then delete what nothing needs any more.

Order matters for crash safety: (1) write the namespace snapshot as of the first
needed step's commit offset, (2) delete region entries below what any needed step
or claiming table still refers to, (3) delete the commits log below the snapshot.
A crash between any two steps leaves a snapshot that recovery can replay from.

Entries of attempts still in flight are referred to by no step yet; a grace period
(``grace_ms``, by entry timestamp) keeps recent entries so that a slow attempt can
still commit. An attempt older than that whose entries were cleaned fails to commit
with :class:`AttemptLost` (retriable: the writer writes the step again).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from pyspark_durable.log import Log
from pyspark_durable.wal.namespace import COMMITS_LOG, Namespace
from pyspark_durable.wal.state import SNAPSHOT_NAME, NamespaceState

log = logging.getLogger(__name__)


@dataclass
class CleanReport:
    """What one cleaner pass did (the CLI prints it)."""

    snapshot_at: int
    first_retained_step: int
    regions: dict[int, tuple[int, int]] = field(default_factory=dict)  # region -> (before, after)
    commits_low: tuple[int, int] = (0, 0)

    @property
    def freed_entries(self) -> int:
        return sum(after - before for before, after in self.regions.values())


def _recent_bound(region: Log, grace_ms: float, low: int, high: int) -> int:
    """First offset whose entry is younger than ``grace_ms`` (binary search by timestamp)."""
    if grace_ms <= 0 or low >= high:
        return high
    cutoff = time.time() * 1000 - grace_ms
    lo, hi = low, high
    while lo < hi:
        mid = (lo + hi) // 2
        entry = next(iter(region.read(mid, mid + 1)))
        if entry.timestamp_ms >= cutoff:
            hi = mid
        else:
            lo = mid + 1
    return lo


class Cleaner:
    """Runs cleaner passes on one namespace, on demand or in a background thread."""

    def __init__(self, ns: Namespace, grace_ms: float = 300_000) -> None:
        self.ns = ns
        self.grace_ms = grace_ms
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run_once(self) -> CleanReport:
        ns = self.ns
        with ns._lock:
            state = ns.refresh()
            pos = state.first_needed_position()
            at, raw = state.snapshot()
            previous = ns.store.read_snapshot(SNAPSHOT_NAME)
            if previous is None or NamespaceState.from_snapshot(ns.name, previous).next_offset <= at:
                ns.store.write_snapshot(SNAPSHOT_NAME, raw)
            needed: dict[int, int] = {}
            for commit in state.index[pos:]:
                for run in commit.runs:
                    needed[run.region_id] = min(needed.get(run.region_id, run.start), run.start)
            first_step = state.index[pos].step if pos < len(state.index) else state.next_step
            report = CleanReport(at, first_step)
            for region_id in ns.store.list_regions():
                region = ns.store.open_region(region_id)
                low, high = region.low_watermark(), region.high_watermark()
                bound = min(needed.get(region_id, high),
                            _recent_bound(region, self.grace_ms, low, high))
                if bound > low:
                    region.delete_before(bound)
                report.regions[region_id] = (low, max(low, bound))
            commits = ns.store.open_log(COMMITS_LOG)
            before = commits.low_watermark()
            if at > before:
                commits.delete_before(at)
            report.commits_low = (before, max(before, at))
            state.trim(pos)
        log.info("namespace=%s: cleaned; snapshot at commits offset %d, first retained step %d, "
                 "%d region entries freed", ns.name, at, first_step, report.freed_entries)
        return report

    def start(self, interval_s: float = 60.0) -> None:
        """Run a pass every ``interval_s`` in a daemon thread until :meth:`stop`."""
        if self._thread is not None:
            return

        def loop() -> None:
            while not self._stop.wait(interval_s):
                try:
                    self.run_once()
                except Exception:  # keep the thread alive, never hide the error
                    log.exception("namespace=%s: cleaner pass failed", self.ns.name)

        self._thread = threading.Thread(target=loop, name=f"durablewal-cleaner-{self.ns.name}",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
