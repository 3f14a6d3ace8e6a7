"""The cleaner: apply the retention policy, record a bound, delete below it, snapshot.

A pass, in this order (rules 5-8 of the protocol in :mod:`pyspark_durable.wal.namespace`):

1. replay the commits log; apply the retention policy (an ``expire`` record; age
   measured as :mod:`.clocks` says, so a cleaner ahead expires no more than one right);
2. propose per region a bound: no entry younger than ``grace_ms`` (an attempt in
   flight may still commit it; young by the writers' clocks too, :mod:`.clocks`), and
   on a backend that cannot free single entries (``Log.can_free``) no higher than the
   first offset a needed step refers to;
3. append one ``clean`` record with the bounds that move and the pass's time (a
   pass that moves no bound skips it if the last one is younger than a second);
4. replay to the end of the log, then delete each region below
   ``min(bound, first offset a needed step refers to)``, and free the entries between
   that point and the bound that no indexed step of this replay refers to (dead
   attempts: docs/protocol.md, "Dead attempts, freed after the grace");
5. read every stored snapshot back (:func:`.read_copies`: a damaged one never counts),
   write a snapshot versioned by its commits-log offset (when retention moved,
   :data:`SNAPSHOT_EVERY_RECORDS` records came since the newest, or damage left fewer
   than :data:`SNAPSHOTS_KEPT` good ones: a repair), then delete the commits log below
   the *older* of the two newest good snapshots (so a damaged newest snapshot is
   repaired by replaying from the one before it), then prune all but the newest
   :data:`SNAPSHOTS_KEPT` good snapshots, and the damaged ones once those exist.

On a full disk (:class:`DiskFull`) a pass releases the store's reserve and runs again
(:mod:`.reserve`); every pass ends by taking the reserve back if it was released.

Any number of passes may run at once in any processes: each one only deletes or
frees what its own replay proves unneeded, and a crash between any two steps leaves a
namespace that recovers (a recorded bound without a deletion only refuses late
commits of old attempts, which were going to be cleaned anyway).

An attempt older than ``grace_ms`` whose entries fall below a bound fails to
commit with :class:`AttemptLost` (retriable: the writer writes the step again).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

import pyspark_durable.wal.failpoints as failpoints  # the module: tests swap its hooks
from pyspark_durable.errors import CorruptEntryError, OffsetOutOfRange
from pyspark_durable.log import Log
from pyspark_durable.log.base import Reserve
from pyspark_durable.wal.format.records import CleanRecord, ClocksRecord, DedupRecord, OneOffsRecord
from pyspark_durable.wal.format.snapshot_file import SNAPSHOT_NAME
from pyspark_durable.wal.ledger import COMMITS_LOG
from pyspark_durable.wal.namespace import Namespace
from pyspark_durable.wal.progress import Progress, Silent
from pyspark_durable.wal.replay.clocks import (
    CLOCK_STEP_MS,
    age_reference_ms,
    clean_due,
    grace_reference_ms,
)
from pyspark_durable.wal.replay.dedup import DEDUP_ONE_OFFS, DEDUP_STEPS, DEDUP_WINDOW_MS
from pyspark_durable.wal.replay.snapshot_schedule import (
    SNAPSHOT_EVERY_RECORDS,
    SNAPSHOTS_KEPT,
    SnapshotCopies,
    every_offsets,
    prune,
    read_copies,
)
from pyspark_durable.wal.replay.state import NamespaceState
from pyspark_durable.wal.reserve import using_reserve

log = logging.getLogger(__name__)

DEFAULT_GRACE_MS = 3_600_000  # an hour, as Flink's Kafka sink waits for its transactions
RECORD_INTERVAL_MS = 1_000


@dataclass
class CleanReport:
    """What one cleaner pass did (the CLI prints it)."""

    snapshot_at: int
    first_retained_step: int
    replaced: list[int] = field(default_factory=list)  # damaged snapshot versions deleted
    regions: dict[int, tuple[int, int]] = field(default_factory=dict)  # region -> (before, after)
    commits_low: tuple[int, int] = (0, 0)
    expired_before: tuple[int, int] = (0, 0)  # by the retention policy: (before, after)
    reserve: Reserve = Reserve.NONE  # the store's room for freeing a full disk, after the pass
    freed: dict[int, int] = field(default_factory=dict)  # region -> dead entries freed in place

    @property
    def freed_entries(self) -> int:
        return sum(after - before for before, after in self.regions.values()) + \
            sum(self.freed.values())


def _recent_bound(region: Log, grace_ms: float, low: int, high: int, own_ms: int,
                  end: int) -> int:
    """First offset whose entry is younger than ``grace_ms`` (binary search by timestamp).

    Young by :func:`.clocks.grace_reference_ms`: this cleaner's clock, but never past the
    region's newest entry, so a cleaner ahead of the writers keeps what one with a right
    clock keeps. An entry another cleaner deleted meanwhile counts as old: it is gone
    either way.
    """
    if grace_ms <= 0 or low >= high:
        return high
    try:
        newest = next(iter(region.read(end - 1, end))).timestamp_ms  # `end`: the high mark
    except (OffsetOutOfRange, StopIteration):
        return low  # emptied meanwhile by another cleaner: nothing young to keep
    cutoff = grace_reference_ms(own_ms, newest) - grace_ms
    lo, hi = low, high
    while lo < hi:
        mid = (lo + hi) // 2
        try:
            entry = next(iter(region.read(mid, mid + 1)), None)
        except OffsetOutOfRange:
            lo = max(mid + 1, min(hi, region.low_watermark()))
            continue
        except CorruptEntryError:
            if not any(a <= mid < b for a, b in region.freed_ranges()):
                raise
            entry = None  # another cleaner punched it while we read it
        if entry is None:  # freed: it was older than a grace then, so it is now
            lo = mid + 1
            continue
        if entry.timestamp_ms >= cutoff:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _without(ranges: list[tuple[int, int]], gone: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``ranges`` less the offsets of ``gone`` (both ascending and disjoint)."""
    out = []
    for start, end in ranges:
        for g_start, g_end in gone:
            if g_end <= start or g_start >= end:
                continue
            if g_start > start:
                out.append((start, g_start))
            start = max(start, g_end)
        if start < end:
            out.append((start, end))
    return out


