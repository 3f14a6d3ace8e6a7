"""What the CLI prints: tables, one JSON document, progress bars (the only module using rich).

Results go to stdout. On a terminal, rich draws them: tables fit the terminal's
width, headers are styled, ``OK``/``FAILED`` and errors coloured (no colours when
``NO_COLOR`` is set). Piped or redirected, output is plain aligned text drawn here:
no escape codes, one line per row however wide, so ``grep``, ``awk`` and ``cut`` see
whole rows, and fast however many rows (rich takes about a millisecond per row).
Progress bars go to stderr and only when stderr is a terminal, so pipes, logs and
scripts see clean output.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
import sys
from collections.abc import Collection, Iterable, Sequence
from typing import Any, TextIO

from rich.box import Box
from rich.console import Console, Group, RenderableType
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    ProgressColumn,
    Task,
    TaskProgressColumn,
    TextColumn,
    TimeRemainingColumn,
)
from rich.progress import Progress as _RichProgress
from rich.table import Column, Table
from rich.text import Text

CELL_WIDTH_MAX = 60
TERMINAL_TABLE_ROWS_MAX = 1000  # more rows are drawn as plain text on a terminal too
HEADER_STYLE = "bold"
# no borders; a line of ``-`` under the headers
_RULE_UNDER_HEADER = Box("    \n    \n -- \n    \n    \n    \n    \n    \n", ascii=True)


def isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or closed
        return False


def console(stream: TextIO) -> Console:
    """A rich console on ``stream``, styled only if ``stream`` is a terminal.

    Whether it is one is ``isatty()`` alone (not ``FORCE_COLOR``), so that piped
    output stays plain. rich honours ``NO_COLOR``. Values print as they are: no
    markup, no emoji codes, no highlighting of numbers inside text.
    """
    return Console(file=stream, force_terminal=isatty(stream), markup=False, emoji=False,
                   highlight=False)


# -- tables -------------------------------------------------------------------------


def cell(value: Any) -> str:
    """One value as table text: ``null`` for None, bytes as hex, floats as repr."""
    if value is None:
        return "null"
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, dt.datetime):
        return value.isoformat()
    return str(value)


def _decimals(value: float) -> int:
    """Decimals of the shortest repr of ``value`` (``328.36`` -> 2; ``1e-07`` -> 7)."""
    text = repr(value)
    if "e" in text or "E" in text:
        mantissa, _, exp = text.lower().partition("e")
        return max(0, len(mantissa.partition(".")[2]) - int(exp))
    return len(text.partition(".")[2].rstrip("0"))


def _numeric(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class TextTable:
    """Rows under headers, as text; numbers right-aligned, text left-aligned.

    A float column shows every value with the same decimals. Cells longer than
    ``width_max`` are cut with ``...`` so that one wide value does not push every other
    column off the screen (``--json`` shows values whole), except in the ``whole``
    columns: what a command exists to show (a schema, a note) is never cut; piped it
    stays on one line, on a terminal it wraps within its cell. :meth:`lines` draws it
    as plain text (for pipes); on a terminal rich draws it (``__rich__``).
    """

    def __init__(self, headers: Sequence[str], rows: Iterable[Sequence[Any]],
                 width_max: int = CELL_WIDTH_MAX, whole: Collection[str] = ()) -> None:
        raw = [list(r) for r in rows]
        text = [[cell(v) for v in r] for r in raw]
        for i in range(len(headers)):
            floats = [r[i] for r in raw if isinstance(r[i], float) and math.isfinite(r[i])]
            if floats:
                places = min(6, max(_decimals(f) for f in floats))
                for r, t in zip(raw, text, strict=True):
                    if isinstance(r[i], float) and math.isfinite(r[i]):
                        t[i] = f"{r[i]:.{places}f}"
        self.headers = list(headers)
        keep = [h in whole for h in headers]
        self.rows = [[t if k or len(t) <= width_max else t[: width_max - 3] + "..."
                      for t, k in zip(r, keep, strict=True)] for r in text]
        self.right = [bool(raw) and all(_numeric(r[i]) or r[i] is None for r in raw)
                      for i in range(len(headers))]

    def lines(self) -> list[str]:
        """Header, ``-`` under each header, rows: columns two spaces apart."""
        widths = [max([len(h)] + [len(r[i]) for r in self.rows])
                  for i, h in enumerate(self.headers)]

        def line(cells: Sequence[str]) -> str:
            return "  ".join(c.rjust(w) if right else c.ljust(w)
                             for c, w, right in zip(cells, widths, self.right, strict=True)
                             ).rstrip()

        return [line(self.headers), line(["-" * w for w in widths]),
                *(line(r) for r in self.rows)]

    def __rich__(self) -> RenderableType:
        if len(self.rows) > TERMINAL_TABLE_ROWS_MAX:  # fast: the plain lines, header styled
            head, *rest = self.lines()
            return Group(Text(head, style=HEADER_STYLE), *(Text(x) for x in rest))
        out = Table(box=_RULE_UNDER_HEADER, show_edge=False, pad_edge=False,
                    padding=(0, 1, 0, 0), header_style=HEADER_STYLE, border_style="dim")
        for header, right in zip(self.headers, self.right, strict=True):
            # numbers never wrap; on a narrow terminal text wraps within its cell
            out.add_column(header, justify="right" if right else "left", no_wrap=right,
                           overflow="fold")
        for r in self.rows:
            out.add_row(*r)
        return out


def styled(text: str, style: str) -> Text:
    """``text`` in ``style`` (e.g. ``"bold red"``) on a terminal, plain otherwise; text
    appended to the result (``styled(...) + "more"``) stays unstyled."""
    return Text.styled(text, style)


Part = str | Text | TextTable  # what :func:`emit` prints: a line, a styled line, a table


def _plain(part: Part) -> str:
    if isinstance(part, TextTable):
        return "\n".join(part.lines())
    return part.plain if isinstance(part, Text) else part


def emit(*parts: Part, stream: TextIO | None = None) -> None:
    """Print lines of text and tables, one after the other."""
    out = stream or sys.stdout
    if not isatty(out):
        out.write("".join(_plain(p) + "\n" for p in parts))
        return
    con = console(out)
    for part in parts:
        con.print(part, soft_wrap=not isinstance(part, TextTable))  # lines: the terminal wraps


def error(message: str) -> None:
    """One line on stderr (red on a terminal)."""
    if isatty(sys.stderr):
        console(sys.stderr).print(message, style="red", soft_wrap=True)
    else:
        sys.stderr.write(message + "\n")


# -- JSON ---------------------------------------------------------------------------


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    return str(value)  # Decimal, timedelta, ...: lossless text rather than a failure


def emit_json(doc: Any, stream: TextIO | None = None) -> None:
    """Print one JSON document (bytes as base64, dates ISO 8601)."""
    out = stream or sys.stdout
    out.write(json.dumps(doc, indent=2, default=_json_default) + "\n")


# -- values -------------------------------------------------------------------------


def iso_ms(timestamp_ms: int) -> str:
    """Epoch milliseconds as ISO 8601 UTC, e.g. ``2025-01-31T12:00:00.123Z``."""
    when = dt.datetime.fromtimestamp(timestamp_ms / 1000, tz=dt.UTC)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def span(first: int, stop: int) -> str:
    """A half-open range as text, ``[first, stop)``, the notation of the WAL's errors."""
    return f"[{first}, {stop})"


