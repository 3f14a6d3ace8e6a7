"""What the user sees of the demo: a line per phase and per micro-batch, and on an
interactive terminal a spinner with the time spent in the current phase."""

from __future__ import annotations

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
