"""The integrity check's region pass (4. in :mod:`~pyspark_durable.wal.upkeep.check`):
every region log read once, from its low to its high watermark, each entry checked
and each still-needed step's run held against the entries it names.

It is a pass of its own because it reads the most and judges the most kinds of
damage, and because it has to tell damage from a cleaner working beside it: entries
gone under a read are lost only if the commits log, read again after the loss was
seen, still needs them (:class:`_LogNow`).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark_durable.codec import codec_for, decode_key, decode_value
from pyspark_durable.errors import CorruptEntryError, DurableWalError
from pyspark_durable.log import Entry, Log, LogStore
from pyspark_durable.wal import failpoints
from pyspark_durable.wal.format.records import StepCommit
from pyspark_durable.wal.format.runs import DIGEST_HEX, Run, entry_digest
from pyspark_durable.wal.ledger import COMMITS_LOG
from pyspark_durable.wal.progress import Progress
from pyspark_durable.wal.reading import foreign_attempt, foreign_table
from pyspark_durable.wal.replay.state import NamespaceState
from pyspark_durable.wal.upkeep.check_report import CheckReport, Fix


@dataclass
class _RunCheck:
    """What reading a region found for one run of one needed step."""

    commit: StepCommit
    run: Run
    entries: int = 0
    rows: int = 0
    settled: bool = False  # reported or finished: no further verdict
    mismatched: bool = False  # an entry of another table: row counts mean nothing
    lost: bool = False  # one of its entries is damaged: reported as a lost step


class _LogNow:
    """The commits log as it is now, for a check that finds entries gone which a step of
    the state it read needs: a cleaner records an expiry (and a clean bound) before it
    deletes or frees, so the log read *after* that observation says whether a cleaner
    released them (the step is no longer needed) or they are lost. Recovered once, at
    the first question, so an observation costs one recovery however many runs it
    touches; a later observation makes a new one (the cleaner goes on)."""

    def __init__(self, store: LogStore) -> None:
        self.store = store
        self._state: NamespaceState | None = None
        self._read = False

    def state(self) -> NamespaceState | None:
        if not self._read:
            self._read = True
            try:
                commits = self.store.open_log(COMMITS_LOG, create=False)
                self._state = NamespaceState.recover(self.store, commits)
            except DurableWalError:
                pass  # the commits log itself is judged by its own pass: nothing released
        return self._state

    def released(self, rc: _RunCheck) -> bool:
        state = self.state()
        return state is not None and not state.needed(rc.commit)

    def clean_bound(self, region_id: int) -> int:
        state = self.state()
        return 0 if state is None else state.clean_bounds.get(region_id, 0)


class RegionCheck:
    """One check's region pass; its findings go to the check's report."""

    def __init__(self, store: LogStore, report: CheckReport, progress: Progress,
                 deep: bool) -> None:
        self.store = store
        self.report = report
        self.progress = progress
        self.deep = deep  # also re-hash every needed entry against its step's digest

    def run(self, state: NamespaceState | None, steps: list[StepCommit]) -> set[int]:
        """Check every region (``steps``: the state's indexed steps, read back once);
        the ids of the regions that exist."""
        runs = self._needed_runs(state, steps) if state is not None else {}
        existing = set(self.store.list_regions())
        opened: list[tuple[int, Log, int, int]] = []
        for region_id in sorted(existing | set(runs)):
            if region_id not in existing:
                missing = sorted({rc.commit.step for rc in runs[region_id]})
                self.report.problem(f"region log is missing; steps {_steps_text(missing)} have "
                                    "entries in it", region=region_id)
                continue
            try:
                region = self.store.open_region(region_id, create=False)
                opened.append((region_id, region, region.low_watermark(),
                               region.high_watermark()))
            except DurableWalError as exc:
                self.report.problem_from(exc, region=region_id)
                self._not_verified(region_id, runs.get(region_id, []), None)
        self.report.regions = len(existing)
        task = self.progress.task("check: regions", sum(high - low for _, _, low, high in opened),
                                  "entries")
        for region_id, region, low, high in opened:
            self.progress.update(task, description=f"check: region {region_id}")
            self._check_region(state, region_id, region, low, high,
                               sorted(runs.get(region_id, []), key=lambda rc: rc.run.start),
                               task)
        return existing

    def _needed_runs(self, state: NamespaceState, steps: list[StepCommit]
                     ) -> dict[int, list[_RunCheck]]:
        """Runs of the steps still needed (retained, or claimed by a table), by region."""
        by_region: dict[int, list[_RunCheck]] = defaultdict(list)
        for commit in steps:
            if not state.needed(commit):
                continue  # expired and claimed by no table: the cleaner may delete it
            self.report.steps += 1
            for run in commit.runs:
                info = state.tables.get(run.table_id)
                if info is None:
                    self.report.problem(f"step refers to unknown table id {run.table_id}",
                                        step=commit.step, region=run.region_id)
                    continue
                if run.schema_version >= len(info.schemas):
                    self.report.problem(f"step names schema version {run.schema_version} of table "
                                        f"{info.name}, which has {len(info.schemas)}",
                                        step=commit.step, region=run.region_id)
                    continue
                self.report.runs += 1
                by_region[run.region_id].append(_RunCheck(commit, run))
        return by_region

    def _check_region(self, state: NamespaceState | None, region_id: int, region: Log, low: int,
                      high: int, runs: list[_RunCheck], task: Any) -> None:
        """Read the region's retained entries once, checking each, and each step's run
        against the entries it needs (runs the region cannot hold are settled first)."""
        self._check_run_bounds(state, region_id, low, high, runs)
        self._check_freed(region_id, region, runs)
        pending = [rc for rc in runs if not rc.settled]
        i, offset = 0, low
        failpoints.reached("check.region_opening")
        entries = _entries(region, low, high)
        while True:
            try:
                entry = next(entries)
                if offset == low:
                    failpoints.reached("check.region_reading")
            except StopIteration:
                break
            except DurableWalError as exc:
                at = exc.where.get("offset")
                local = isinstance(exc, CorruptEntryError) and isinstance(at, int) and \
                    offset <= at < high
                if local:  # damage stays local: read on past it
                    # (unless a cleaner freed it while this read ran: no step refers to it)
                    if not _freed_now(region, at):
                        self._damaged_entry(state, region_id, exc, at, pending)
                    offset = at + 1
                    entries = _entries(region, offset, high)
                    continue
                moved = self._deleted_under_read(region_id, region, offset, pending[i:])
                if moved is not None:  # a cleaner deleted what it had expired: read on
                    offset = moved
                    entries = _entries(region, offset, high)
                    continue
                self.report.problem_from(exc, region=region_id, offset=offset)
                if offset < high:
                    self.report.problem(f"reading stopped: entries [{offset}, {high}) were not "
                                 "verified", region=region_id, offset=offset)
                break
            offset = entry.offset + 1
            self.report.entries += 1
            self.progress.advance(task)
            table_id = self._check_entry(state, region_id, entry)
            while i < len(pending) and pending[i].run.end <= entry.offset:
                self._finish(pending[i], region_id)
                i += 1
            if i < len(pending) and pending[i].run.start <= entry.offset:
                assert state is not None  # runs come from a state
                self._check_run_entry(state, pending[i], region_id, entry, table_id)
        reached = [rc for rc in pending[i:] if rc.run.start < offset]
        for rc in reached:
            self._finish(rc, region_id)
        self._not_verified(region_id, [rc for rc in pending[i:]
                                       if rc.run.start >= offset and not rc.settled], offset)

    def _deleted_under_read(self, region_id: int, region: Log, offset: int,
                            pending: list[_RunCheck]) -> int | None:
        """Where to read on when a cleaner deleted segments from under the read: the new
        low watermark, once every run below it is settled (expired since: nothing to
        check; else named lost). None when nothing was deleted (a real read error)."""
        try:
            low = region.low_watermark()
        except DurableWalError:
            return None
        if low <= offset:
            return None
        now = _LogNow(self.store)
        for rc in pending:
            if rc.run.start < low and not rc.settled:
                self._cleaned_below(rc, region_id, low, now)
        return low

    def _damaged_entry(self, state: NamespaceState | None, region_id: int,
                       exc: DurableWalError, at: int, pending: list[_RunCheck]) -> None:
        """One damaged entry: a warning if every step needing it is recorded lost (by
        ``durablewal repair``), else the damage and each step that lost it, named once."""
        owners = [rc for rc in pending if rc.run.start <= at < rc.run.end]
        recorded = state.lost if state is not None else {}
        known = bool(owners) and all(rc.commit.step in recorded for rc in owners)
        if not known:
            self.report.problem_from(exc, region=region_id, offset=at)
        for rc in owners:
            if rc.lost:
                continue
            rc.lost = True
            if known:
                self.report.warnings.append(
                    f"region={region_id} offset={at}: step {rc.commit.step} is recorded lost "
                    f"({exc.reason}); its reads say so")
            else:
                self.report.problem(f"step {rc.commit.step} is lost: its entry at offset {at} is "
                                    "damaged", Fix.RESTORE, region=region_id, offset=at,
                                    step=rc.commit.step)

    def _check_freed(self, region_id: int, region: Log, runs: list[_RunCheck]) -> None:
        """A step that refers to a freed entry lost it: named, and not read again."""
        freed = region.freed_ranges()
        now = _LogNow(self.store)
        for rc in runs:
            gone = [(a, b) for a, b in freed if a < rc.run.end and b > rc.run.start]
            if gone and not rc.settled and now.released(rc):
                rc.settled = True  # freed by a cleaner that expired it during the check
            elif gone and not rc.settled:
                a, b = max(gone[0][0], rc.run.start), min(gone[0][1], rc.run.end)
                self.report.problem(f"step {rc.commit.step} is lost: its entries [{a}, {b}) were "
                             "freed", region=region_id, offset=a, step=rc.commit.step)
                rc.lost = True

    def _check_run_bounds(self, state: NamespaceState | None, region_id: int, low: int,
                          high: int, runs: list[_RunCheck]) -> None:
        """The region's clean bound against its low watermark, runs that overlap, and runs
        below the low watermark or past the end (settled: there is nothing to read)."""
        # a release before `clean` records deleted without recording: nothing to compare
        bound = None if state is None or state.bounds_unrecorded else \
            state.clean_bounds.get(region_id, 0)
        now = _LogNow(self.store)  # read after ``low``: what a cleaner recorded before it
        if bound is not None and low > bound and low > now.clean_bound(region_id):
            self.report.problem(f"the region was cleaned below {low}, above the bound {bound} the "
                                "commit log recorded: a cleaner deleted without recording first",
                                region=region_id, offset=bound)
        for before, after in itertools.pairwise(runs):
            if after.run.start < before.run.end:
                self.report.problem(f"offsets [{after.run.start}, {before.run.end}) are claimed by "
                             f"steps {before.commit.step} and {after.commit.step}",
                             region=region_id)
        for rc in runs:
            if rc.run.start < low:
                self._cleaned_below(rc, region_id, low, now)
            elif rc.run.end > high:
                self.report.problem(f"step {rc.commit.step} needs entries [{rc.run.start}, "
                                    f"{rc.run.end}) but the region ends at {high}",
                             region=region_id, offset=high, step=rc.commit.step)
                rc.settled = True

    def _cleaned_below(self, rc: _RunCheck, region_id: int, low: int, now: _LogNow) -> None:
        """A run below the region's low watermark: lost, unless a cleaner expired its
        step after the check read the commits log (then there is nothing to check)."""
        if not now.released(rc):
            self.report.problem(f"step {rc.commit.step} needs entries [{rc.run.start}, "
                                f"{rc.run.end}) but the region was cleaned below {low}",
                         region=region_id, offset=rc.run.start, step=rc.commit.step)
        rc.settled = True

    def _check_entry(self, state: NamespaceState | None, region_id: int,
                     entry: Entry) -> int | None:
        """Key and value version of any entry (committed or not); its table id."""
        try:
            ns_id = state.namespace_id if state is not None else None
            key = decode_key(entry.key, expect_namespace_id=ns_id,
                             expect_region_id=region_id, offset=entry.offset)
            decode_value(entry.value, region_id=region_id, offset=entry.offset)
            return key.table_id
        except DurableWalError as exc:
            self.report.problem_from(exc, region=region_id, offset=entry.offset)
            return None

    def _check_run_entry(self, state: NamespaceState, rc: _RunCheck, region_id: int,
                         entry: Entry, table_id: int | None) -> None:
        step = rc.commit.step
        rc.entries += 1
        if self.deep and not rc.run.digests:
            self.report.undigested += 1
        elif self.deep:
            self.report.rehashed += 1
            self.report.rehashed_bytes += len(entry.key) + len(entry.value)
            at = (entry.offset - rc.run.start) * DIGEST_HEX
            if entry_digest(entry.key, entry.value) != rc.run.digests[at:at + DIGEST_HEX]:
                self.report.problem(f"entry is not the one step {step} committed: its content "
                                    "digest differs (rewritten, restored from another copy, or "
                                    "another WAL's)", region=region_id, offset=entry.offset, step=step)
        problem = foreign_attempt(rc.commit, entry)
        if problem:
            self.report.problem(problem, region=region_id, offset=entry.offset, step=step)
        problem = None if table_id is None else foreign_table(state.tables, rc.commit,
                                                              rc.run, table_id)
        if problem:
            self.report.problem(problem, region=region_id, offset=entry.offset, step=step)
            rc.mismatched = True
            return
        info = state.tables[rc.run.table_id]
        try:
            payload = decode_value(entry.value, region_id=region_id, offset=entry.offset)
            schema = info.schemas[rc.run.schema_version]
            batches = codec_for(info.payload_format, schema).decode(payload)
            rc.rows += sum(b.num_rows for b in batches)
        except Exception as exc:  # noqa: BLE001 - any decode failure is a finding here
            self.report.problem(f"payload of table {info.name} does not decode: "
                                f"{type(exc).__name__}: {exc}", region=region_id,
                                offset=entry.offset, step=step)

    def _finish(self, rc: _RunCheck, region_id: int) -> None:
        run = rc.run
        if rc.settled:
            return  # judged already (released by a cleaner during the check, say)
        if rc.lost or (rc.mismatched and rc.entries == run.entries):
            pass  # lost to a damaged entry, or already reported entry by entry
        elif (rc.entries, rc.rows) != (run.entries, run.rows):
            self.report.problem(f"run [{run.start}, {run.end}) read back {rc.entries} entries and "
                         f"{rc.rows} rows, step {rc.commit.step} says {run.entries} entries "
                         f"and {run.rows} rows", region=region_id, offset=run.start,
                         step=rc.commit.step)
        rc.settled = True

    def _not_verified(self, region_id: int, runs: list[_RunCheck], offset: int | None) -> None:
        if not runs:
            return
        steps = sorted({rc.commit.step for rc in runs})
        self.report.problem(f"{len(runs)} runs of steps {_steps_text(steps)} could not be verified",
                            region=region_id, offset=offset)


def _entries(region: Log, start: int, end: int) -> Iterator[Entry]:
    """The entries of ``[start, end)``, read lazily: a read that fails as it opens (a
    cleaner deleted segments since the bounds were read) fails at the first ``next``,
    where the check's read loop judges every read error."""
    if end > start:
        yield from region.read(start, end)


def _freed_now(region: Log, offset: int) -> bool:
    """Was ``offset`` freed (a punched frame reads as damage to a read that began first)?"""
    return any(a <= offset < b for a, b in region.freed_ranges())


def _steps_text(steps: list[int]) -> str:
    return ", ".join(map(str, steps[:10])) + (f" and {len(steps) - 10} more"
                                               if len(steps) > 10 else "")
