"""The integrity check (``durablewal check``): verify a namespace end to end, and list
every problem found. The per-entry checks are the read path's own
(:func:`~pyspark_durable.wal.reading.foreign_attempt`, ``foreign_table``, the key and
value decoders); what differs is that this goes on after a problem.

Readers stop at the first problem they meet; an operator wants all of them, named by
place. So this reads everything once and keeps going where it can:

1. the commits log, record by record (CRC by the backend, then the JSON record);
2. the snapshot against the commits log: its ``at`` offset is not below the log's low
   watermark (else recovery is impossible), recovery from it works, and, while the
   log is whole, it agrees with a replay of the full log; no region was cleaned
   above the clean bound the commit log recorded for it;
3. sequence density per table over the indexed steps (each step starts where the
   previous one ended; the last one ends at the table's next sequence);
4. every region log from its low to its high watermark, in one pass: each entry's
   CRC (by the backend), key (version, namespace id, region) and value version; and
   each run of each still-needed step: inside the region's watermarks, entries of
   the attempts the commit names, of the table it says, as many entries and rows as
   it says (payloads decoded).

Before those, the storage says who besides its owner can read it (a file WAL with
folders or files wider than its ``access``): a warning, not a problem, since nothing is
damaged, given once with the command that tightens it.

A region read that fails stops that region (the backend cannot skip past a frame it
cannot trust); what lies after it is reported as not verified.
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
from pyspark_durable.wal.format.records import StepCommit, decode_record
from pyspark_durable.wal.format.runs import DIGEST_HEX, Run, entry_digest
from pyspark_durable.wal.format.snapshot_file import SNAPSHOT_NAME
from pyspark_durable.wal.ledger import COMMITS_LOG
from pyspark_durable.wal.progress import Progress, Silent
from pyspark_durable.wal.reading import foreign_attempt, foreign_table, table_name
from pyspark_durable.wal.replay.copies import CommitsReader, Lost, Saved
from pyspark_durable.wal.replay.snapshot_schedule import SnapshotCopies, read_copies
from pyspark_durable.wal.replay.state import NamespaceState
from pyspark_durable.wal.upkeep.check_report import CheckReport, Fix, Problem


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


class Checker:
    """One ``check`` pass over one namespace of a store."""

    def __init__(self, store: LogStore, progress: Progress | None = None,
                 deep: bool = False) -> None:
        self.store = store
        self.deep = deep  # also re-hash every needed entry against its step's digest
        self.progress: Progress = progress or Silent()
        self.report = CheckReport(store.namespace, deep=deep)
        self.state: NamespaceState | None = None
        self._full_replay: NamespaceState | None = None  # set while the log is whole
        self._regions_seen: set[int] = set()
        self._steps_of: dict[int, list[StepCommit]] = {}
        self._copies: SnapshotCopies | None = None  # the stored snapshots, read once

    def _steps(self, state: NamespaceState) -> list[StepCommit]:
        """The state's indexed steps, read back from the commits log once for all checks."""
        steps = self._steps_of.get(id(state))
        if steps is None:
            steps = self._steps_of[id(state)] = list(state.index)
        return steps

    def _steps_read(self, state: NamespaceState) -> bool:
        """Whether the state's steps read back; a record lost under a snapshot's chunk is
        named once here (the log pass named the damaged offset)."""
        try:
            self._steps(state)
            return True
        except DurableWalError as exc:
            self._commits_problem(exc)
            return False

    def _commits_problem(self, exc: DurableWalError) -> None:
        """A commits-log error as a problem, unless the log pass named its offset."""
        offset = exc.where.get("offset")
        if offset is None or not any(p.where.get("offset") == offset and
                                     p.where.get("log") == COMMITS_LOG
                                     for p in self.report.problems):
            self.problem_from(exc, log=COMMITS_LOG)

    # -- problems -----------------------------------------------------------------

    def problem(self, message: str, fix: Fix | None = None, **where: Any) -> None:
        self.report.problems.append(Problem({k: v for k, v in where.items() if v is not None},
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

    # -- the pass -----------------------------------------------------------------

    def run(self) -> CheckReport:
        for log_name, problem in self.store.settings_problems():
            self.problem(problem, log=log_name)
        # once per check: a readable WAL is not damage, but every row is in its files
        self.report.warnings.extend(self.store.access_warnings())
        commits = self._check_commits_log()
        self._check_snapshot_copies()
        if commits is not None:
            self.state = self._check_snapshot(commits)
        # without a recovered state, a replay of the whole log still names every step;
        # without either, regions are still read for CRCs and keys
        state = self.state if self.state is not None else self._full_replay
        if state is not None and not self._steps_read(state):
            state = None  # its steps cannot be read back (named): regions checked alone
        if state is not None:
            self.report.tables = len(state.tables)
            self._check_sequences(state)
            for reader, position in sorted(state.readers.items()):
                if position.next_step > state.next_step:
                    self.problem(f"reader {reader!r} is recorded at step {position.next_step}, "
                                 f"past the last committed step {state.next_step - 1}",
                                 log=COMMITS_LOG)
        failpoints.reached("check.commits_read")
        self._check_regions(state)
        self._report_repairs()
        return self.report

    def _check_snapshot_copies(self) -> None:
        """Every stored snapshot version decodes (the older one is the redundant copy):
        one problem per damaged version, saying what recovery and the cleaner do with it.
        The newest good version is the one :meth:`_check_snapshot` compares."""
        try:
            self._copies = read_copies(self.store)
        except DurableWalError as exc:
            self.problem_from(exc, snapshot=SNAPSHOT_NAME)
            return
        for exc in self._copies.newer.values():
            self.problem_from(exc)
        good = bool(self._copies.good)
        for version, exc in sorted(self._copies.damaged.items()):
            then = ("recovery skips it, and the next cleaner pass (durablewal clean) writes "
                    "a good snapshot in its place and deletes it") if good else \
                "no stored snapshot is good: recovery replays the commits log from its start"
            self.problem(f"{exc.reason}; {then}", Fix.CLEAN, snapshot=SNAPSHOT_NAME,
                         version=version)

    def _report_repairs(self) -> None:
        """Damage the logs tolerated while being read (their files, named in the text)."""
        for name in [COMMITS_LOG, *(f"region_{r}" for r in sorted(self._regions_seen))]:
            try:
                log_ = self.store.open_log(name, create=False)
            except DurableWalError:
                continue  # reported where the log was read
            for repair in log_.repairs:
                self.problem(repair, log=name)

    def _check_commits_log(self) -> Log | None:
        """Read every commits-log record; replay them when the log is whole."""
        try:
            commits = self.store.open_log(COMMITS_LOG, create=False)
            low, high = commits.low_watermark(), commits.high_watermark()
        except DurableWalError as exc:
            self.problem_from(exc, log=COMMITS_LOG)
            return None
        full = NamespaceState(self.store.namespace) if low == 0 else None
        task = self.progress.task("check: commits log", high - low, "records")
        reader: CommitsReader | None = None
        try:
            reader = CommitsReader(commits, low, high)
            done = low
            for item in reader.items():
                self.progress.advance(task, reader.position - done)
                done = reader.position
                if isinstance(item, Saved):  # a copy made up for it: a warning, read on
                    self.report.warnings.append(
                        Problem({"log": COMMITS_LOG, "offset": item.damaged}, item.text()).text())
                    continue
                if isinstance(item, Lost):
                    self.problem_from(item.error, log=COMMITS_LOG)
                    full = None
                    continue
                offset, entry = item
                self.report.commit_records += 1
                try:
                    record, _ = decode_record(entry.value, namespace=self.store.namespace,
                                              offset=offset)
                    if full is not None:
                        full.apply(record, offset)
                except DurableWalError as exc:
                    self.problem_from(exc, log=COMMITS_LOG)
                    full = None
                except (KeyError, TypeError, ValueError) as exc:
                    self.problem(f"commit-log record is malformed: {exc!r}", log=COMMITS_LOG,
                                 offset=offset)
                    full = None
        except DurableWalError as exc:
            at = low if reader is None else reader.position
            self.problem_from(exc, log=COMMITS_LOG, offset=at)
            return None
        if full is not None:
            full.next_offset = reader.position
        self._full_replay = full
        return commits

    def _check_snapshot(self, commits: Log) -> NamespaceState | None:
        """Snapshot vs commits log: recoverable, and equal to a full replay if possible.
        The snapshot compared is the newest good one, the one recovery starts from (a
        damaged one was named once by :meth:`_check_snapshot_copies`)."""
        low, high = commits.low_watermark(), commits.high_watermark()
        copies = self._copies
        damaged = bool(copies and (copies.damaged or copies.newer))
        raw = None
        if copies is not None and copies.good:
            version = max(copies.good)
            raw = self.store.read_snapshot_version(SNAPSHOT_NAME, version)
        reported = False
        if raw is None:
            if low > 0:
                what = "no good snapshot (the damaged ones are named above)" if damaged else \
                    "there is no snapshot"
                self.problem(f"the commits log was cleaned below offset {low} but {what}: "
                             "the namespace cannot be recovered", log=COMMITS_LOG)
                reported = True
        else:
            try:
                snap = NamespaceState.from_snapshot(self.store.namespace, raw, version)
                at = snap.snapshot_offset
                self.report.snapshot_at = at
                if at < low:
                    self.problem(f"snapshot describes commits offset {at}, below the commits "
                                 f"log's low watermark {low}: records in between are lost",
                                 log=COMMITS_LOG, snapshot=SNAPSHOT_NAME, version=version)
                    reported = True
                elif at > high:
                    self.problem(f"snapshot describes commits offset {at}, past the commits "
                                 f"log's high watermark {high}", log=COMMITS_LOG,
                                 snapshot=SNAPSHOT_NAME, version=version)
            except DurableWalError as exc:
                self.problem_from(exc, snapshot=SNAPSHOT_NAME)
                reported = True
        try:
            state = NamespaceState.recover(self.store, commits)
        except DurableWalError as exc:
            if not reported:
                self._commits_problem(exc)
            return None
        if self._full_replay is not None and raw is not None:
            self._compare(state, self._full_replay)
        return state

    def _compare(self, recovered: NamespaceState, full: NamespaceState) -> None:
        facts = {
            "namespace id": lambda s: s.namespace_id,
            "next step": lambda s: s.next_step,
            "expired before": lambda s: s.expired_before,
            "next sequences": lambda s: dict(sorted(s.next_sequences.items())),
            "marks": lambda s: dict(sorted(s.marks.items())),
            "tables and their schema versions": lambda s: sorted(
                (t, len(info.schemas)) for t, info in s.tables.items()),
            "committed (writer, writer_step) pairs": lambda s: len(s.pairs),
            "clean bounds": lambda s: dict(sorted(s.clean_bounds.items())),
            "readers": lambda s: dict(sorted(s.readers.items())),
            "retention policy": lambda s: s.retention,
            "indexed steps": lambda s: [(c.step, c.writer_id, c.writer_step, c.runs)
                                        for c in self._steps(s)
                                        if c.step >= recovered.base_step],
        }
        for name, fact in facts.items():
            a, b = fact(recovered), fact(full)
            if a != b:
                shown = (a, b) if len(repr(a)) + len(repr(b)) < 200 else ("...", "...")
                self.problem(f"recovery from the snapshot disagrees with a replay of the whole "
                             f"commits log on {name}: {shown[0]} vs {shown[1]}",
                             snapshot=SNAPSHOT_NAME)

    def _check_sequences(self, state: NamespaceState) -> None:
        """Per (region, table), indexed steps hold consecutive sequence ranges up to the
        next sequence."""
        running: dict[tuple[int, int], int] = {}
        for commit in self._steps(state):
            for key in sorted({r.key for r in commit.runs}):
                region_id, table_id = key
                first = commit.first_sequences.get(key)
                name = table_name(state.tables, table_id)
                if first is None:
                    self.problem("step has no first sequence for a table it writes",
                                 step=commit.step, region=region_id, table=name)
                    continue
                if key in running and first != running[key]:
                    self.problem(f"sequence gap: step starts at sequence {first}, the previous "
                                 f"step of the table in the region ended at {running[key]}",
                                 step=commit.step, region=region_id, table=name)
                running[key] = first + sum(r.entries for r in commit.runs if r.key == key)
        for (region_id, table_id), end in running.items():
            nxt = state.next_sequences.get((region_id, table_id))
            if nxt != end:
                self.problem(f"indexed steps end at sequence {end}, the next sequence is "
                             f"{nxt}", region=region_id, table=table_name(state.tables, table_id))
        for (region_id, table_id), mark in state.marks.items():
            nxt = state.next_sequences.get((region_id, table_id), 0)
            if mark > nxt:
                self.problem(f"marked deleted below {mark}, past the next sequence {nxt}",
                             region=region_id, table=table_name(state.tables, table_id))

    # -- regions --------------------------------------------------------------------

    def _needed_runs(self, state: NamespaceState) -> dict[int, list[_RunCheck]]:
        """Runs of the steps still needed (retained, or claimed by a table), by region."""
        by_region: dict[int, list[_RunCheck]] = defaultdict(list)
        for commit in self._steps(state):
            if not state.needed(commit):
                continue  # expired and claimed by no table: the cleaner may delete it
            self.report.steps += 1
            for run in commit.runs:
                info = state.tables.get(run.table_id)
                if info is None:
                    self.problem(f"step refers to unknown table id {run.table_id}",
                                 step=commit.step, region=run.region_id)
                    continue
                if run.schema_version >= len(info.schemas):
                    self.problem(f"step names schema version {run.schema_version} of table "
                                 f"{info.name}, which has {len(info.schemas)}",
                                 step=commit.step, region=run.region_id)
                    continue
                self.report.runs += 1
                by_region[run.region_id].append(_RunCheck(commit, run))
        return by_region

    def _check_regions(self, state: NamespaceState | None) -> None:
        runs = self._needed_runs(state) if state is not None else {}
        existing = set(self.store.list_regions())
        self._regions_seen = existing
        opened: list[tuple[int, Log, int, int]] = []
        for region_id in sorted(existing | set(runs)):
            if region_id not in existing:
                steps = sorted({rc.commit.step for rc in runs[region_id]})
                self.problem(f"region log is missing; steps {_steps_text(steps)} have entries "
                             "in it", region=region_id)
                continue
            try:
                region = self.store.open_region(region_id, create=False)
                opened.append((region_id, region, region.low_watermark(),
                               region.high_watermark()))
            except DurableWalError as exc:
                self.problem_from(exc, region=region_id)
                self._not_verified(region_id, runs.get(region_id, []), None)
        self.report.regions = len(existing)
        task = self.progress.task("check: regions", sum(high - low for _, _, low, high in opened),
                                  "entries")
        for region_id, region, low, high in opened:
            self.progress.update(task, description=f"check: region {region_id}")
            self._check_region(state, region_id, region, low, high,
                               sorted(runs.get(region_id, []), key=lambda rc: rc.run.start),
                               task)

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
                self.problem_from(exc, region=region_id, offset=offset)
                if offset < high:
                    self.problem(f"reading stopped: entries [{offset}, {high}) were not "
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
            self.problem_from(exc, region=region_id, offset=at)
        for rc in owners:
            if rc.lost:
                continue
            rc.lost = True
            if known:
                self.report.warnings.append(
                    f"region={region_id} offset={at}: step {rc.commit.step} is recorded lost "
                    f"({exc.reason}); its reads say so")
            else:
                self.problem(f"step {rc.commit.step} is lost: its entry at offset {at} is "
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
                self.problem(f"step {rc.commit.step} is lost: its entries [{a}, {b}) were "
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
            self.problem(f"the region was cleaned below {low}, above the bound {bound} the "
                         "commit log recorded: a cleaner deleted without recording first",
                         region=region_id, offset=bound)
        for before, after in itertools.pairwise(runs):
            if after.run.start < before.run.end:
                self.problem(f"offsets [{after.run.start}, {before.run.end}) are claimed by "
                             f"steps {before.commit.step} and {after.commit.step}",
                             region=region_id)
        for rc in runs:
            if rc.run.start < low:
                self._cleaned_below(rc, region_id, low, now)
            elif rc.run.end > high:
                self.problem(f"step {rc.commit.step} needs entries [{rc.run.start}, "
                             f"{rc.run.end}) but the region ends at {high}",
                             region=region_id, offset=high, step=rc.commit.step)
                rc.settled = True

    def _cleaned_below(self, rc: _RunCheck, region_id: int, low: int, now: _LogNow) -> None:
        """A run below the region's low watermark: lost, unless a cleaner expired its
        step after the check read the commits log (then there is nothing to check)."""
        if not now.released(rc):
            self.problem(f"step {rc.commit.step} needs entries [{rc.run.start}, "
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
            self.problem_from(exc, region=region_id, offset=entry.offset)
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
                self.problem(f"entry is not the one step {step} committed: its content "
                             "digest differs (rewritten, restored from another copy, or "
                             "another WAL's)", region=region_id, offset=entry.offset, step=step)
        problem = foreign_attempt(rc.commit, entry)
        if problem:
            self.problem(problem, region=region_id, offset=entry.offset, step=step)
        problem = None if table_id is None else foreign_table(state.tables, rc.commit,
                                                              rc.run, table_id)
        if problem:
            self.problem(problem, region=region_id, offset=entry.offset, step=step)
            rc.mismatched = True
            return
        info = state.tables[rc.run.table_id]
        try:
            payload = decode_value(entry.value, region_id=region_id, offset=entry.offset)
            schema = info.schemas[rc.run.schema_version]
            batches = codec_for(info.payload_format, schema).decode(payload)
            rc.rows += sum(b.num_rows for b in batches)
        except Exception as exc:  # noqa: BLE001 - any decode failure is a finding here
            self.problem(f"payload of table {info.name} does not decode: "
                         f"{type(exc).__name__}: {exc}", region=region_id,
                         offset=entry.offset, step=step)

    def _finish(self, rc: _RunCheck, region_id: int) -> None:
        run = rc.run
        if rc.settled:
            return  # judged already (released by a cleaner during the check, say)
        if rc.lost or (rc.mismatched and rc.entries == run.entries):
            pass  # lost to a damaged entry, or already reported entry by entry
        elif (rc.entries, rc.rows) != (run.entries, run.rows):
            self.problem(f"run [{run.start}, {run.end}) read back {rc.entries} entries and "
                         f"{rc.rows} rows, step {rc.commit.step} says {run.entries} entries "
                         f"and {run.rows} rows", region=region_id, offset=run.start,
                         step=rc.commit.step)
        rc.settled = True

    def _not_verified(self, region_id: int, runs: list[_RunCheck], offset: int | None) -> None:
        if not runs:
            return
        steps = sorted({rc.commit.step for rc in runs})
        self.problem(f"{len(runs)} runs of steps {_steps_text(steps)} could not be verified",
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


def run_check(store: LogStore, progress: Progress | None = None,
              deep: bool = False) -> CheckReport:
    """Check the namespace of ``store``; see the module docstring. ``deep`` also checks
    every needed entry's content digest (steps written before digests have none)."""
    return Checker(store, progress, deep).run()
