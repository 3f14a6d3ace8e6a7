"""What the CLI prints: aligned text tables, one JSON document, a progress line.

Self-written on purpose: the CLI is a support tool and must run wherever the package
runs, so it adds no dependency (no rich, no tqdm). Results go to stdout; progress
goes to stderr and only when stderr is a terminal, so pipes and scripts see clean
output.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
import sys
import time
from collections.abc import Iterable, Sequence
from typing import Any, TextIO

CELL_WIDTH_MAX = 60


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


def format_table(headers: Sequence[str], rows: Iterable[Sequence[Any]],
                 width_max: int = CELL_WIDTH_MAX) -> str:
    """Rows under headers, columns aligned; numbers right-aligned, text left-aligned.

    Cells longer than ``width_max`` are cut with ``...`` so that one wide value does
    not push every other column off the screen (``--json`` shows values whole).
    """
    raw = [list(r) for r in rows]
    text = [[cell(v) for v in r] for r in raw]
    for i in range(len(headers)):  # a float column shows every value with the same decimals
        floats = [r[i] for r in raw if isinstance(r[i], float) and math.isfinite(r[i])]
        if floats:
            places = min(6, max(_decimals(f) for f in floats))
            for r, t in zip(raw, text, strict=True):
                if isinstance(r[i], float) and math.isfinite(r[i]):
                    t[i] = f"{r[i]:.{places}f}"
    text = [[t if len(t) <= width_max else t[: width_max - 3] + "..." for t in r] for r in text]
    widths = [max([len(h)] + [len(r[i]) for r in text]) for i, h in enumerate(headers)]
    right = [bool(raw) and all(_numeric(r[i]) or r[i] is None for r in raw)
             for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        parts = [c.rjust(w) if r else c.ljust(w)
                 for c, w, r in zip(cells, widths, right, strict=True)]
        return "  ".join(parts).rstrip()

    out = [line(list(headers)), line(["-" * w for w in widths])]
    out += [line(r) for r in text]
    return "\n".join(out)


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


def emit_text(text: str, stream: TextIO | None = None) -> None:
    out = stream or sys.stdout
    out.write(text + "\n")


def iso_ms(timestamp_ms: int) -> str:
    """Epoch milliseconds as ISO 8601 UTC, e.g. ``2025-01-31T12:00:00.123Z``."""
    when = dt.datetime.fromtimestamp(timestamp_ms / 1000, tz=dt.UTC)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def span(first: int, stop: int) -> str:
    """A half-open range as text, ``[first, stop)``, the notation of the WAL's errors."""
    return f"[{first}, {stop})"


class Progress:
    """A one-line progress report on stderr, redrawn at most every ``interval_s``.

    Silent unless stderr is a terminal: progress is for a person waiting, never for
    a log file or a test capturing stderr.
    """

    def __init__(self, label: str, total: int | None = None, interval_s: float = 0.1) -> None:
        self.label = label
        self.total = total
        self.done = 0
        self.interval_s = interval_s
        stream = sys.stderr
        self.enabled = bool(getattr(stream, "isatty", lambda: False)())
        self._last = 0.0
        self._drawn = False

    def advance(self, n: int = 1, label: str | None = None) -> None:
        self.done += n
        if label is not None:
            self.label = label
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last >= self.interval_s:
            self._last = now
            self._draw()

    def _draw(self) -> None:
        if self.total:
            pct = min(100, self.done * 100 // self.total)
            text = f"{self.label}: {self.done}/{self.total} ({pct}%)"
        else:
            text = f"{self.label}: {self.done}"
        sys.stderr.write("\r\x1b[K" + text)
        sys.stderr.flush()
        self._drawn = True

    def show(self, label: str) -> None:
        """Show a status line without a count (for work that reports no progress)."""
        self.label = label
        if self.enabled:
            sys.stderr.write("\r\x1b[K" + label + " ...")
            sys.stderr.flush()
            self._drawn = True

    def close(self) -> None:
        if self.enabled and self._drawn:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
            self._drawn = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
