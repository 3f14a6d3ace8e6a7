"""Named points between the steps of the WAL's protocols, for adversarial tests and demos.

Production code calls :func:`reached` at each point; it does nothing unless a test
installed a handler (in a child process, to pause it there while another process
acts, or to kill it there). This is how the race tests force an interleaving
deterministically instead of hoping a sleep lands in the window.

A process that cannot be handed a handler (a Python worker Spark starts) takes one
from the environment, as fail-rs's ``FAILPOINTS`` does:
``DURABLEWAL_FAILPOINT=commit.checked:kill-group=PGID:writer_step=N`` SIGKILLs process
group ``PGID`` and then this process when a commit of writer step ``N`` is about to
append its record (the attempts' entries are written, the step is not): a crash
inside a micro-batch, on purpose. Nothing reads the variable unless it is set.

Points: ``commit.checked`` (before the step record is appended), ``commit.appended``
(after, before the committer replays past it), ``clean.proposed`` (bounds computed,
before the ``clean`` record), ``clean.recorded`` (after it, before deleting),
``clean.freeing`` (a region's dead entries found, before they are freed),
``clean.deleted`` (regions deleted and freed, before the snapshot), ``clean.snapshot`` (before
the snapshot is written), ``clean.snapshotted`` (before the commits log is cleaned),
``backup.captured`` (a backup holds its capture: the files open, the copy locks taken,
nothing written yet), ``backup.copied`` (the copy written and fsync'd in ``DEST.partial``,
before its check and rename), ``check.commits_read`` (a check has read the commits
log, before the regions), ``check.region_opening`` (a region's bounds read, its read
not yet opened), ``check.region_reading`` (its first entry read).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any

from pyspark_durable.errors import ConfigError

ENV = "DURABLEWAL_FAILPOINT"
_handler: Callable[[str], None] | None = None


def install(handler: Callable[[str], None] | None) -> None:
    """Call ``handler(point)`` at every point from now on (None: stop)."""
    global _handler
    _handler = handler


def reached(point: str, **context: Any) -> None:
    """``context`` (e.g. ``writer_step``) is matched by an environment rule only."""
    if _handler is not None:
        _handler(point)
    spec = os.environ.get(ENV)
    if spec:
        _env_rule(spec, point, context)


def _env_rule(spec: str, point: str, context: dict[str, Any]) -> None:
    name, *fields = spec.split(":")
    rule = dict(f.partition("=")[::2] for f in fields)
    if name != point or "kill-group" not in rule:
        return
    try:
        group = int(rule.pop("kill-group"))
    except ValueError:
        raise ConfigError(f"{ENV}: kill-group must be a process group id") from None
    if any(str(context.get(k)) != v for k, v in rule.items()):
        return
    os.killpg(group, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