def _commits_needed_from(copies: SnapshotCopies, low: int) -> int:
    """Where the commits log must start: the older of the kept good snapshots is replayed
    from its offset if the newest is damaged (the redundant copy), and each kept snapshot
    reads its steps back from its ``keep_from`` on. Nothing is trimmed while fewer than
    :data:`SNAPSHOTS_KEPT` good ones exist or a listed one vanished meanwhile (another
    cleaner pruned: its successor decides) (``low``)."""
    kept = copies.kept()
    if len(kept) < SNAPSHOTS_KEPT or copies.vanished:
        return low
    return min(kept[0], *(copies.good[v] for v in kept))


class _Watch:
    """One pass's progress as a task counting regions: one is done when the pass opens
    the next, all when the pass returns; the description names what is under way."""

    def __init__(self, progress: Progress, regions: int) -> None:
        self.progress, self.regions, self.opened = progress, regions, 0
        self.task = progress.task("clean", regions, "regions")

    def examining(self, region_id: int) -> None:
        self.progress.update(self.task, completed=self.opened,
                             description=f"clean: region {region_id}")
        self.opened += 1

    def deleting(self, region_id: int, bound: int) -> None:
        self.progress.update(self.task, description=f"clean: deleting region {region_id} "
                                                    f"below {bound}")

    def done(self) -> None:
        self.progress.update(self.task, completed=self.regions, description="clean: done")


