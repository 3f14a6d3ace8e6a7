"""Clocks no single host can push: the time every decision of the WAL is measured against.

Times in the WAL come from the clocks of the processes that write it (a ``step``
record's commit time ``ts`` and start ``sm``, a ``clean`` record's pass time, a region
entry's timestamp), and any one host's clock may be days off. The rules (from a
``clocks`` record on; docs/protocol.md, "Clocks"):

1. *The step clock* (replay): the first step record sets it, and each later one moves
   it to ``min(ts, step clock + CLOCK_STEP_MS)`` if that is later. One record, however
   far ahead its host's clock, moves it at most a day; a record behind it moves nothing.
2. *The WAL's clock* (replay, the dedup window's clock): the step clock, or a cleaner
   pass's time if later, but never more than ``CLOCK_STEP_MS`` past the step clock. So
   a cleaner, however often it runs, pushes it no further than one step could.
3. *Deduplication* (replay): a one-off writer is refused only if it began no later
   than a one-off writer the WAL already forgot (:mod:`.dedup`). Exact, whatever the
   clock says: a writer that began after every forgotten one was never forgotten.
4. *Age* (a cleaner's decision, not replay): retention by age measures against
   :func:`age_reference_ms`, ``min(own clock, step clock + CLOCK_SLACK_MS)``; the grace
   against :func:`grace_reference_ms`, ``min(own clock, the region's newest entry
   time)``. A cleaner ahead of the writers deletes no more than one with a right clock.
5. *Schedule* (a writer's decision): a last cleaner pass in the future by more than an
   interval is ignored (:func:`clean_due`); replay keeps the newest pass in log order.

Each rule in replay depends only on the records before it, so every process decides
alike. Rules 4 and 5 decide what a process appends, and replay applies that record.
"""

from __future__ import annotations

CLOCK_STEP_MS = 24 * 3600 * 1000  # how far one record moves the clock (1/7 of the window)
CLOCK_SLACK_MS = 1_000  # how far past the newest commit a cleaner may measure age


def age_reference_ms(own_ms: int, step_clock_ms: int) -> int:
    """The "now" retention by age measures against: a cleaner's own clock, but never
    more than :data:`CLOCK_SLACK_MS` past the step clock, which only commits move."""
    return min(own_ms, step_clock_ms + CLOCK_SLACK_MS)


def grace_reference_ms(own_ms: int, newest_entry_ms: int) -> int:
    """The "now" the grace measures an entry's age against: a cleaner's own clock, but
    never past the newest entry of the region (written by the writers, not the cleaner)."""
    return min(own_ms, newest_entry_ms)


def clean_due(now_ms: float, last_clean_ms: int, interval_ms: float) -> bool:
    """Whether a cleaner pass is due: ``interval_ms`` passed since the last one, or the
    last one claims to be more than an interval in the future (a host ahead wrote it),
    which is ignored rather than obeyed for days."""
    return now_ms - last_clean_ms >= interval_ms or last_clean_ms - now_ms > interval_ms
