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
4. every region log from its low to its high watermark, in one pass
   (:mod:`~pyspark_durable.wal.upkeep.check_regions`): each entry's
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

from pyspark_durable.errors import DurableWalError
from pyspark_durable.log import Log, LogStore
from pyspark_durable.wal import failpoints
from pyspark_durable.wal.format.records import StepCommit, decode_record
from pyspark_durable.wal.format.snapshot_file import SNAPSHOT_NAME
from pyspark_durable.wal.ledger import COMMITS_LOG
from pyspark_durable.wal.progress import Progress, Silent
from pyspark_durable.wal.reading import table_name
from pyspark_durable.wal.replay.copies import CommitsReader, Lost, Saved
from pyspark_durable.wal.replay.snapshot_schedule import SnapshotCopies, read_copies
from pyspark_durable.wal.replay.state import NamespaceState
from pyspark_durable.wal.upkeep.check_regions import RegionCheck
from pyspark_durable.wal.upkeep.check_report import CheckReport, Fix, Problem


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
            self.report.problem_from(exc, log=COMMITS_LOG)

    # -- the pass -----------------------------------------------------------------

    def run(self) -> CheckReport:
        for log_name, problem in self.store.settings_problems():
            self.report.problem(problem, log=log_name)
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
                    self.report.problem(f"reader {reader!r} is recorded at step {position.next_step}, "
                                        f"past the last committed step {state.next_step - 1}",
                                        log=COMMITS_LOG)
        failpoints.reached("check.commits_read")
        regions = RegionCheck(self.store, self.report, self.progress, self.deep)
        self._regions_seen = regions.run(state, self._steps(state) if state is not None else [])
        self._report_repairs()
        return self.report

    def _check_snapshot_copies(self) -> None:
        """Every stored snapshot version decodes (the older one is the redundant copy):
        one problem per damaged version, saying what recovery and the cleaner do with it.
        The newest good version is the one :meth:`_check_snapshot` compares."""
        try:
            self._copies = read_copies(self.store)
        except DurableWalError as exc:
            self.report.problem_from(exc, snapshot=SNAPSHOT_NAME)
            return
        for exc in self._copies.newer.values():
            self.report.problem_from(exc)
        good = bool(self._copies.good)
        for version, exc in sorted(self._copies.damaged.items()):
            then = ("recovery skips it, and the next cleaner pass (durablewal clean) writes "
                    "a good snapshot in its place and deletes it") if good else \
                "no stored snapshot is good: recovery replays the commits log from its start"
            self.report.problem(f"{exc.reason}; {then}", Fix.CLEAN, snapshot=SNAPSHOT_NAME,
                                version=version)

    def _report_repairs(self) -> None:
        """Damage the logs tolerated while being read (their files, named in the text)."""
        for name in [COMMITS_LOG, *(f"region_{r}" for r in sorted(self._regions_seen))]:
            try:
                log_ = self.store.open_log(name, create=False)
            except DurableWalError:
                continue  # reported where the log was read
            for repair in log_.repairs:
                self.report.problem(repair, log=name)

    def _check_commits_log(self) -> Log | None:
        """Read every commits-log record; replay them when the log is whole."""
        try:
            commits = self.store.open_log(COMMITS_LOG, create=False)
            low, high = commits.low_watermark(), commits.high_watermark()
        except DurableWalError as exc:
            self.report.problem_from(exc, log=COMMITS_LOG)
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
                    self.report.problem_from(item.error, log=COMMITS_LOG)
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
                    self.report.problem_from(exc, log=COMMITS_LOG)
                    full = None
                except (KeyError, TypeError, ValueError) as exc:
                    self.report.problem(f"commit-log record is malformed: {exc!r}", log=COMMITS_LOG,
                                        offset=offset)
                    full = None
        except DurableWalError as exc:
            at = low if reader is None else reader.position
            self.report.problem_from(exc, log=COMMITS_LOG, offset=at)
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
                self.report.problem(f"the commits log was cleaned below offset {low} but {what}: "
                                    "the namespace cannot be recovered", log=COMMITS_LOG)
                reported = True
        else:
            try:
                snap = NamespaceState.from_snapshot(self.store.namespace, raw, version)
                at = snap.snapshot_offset
                self.report.snapshot_at = at
                if at < low:
                    self.report.problem(f"snapshot describes commits offset {at}, below the commits "
                                        f"log's low watermark {low}: records in between are lost",
                                        log=COMMITS_LOG, snapshot=SNAPSHOT_NAME, version=version)
                    reported = True
                elif at > high:
                    self.report.problem(f"snapshot describes commits offset {at}, past the commits "
                                        f"log's high watermark {high}", log=COMMITS_LOG,
                                        snapshot=SNAPSHOT_NAME, version=version)
            except DurableWalError as exc:
                self.report.problem_from(exc, snapshot=SNAPSHOT_NAME)
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
                self.report.problem(f"recovery from the snapshot disagrees with a replay of the whole "
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
                    self.report.problem("step has no first sequence for a table it writes",
                                        step=commit.step, region=region_id, table=name)
                    continue
                if key in running and first != running[key]:
                    self.report.problem(f"sequence gap: step starts at sequence {first}, the previous "
                                        f"step of the table in the region ended at {running[key]}",
                                        step=commit.step, region=region_id, table=name)
                running[key] = first + sum(r.entries for r in commit.runs if r.key == key)
        for (region_id, table_id), end in running.items():
            nxt = state.next_sequences.get((region_id, table_id))
            if nxt != end:
                self.report.problem(f"indexed steps end at sequence {end}, the next sequence is "
                                    f"{nxt}", region=region_id, table=table_name(state.tables, table_id))
        for (region_id, table_id), mark in state.marks.items():
            nxt = state.next_sequences.get((region_id, table_id), 0)
            if mark > nxt:
                self.report.problem(f"marked deleted below {mark}, past the next sequence {nxt}",
                                    region=region_id, table=table_name(state.tables, table_id))


def run_check(store: LogStore, progress: Progress | None = None,
              deep: bool = False) -> CheckReport:
    """Check the namespace of ``store``; see the module docstring. ``deep`` also checks
    every needed entry's content digest (steps written before digests have none)."""
    return Checker(store, progress, deep).run()