class Cleaner:
    """Runs cleaner passes on one namespace, on demand or in a background thread."""

    def __init__(self, ns: Namespace, grace_ms: float = DEFAULT_GRACE_MS) -> None:
        self.ns = ns
        self.grace_ms = grace_ms
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run_once(self, progress: Progress | None = None) -> CleanReport:
        """One pass (the module docstring); on a full disk it spends the store's reserve,
        and it takes the reserve back once it freed room for it.

        ``progress`` is told of the regions examined (a few reads each, slow on a remote
        broker) and of each deletion, as one task counting regions.
        """
        watch = _Watch(progress or Silent(), len(self.ns.store.list_regions()))
        report = using_reserve(self.ns.store, lambda: self._pass(watch))
        report.reserve = self.ns.store.restore_reserve()
        watch.done()
        return report

    def _pass(self, watch: _Watch) -> CleanReport:
        """A pass that found steps its handle holds trimmed under it (other cleaners
        trimmed below newer snapshots) heals and runs again from step 1: any number of
        passes may run, and the healed state is as new as the log."""
        return self.ns.ledger.healing(lambda _: self._pass_once(watch))

    def _pass_once(self, watch: _Watch) -> CleanReport:
        ns = self.ns
        with ns.ledger.exclusive():
            state = self._bounded_state()
            expired = state.expired_before
            own_ms = int(time.time() * 1000)
            target = ns.retention().expire_target(
                state, age_reference_ms(own_ms, state.dedup.step_clock_ms))
            if target > expired:
                ns.expire(target)
            state = ns.ledger.refreshed()
            proposed, regions = self._propose(state, own_ms, watch)
            failpoints.reached("clean.proposed")
            now_ms = int(time.time() * 1000)
            # a pass with no bound to move records only its time, and not more than once
            # per RECORD_INTERVAL_MS (passes back to back would only lengthen every replay)
            if proposed or clean_due(now_ms, state.last_clean_ms, RECORD_INTERVAL_MS):
                ns.ledger.append(CleanRecord(now_ms, proposed))
            failpoints.reached("clean.recorded")
            state = ns.ledger.refreshed()  # every step ordered before our bound is in this replay
            needed = state.needed_starts()
            first_step = state.first_needed_step()
            report = CleanReport(0, first_step, expired_before=(expired, state.expired_before))
            doomed: dict[int, tuple[Log, list[tuple[int, int]]]] = {}
            for region_id, (region, low, _) in regions.items():
                recorded = state.clean_bounds.get(region_id, 0)
                bound = min(recorded, needed.get(region_id, 1 << 64))
                if bound > low:
                    watch.deleting(region_id, bound)
                    region.delete_before(bound)
                report.regions[region_id] = (low, max(low, bound))
                if region.can_free:
                    dead = self._dead(state, region, region_id, max(low, bound), recorded)
                    if dead:
                        doomed[region_id] = (region, dead)
            if doomed:
                failpoints.reached("clean.freeing")
            for region_id, (region, dead) in doomed.items():
                region.free(dead)
                report.freed[region_id] = sum(end - begin for begin, end in dead)
            failpoints.reached("clean.deleted")
            self._snapshot_and_trim(state, first_step, expired, report)
        log.info("namespace=%s: cleaned; snapshot at commits offset %d, first retained step %d, "
                 "%d region entries freed", ns.name, report.snapshot_at, first_step,
                 report.freed_entries)
        return report

    @staticmethod
    def _dead(state: NamespaceState, region: Log, region_id: int, start: int,
              bound: int) -> list[tuple[int, int]]:
        """What step 4 frees: the entries of ``[start, bound)`` (below a recorded bound)
        that no indexed step of ``state`` refers to, needed or not, and not freed yet.
        ``state`` is a replay past this pass's ``clean`` record, so by rule 2 no step
        record that comes later can refer to them (docs/protocol.md, "The rule that
        makes cleaning safe")."""
        if bound <= start:
            return []
        # counted from the step index's numbers first: while every entry of the range is
        # referred to or freed (the pass after a pass that freed), no chunk is read
        kept, expired = state.index.region_spans({region_id: (start, bound)},
                                                 state.expired_before)[region_id]
        already = region.freed_ranges()
        freed = sum(max(0, min(end, bound) - max(begin, start)) for begin, end in already)
        if kept + expired + freed >= bound - start:
            return []
        dead, at = [], start
        for run_start, run_end in sorted(state.index.referred(region_id, start, bound)):
            if run_start > at:
                dead.append((at, min(run_start, bound)))
            at = max(at, run_end)
            if at >= bound:
                break
        if at < bound:
            dead.append((at, bound))
        return _without(dead, already)

    def _bounded_state(self) -> NamespaceState:
        """The replayed state, after bounding a WAL an older version made: its dedup
        window, the clock rules (clocks.py) and the number of one-offs."""
        ns = self.ns
        state = ns.ledger.refreshed()
        if state.dedup.window_ms is None:
            ns.ledger.append(DedupRecord(DEDUP_WINDOW_MS, DEDUP_STEPS))
            state = ns.ledger.refreshed()
        if state.dedup.step_ms is None:
            ns.ledger.append(ClocksRecord(CLOCK_STEP_MS))
            state = ns.ledger.refreshed()
        if state.dedup.max_one_offs is None:
            ns.ledger.append(OneOffsRecord(DEDUP_ONE_OFFS))
            state = ns.ledger.refreshed()
        return state

    def _propose(self, state: NamespaceState, own_ms: int, watch: _Watch
                 ) -> tuple[dict[int, int], dict[int, tuple[Log, int, int]]]:
        """Per region the bound to record (only those that move), and each region opened
        with its watermarks."""
        needed = state.needed_starts()
        proposed: dict[int, int] = {}
        regions: dict[int, tuple[Log, int, int]] = {}
        for region_id in self.ns.store.list_regions():
            watch.examining(region_id)
            region = self.ns.store.open_region(region_id)
            low, high = region.low_watermark(), region.high_watermark()
            regions[region_id] = (region, low, high)
            # where single entries can be freed, the bound is the grace's cutoff alone
            # (step 4 keeps what steps refer to and frees the dead entries in between);
            # elsewhere the first offset a needed step refers to caps it, and the cutoff
            # is searched only below that (no entry read while every step is needed)
            limit = high if region.can_free else min(needed.get(region_id, high), high)
            # below the recorded bound every entry was older than a cutoff already: the
            # search starts there, so a pass reads what came since, not the history
            start = max(low, state.clean_bounds.get(region_id, 0))
            if limit <= start:
                continue
            bound = _recent_bound(region, self.grace_ms, start, limit, own_ms, high)
            if bound > state.clean_bounds.get(region_id, 0):
                proposed[region_id] = bound
        return proposed, regions

    def _snapshot_and_trim(self, state: NamespaceState, first_step: int, expired: int,
                           report: CleanReport) -> None:
        """Step 5 of a pass: a snapshot when due or when damage left fewer than
        :data:`SNAPSHOTS_KEPT` good ones, then the commits log trimmed below the older of
        the two newest good snapshots, then old and damaged snapshots pruned."""
        ns = self.ns
        # folds the index: the handle holds chunks
        at, raw = state.snapshot(first_step, record_copies=ns.store.record_copies)
        failpoints.reached("clean.snapshot")
        copies = read_copies(ns.store, ns.name)
        versions = sorted([*copies.good, *copies.damaged, *copies.newer])
        # a snapshot when the replay after the newest one grew, or retention moved:
        # not every pass (each is a stored copy of the state; on Kafka a record of
        # the compacted snapshots topic that every open reads until compaction)
        moved = report.freed_entries > 0 or state.expired_before > expired
        if not versions or (versions[-1] < at and (
                moved or at - versions[-1] >= every_offsets(
                    ns.store, ns.store.snapshot_every_records or SNAPSHOT_EVERY_RECORDS))):
            ns.store.write_snapshot(SNAPSHOT_NAME, at, raw)
            copies.good[at] = state.snapshot_keep_from(ns.name, raw, at)
        while copies.short():
            # a repair: a fresh copy, at a version past every stored one (a record with
            # this pass's time moves the log's end when a stored snapshot already sits there)
            if at <= max(versions + list(copies.good)):
                ns.ledger.append(CleanRecord(int(time.time() * 1000), {}))
                state = ns.ledger.refreshed()
                at, raw = state.snapshot(first_step, record_copies=ns.store.record_copies)
            ns.store.write_snapshot(SNAPSHOT_NAME, at, raw)
            copies.good[at] = state.snapshot_keep_from(ns.name, raw, at)
            log.warning("namespace=%s: wrote snapshot %d in place of damaged snapshot(s) %s",
                        ns.name, at, sorted(copies.damaged))
        report.snapshot_at = at
        if copies.good or versions:
            ns.ledger.snapshots.newest = max(ns.ledger.snapshots.newest, *copies.good, *versions)
        failpoints.reached("clean.snapshotted")
        commits = ns.store.open_log(COMMITS_LOG)
        before = commits.low_watermark()
        upto = _commits_needed_from(copies, before)
        if upto > before:
            commits.delete_before(upto)
        report.commits_low = (before, max(before, upto))
        damaged = set(copies.damaged)
        report.replaced = [v for v in prune(ns.store, copies) if v in damaged]

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
