"""The demo's child processes (:class:`Child`): each Spark session runs in a child of
its own (``python -m pyspark_durable.showcase.demo``), killed with SIGKILL by process
group and by PID, and waited for until every process is gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path


def descendants(pid: int) -> list[int]:
    """PIDs of every process below ``pid`` (from /proc), children first."""
    parent_of: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # exited while listed
            continue
        parent_of[int(stat.parent.name)] = int(fields[1])
    found, frontier = [], [pid]
    while frontier:
        kids = [p for p, parent in parent_of.items() if parent in frontier]
        found += kids
        frontier = kids
    return found


def wait_gone(pids: list[int]) -> None:
    """Block until each process has exited (a pidfd becomes readable when it does)."""
    import select

    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        try:
            select.select([fd], [], [], 30.0)
        finally:
            os.close(fd)


class Child:
    """A child process (its own process group) with events on stdout, stderr to a log."""

    def __init__(self, what: str, args: list[str], log: Path) -> None:
        self.what = what
        self.log_path = log
        self.log = log.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pyspark_durable.showcase.demo", *args], stdout=subprocess.PIPE,
            stderr=self.log, text=True, start_new_session=True)
        self.killed = False

    def events(self):
        """(kind, args...) per line, until the child and everything it started are gone."""
        for line in self.proc.stdout:
            parts = line.split(maxsplit=1 if line.startswith("RESULT") else -1)
            if parts:
                yield parts

    def kill(self) -> None:
        """SIGKILL the driver, its JVM and the Python workers, and wait until all are gone.

        PySpark's worker daemon puts itself in a process group of its own, so killing
        the child's group alone would leave workers writing for a moment after it; they
        are found as descendants of the child and killed by PID too.
        """
        doomed = descendants(self.proc.pid)
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for pid in doomed:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.killed = True
        wait_gone(doomed)

    def finish(self) -> None:
        self.proc.wait()
        self.proc.stdout.close()
        self.log.close()
        if not self.killed and self.proc.returncode != 0:
            tail = self.log_path.read_text(errors="replace")[-3000:]
            raise SystemExit(f"the {self.what} failed (exit code {self.proc.returncode}); "
                             f"the end of its log {self.log_path}:\n{tail}")

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:  # interrupted: leave no Spark behind
            self.kill()
            self.proc.wait()
        if not self.log.closed:
            self.log.close()
