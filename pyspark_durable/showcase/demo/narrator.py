"""The parent's side of the demo: it runs the writing query in a child, kills it,
restarts it, and tells what each step did from the WAL's own record (which step a
micro-batch committed, what the kill left uncommitted, what a restart replayed).
"""

from __future__ import annotations

import json
import random
import signal
import time
from pathlib import Path

from pyspark_durable.showcase.demo.orders import wal_config
from pyspark_durable.showcase.demo.processes import Child
from pyspark_durable.showcase.demo.terminal import Ui


class Demo:
    """One demo run as the user follows it: what each child reported, checked against
    the WAL (opened, never created, by this process), so every sentence about the kill
    and the restart is the WAL's record, not a guess from timing."""

    def __init__(self, ui: Ui, wal: Path, work: Path, rows_per_file: int,
                 kafka: dict[str, str] | None = None) -> None:
        self.ui = ui
        self.kafka = kafka  # the local broker's client settings, or None: the file log
        self.rows_per_file = rows_per_file
        self.wal = wal
        self.work = work
        self.ns = None  # the WAL, opened (never created) by this process once it exists
        self.seen: dict[int, int] = {}  # WAL step -> the micro-batch that committed it
        self.runs = 0
        self.in_flight: int | None = None  # the micro-batch the kill interrupted, if any
        self.kill_note = "none"  # the report's crash line
        self.last_before_kill: int | None = None  # the WAL's last committed micro-batch then
        self.left_at_kill = 0  # uncommitted entries the WAL held right after the kill
        self.replayed: list[int] = []  # micro-batches a run committed again (a no-op)

    def namespace(self):
        if self.ns is None:
            from pyspark_durable.endpoint import open_namespace

            self.ns = open_namespace(wal_config(self.wal, self.kafka), create=False)
        return self.ns

    def batch_line(self, event: list[str], note: str = "") -> None:
        """``BATCH <batch id> <rows> <ms> <query id>``: the step it committed, from the WAL."""
        batch, rows, ms = (int(x) for x in event[1:4])
        step = self.namespace().committed_step(f"query-{event[4]}", batch)
        if step is None:  # cannot happen: a batch with rows commits before it reports
            self.ui.line(f"micro-batch {batch:>2}: {rows} rows, but no step in the WAL", "red")
        elif step in self.seen:
            self.replayed.append(batch)
            self.ui.line(f"micro-batch {batch:>2} replayed -> step {step:>2} was already "
                         f"committed: a no-op, its {rows} rows are not written twice", "magenta")
        else:
            self.seen[step] = batch
            again = ""
            if batch == self.in_flight:
                again = (": the batch the kill interrupted, run again from Spark's offset "
                         "log; this attempt committed it, the killed one's entries stay "
                         "uncommitted")
            if rows > self.rows_per_file:
                note += (f": {rows // self.rows_per_file} input files in one micro-batch, as "
                         "Spark's file source does after a kill that came between its logging "
                         "a file and planning a batch for it")
            self.ui.line(f"micro-batch {batch:>2} -> step {step:>2}, {rows} rows "
                         f"({ms / 1000:.1f} s){again}{note}", "green")

    def missed_before_kill(self) -> None:
        """Steps committed whose progress event died with the driver: from the WAL."""
        from pyspark_durable.errors import LogNotFound

        try:
            ns = self.namespace()
        except LogNotFound:  # nothing committed yet: the namespace does not exist
            return
        for step in ns.steps():
            if step not in self.seen:
                c = ns.step_commit(step)
                self.seen[step] = c.writer_step
                self.ui.line(f"micro-batch {c.writer_step:>2} -> step {step:>2}, {c.rows} rows "
                             "(committed just before the kill; read from the WAL)", "green")

    def uncommitted(self) -> int:
        """Entries in the regions that no committed step refers to (the WAL's own record:
        what ``durablewal regions`` counts as uncommitted, counted by the same query)."""
        from pyspark_durable.errors import LogNotFound

        try:
            ns = self.namespace()
        except LogNotFound:
            return 0
        ns.refresh()
        return sum(r.uncommitted for r in ns.info.region_entries())

    def after_kill(self, how: str) -> None:
        """Say where the kill landed, from the WAL: the last committed micro-batch, and
        whether a batch after it had written entries no step refers to."""
        from pyspark_durable.errors import LogNotFound

        self.missed_before_kill()
        try:
            steps = self.namespace().steps()
        except LogNotFound:
            steps = range(0)
        last = self.namespace().step_commit(steps[-1]).writer_step if steps else None
        done = f"micro-batch {last} (step {steps[-1]})" if steps else "no micro-batch"
        self.ui.line(f"{how}; the WAL's last commit is {done}", "red")
        left = self.left_at_kill = self.uncommitted()
        self.last_before_kill = last
        following = 0 if last is None else last + 1
        if left:
            self.in_flight = following
            self.ui.line(f"the kill landed inside micro-batch {following}: its tasks had "
                         f"written {left} entries that no step refers to (uncommitted: "
                         "readers never see them)", "red")
            self.kill_note = f"writer killed with SIGKILL inside micro-batch {following}"
        else:
            after = f"after micro-batch {last} " if last is not None else ""
            self.ui.line(f"the WAL holds no uncommitted entry: no micro-batch {after}had "
                         "written anything yet", "red")
            self.kill_note = ("writer killed with SIGKILL after the WAL's commit of "
                              f"micro-batch {last}" if last is not None else
                              "writer killed with SIGKILL before its first commit")

    def after_restart(self) -> None:
        """Say what the restart added to the kill's story, from the run and the WAL: a
        micro-batch it ran again because Spark's checkpoint had not recorded it (the kill
        came between the WAL's commit and Spark's), whose entries stay uncommitted."""
        replays = [b for b in self.replayed if b == self.last_before_kill]
        if not replays:
            return
        added = self.uncommitted() - self.left_at_kill
        self.ui.line(f"so the kill came after the WAL committed micro-batch {replays[0]} and "
                     "before Spark's checkpoint recorded it: the restart ran it again, its "
                     f"commit was a no-op, and the {added} entries its tasks wrote stay "
                     "uncommitted", "magenta")
        self.kill_note = (f"writer killed with SIGKILL inside micro-batch {replays[0]}, after "
                          "its commit to the WAL, before Spark's checkpoint recorded it")

    def uncommitted_note(self, left: int) -> str:
        """Where the uncommitted entries came from: the killed attempt, the restart's replay."""
        parts = []
        if self.left_at_kill:
            parts.append(f"{self.left_at_kill} written by the killed attempt of micro-batch "
                         f"{self.in_flight}")
        if left > self.left_at_kill:
            by = (f"the restart's replay of micro-batch {self.replayed[0]}, already committed"
                  if self.replayed else "attempts after the kill")
            parts.append(f"{left - self.left_at_kill} by {by}")
        where = "; ".join(parts) + ": " if parts else ""
        return f"{left} entries ({where}referred to by no step: never read)"

    def started(self, event: list[str]) -> bool:
        """Show a writer child's start-up events (Spark up, a query started or restarted);
        whether ``event`` was one."""
        kind = event[0]
        if kind == "SPARK_READY":
            self.ui.line(f"Spark is up ({event[1]} s)")
        elif kind == "QUERY":
            self.ui.phase("query started; its first micro-batch also starts Spark's "
                          "Python workers", "first micro-batch running")
        elif kind == "RESTART":
            self.ui.line(f"the {event[1]} query failed because a Python process of "
                         "Spark's missed its fixed 10 s to connect back (a loaded "
                         "machine): started again from its checkpoint")
        else:
            return False
        return True

    def writer(self, kill_after: int | None, inside: bool = False,
               read_back: int | None = None) -> dict:
        """Run the writing query; SIGKILL it ``kill_after`` batches into this run: at a
        random moment, or (``inside``) inside the next micro-batch, between its tasks'
        writes and its commit. ``read_back`` (the rows in): then read the WAL back in the
        same child, and return what the reader found."""
        self.runs += 1
        args = self.writer_args(kill_after if inside else None, read_back)
        batches, written, result = 0, False, {}
        last, died_after = -1, 0.0  # the batch whose line triggered the kill, how long after
        with Child("writing query", args, self.work / f"writer-{self.runs}.log") as child:
            self.ui.phase("starting Spark (local[2]) for the writer")
            for event in child.events():
                kind = event[0]
                if self.started(event):
                    continue
                if kind == "BATCH" and not child.killed:
                    batches += 1
                    batch = int(event[1])
                    self.batch_line(event)
                    self.ui.activity(f"micro-batch {batch + 1} running")
                    if kill_after is not None and batches >= kill_after and not inside:
                        # the listener reports a batch about one batch late: a delay of up to
                        # one batch lands the kill inside a batch or between two, by chance
                        delay = random.uniform(0.2, 1.2)
                        time.sleep(delay)
                        self.ui.phase("killing the writer with SIGKILL "
                                      "(driver, JVM and Python workers)", "killing the writer")
                        child.kill()
                        # what it managed to print before it died is read below
                        last, died_after = batch, delay
                elif kind == "BATCH":  # printed by the child just before the kill landed
                    self.batch_line(event, " (committed before the kill landed)")
                elif kind in ("WRITTEN", "RESULT"):
                    written = True
                    result = self.reading(event, batches) or result
                elif kind == "DONE":
                    self.ui.activity("stopping Spark")
            if inside and kill_after is not None and child.proc.wait() == -signal.SIGKILL:
                self.ui.phase("killing the writer with SIGKILL "
                              "(driver, JVM and Python workers)", "killing the writer")
                child.killed = True  # by its own failpoint, at the commit of the batch
                how = (f"killed the writer at the commit of micro-batch {kill_after}, after "
                       "its tasks wrote their entries")
            else:
                how = f"killed the writer {died_after:.2f} s after micro-batch {last} reported"
            child.finish()
        if child.killed:
            self.after_kill(how)
        elif kill_after is not None:
            self.ui.line("the writer finished before the kill")
        elif not written:
            self.finished(batches)
        if read_back is not None and not result:
            raise SystemExit(f"the reading query reported nothing; see {child.log_path}")
        return result

    def writer_args(self, kill_inside: int | None, read_back: int | None) -> list[str]:
        args = ["--child-writer", str(self.wal), str(self.work / "in"), str(self.work / "ckpt")]
        if kill_inside is not None:
            args += ["--kill-inside", str(kill_inside)]
        if self.kafka:
            args += ["--kafka-options", json.dumps(self.kafka)]
        if read_back is not None:
            args += ["--read-back", str(self.work / "out"), str(self.work / "ckpt-r"),
                     str(read_back)]
        return args

    def reading(self, event: list[str], batches: int) -> dict | None:
        """The read-back's events (``WRITTEN``, then ``RESULT``: what the reader found)."""
        if event[0] == "WRITTEN":
            self.finished(batches)
            self.ui.header("[4/4] reading the WAL back with a streaming query "
                           "(durablewal -> parquet), in the same Spark")
            self.ui.phase("reading the WAL back")
            return None
        result = json.loads(event[1])
        self.ui.line(f"read {result['rows_out']} rows from {len(result['steps'])} steps "
                     f"({result['seconds']} s)")
        self.ui.activity("stopping Spark")
        return result

    def finished(self, batches: int) -> None:
        self.ui.line(f"the writer finished: {batches} micro-batches in this run")
        self.after_restart()

    def close(self) -> None:
        if self.ns is not None:
            self.ns.close()
