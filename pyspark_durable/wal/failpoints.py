"""Named points between the steps of the WAL's protocols, for adversarial tests.

Production code calls :func:`reached` at each point; it does nothing unless a test
installed a handler (in a child process, to pause it there while another process
acts, or to kill it there). This is how the race tests force an interleaving
deterministically instead of hoping a sleep lands in the window.

Points: ``commit.checked`` (before the step record is appended), ``commit.appended``
(after, before the committer replays past it), ``clean.proposed`` (bounds computed,
before the ``clean`` record), ``clean.recorded`` (after it, before deleting),
``clean.deleted`` (regions deleted, before the snapshot), ``clean.snapshot`` (before
the snapshot is written), ``clean.snapshotted`` (before the commits log is cleaned).
"""

from __future__ import annotations

from collections.abc import Callable

_handler: Callable[[str], None] | None = None


def install(handler: Callable[[str], None] | None) -> None:
    """Call ``handler(point)`` at every point from now on (None: stop)."""
    global _handler
    _handler = handler


def reached(point: str) -> None:
    if _handler is not None:
        _handler(point)
