"""The demo's terminal output (:class:`Ui`) and its child processes (:class:`Child`):
each Spark session of :mod:`pyspark_durable.demo` runs in a child of its own, killed
with SIGKILL by process group and by PID, and waited for until every process is gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from rich.console import Console
from rich.progress import Progress, ProgressColumn, SpinnerColumn, TextColumn
from rich.text import Text


class _Elapsed(ProgressColumn):
    def render(self, task) -> Text:
        return Text(f"{task.elapsed or 0:5.1f} s", style="cyan")


class Ui:
    """Plain lines; on an interactive terminal also a spinner with the current phase's time.

    Piped, in CI or under tests (stdout not a terminal) rich writes no ANSI codes and
    the spinner is never started; NO_COLOR turns colours off on a terminal.
    """

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(highlight=False, soft_wrap=True, emoji=False)
        self.dots = "…" if self.console.encoding.startswith("utf") else "..."
        self.progress: Progress | None = None
        self.task = None
        if self.console.is_interactive and not self.console.is_dumb_terminal:
            self.progress = Progress(TextColumn(" "), SpinnerColumn(),
                                     TextColumn("{task.description}", markup=False), _Elapsed(),
                                     console=self.console, transient=True)

    def __enter__(self) -> Ui:
        if self.progress is not None:
            self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()

    def print(self, text: str = "", style: str | None = None) -> None:
        self.console.print(Text(text, style=style or ""))

    def header(self, text: str) -> None:
        self.print(text, "bold")

    def line(self, text: str, style: str | None = None) -> None:
        self.print(f"  {text}", style)

    def phase(self, text: str, spinner: str | None = None) -> None:
        """A slow phase starts: its line now, and the spinner (terminal) until the next."""
        self.line(text + self.dots, "yellow")
        self.activity(spinner or text)

    def activity(self, text: str) -> None:
        """What the spinner shows (its clock restarts); no line is printed."""
        if self.progress is None:
            return
        if self.task is None:
            self.task = self.progress.add_task(text, total=None)
        else:
            self.progress.reset(self.task, description=text)

    def idle(self) -> None:
        if self.progress is not None and self.task is not None:
            self.progress.remove_task(self.task)
            self.task = None


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
            [sys.executable, "-m", "pyspark_durable.demo", *args], stdout=subprocess.PIPE,
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