# -- progress -----------------------------------------------------------------------


class _RateColumn(ProgressColumn):
    """``1,234 entries/s``: the task's speed in its ``unit`` field."""

    def __init__(self) -> None:
        super().__init__(table_column=Column(no_wrap=True))

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        unit = task.fields.get("unit", "")
        return Text(f"{speed:,.0f} {unit}/s" if speed else f"- {unit}/s", style="dim")


class Progress(_RichProgress):
    """Progress bars on stderr: description, bar, percent, done/total, rate, ETA.

    Drawn only when ``enabled`` (callers pass ``not args.json``) and stderr is a
    terminal; otherwise nothing is drawn (the calls still count, cheaply). Transient:
    the bars vanish when the work is done, leaving the result alone on the screen.
    """

    def __init__(self, enabled: bool = True) -> None:
        err = sys.stderr
        on = enabled and isatty(err)
        super().__init__(
            # on a narrow terminal the description gives way, the numbers do not
            TextColumn("{task.description}", table_column=Column(overflow="ellipsis")),
            BarColumn(bar_width=20), TaskProgressColumn(), MofNCompleteColumn(),
            _RateColumn(), TextColumn("ETA"), TimeRemainingColumn(),
            console=console(err), transient=True, disable=not on,
            redirect_stdout=False)  # stdout is the result: it never goes through the bars

    def task(self, description: str, total: int | None, unit: str) -> Any:
        """A new bar; returns its id for :meth:`advance` and :meth:`update`."""
        return self.add_task(description, total=total, unit=unit)
