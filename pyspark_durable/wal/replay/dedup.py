"""Bounded deduplication: what replay remembers of committed ``(writer, writer_step)`` pairs.

Committing a pair twice must never make two steps (rule 3 of the protocol in
:mod:`pyspark_durable.wal.namespace`). Remembering every pair ever committed makes
every open and every snapshot grow with history, so after a ``dedup`` record replay
remembers, in the spirit of Kafka's ``transactional.id.expiration.ms`` and Delta's
``setTransactionRetentionDuration``:

- per writer, its newest ``steps`` committed writer steps and its highest writer step
  (a streaming query replays only its last micro-batch); and
- a *one-off* writer (a batch write, whose step record carries ``started_ms``, the time
  its writer step began) until the WAL's clock is ``window_ms`` past that start.

The rule that keeps this exact: a step record replay cannot judge is refused, never
taken for new. A record of a writer step older than the writer's remembered ones
(``writer_step <= forgot``), or of a one-off writer step that began more than the
window before the clock, is refused in every process alike, and its committer gets
:class:`~pyspark_durable.errors.WriterStepExpired`. A one-off writer is forgotten only
once its newest start is past the window, so a recommit of its pair (which carries the
same start) is refused by that second test: never a silent duplicate.

The clock is the newest commit or cleaner-pass time replay has seen (times written by
the processes that appended them), so every process decides the same at the same
record, whatever the time is where it runs. Before the first ``dedup`` record (a WAL
written by an older version) every pair is remembered, as that version did.

From a ``clocks`` record on (:mod:`.clocks`), a record moves the clock at most
``step_ms`` past the step clock, and the second test above becomes exact: a one-off
record is refused only if it began no later than a one-off writer replay forgot
(``forgot_start_ms``). A writer forgotten had its newest start before the cutoff, and
every writer with an older start was forgotten with it, so a start after every
forgotten one was never forgotten: a clock pushed ahead makes the WAL forget early,
never refuse a writer that began after the ones it forgot. Records before the
``clocks`` record keep the rules they were written under, so no step is renumbered.

From an ``oneoffs`` record on, at most that many one-off writers are remembered: past
it, the one with the oldest start is forgotten, by the same rule, so a process holds
a bounded number (:data:`DEDUP_ONE_OFFS`) however many batch writes the window holds.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any

DEDUP_WINDOW_MS = 7 * 24 * 3600 * 1000  # Kafka's transactional.id.expiration.ms default
DEDUP_STEPS = 64  # writer steps remembered per writer (Spark replays one micro-batch)
# one-off writers remembered at most (an `oneoffs` record): about 550 bytes each in a
# process, so 9 MB however many batch writes the window holds; at one batch write a
# second that is 4.5 hours of them, far longer than a batch job retries its commit
DEDUP_ONE_OFFS = 16_384


@dataclass(slots=True)
class WriterState:
    """What replay remembers of one writer."""

    last: int = -1  # highest writer step seen (a step, or a `writer` record)
    pairs: dict[int, int] = field(default_factory=dict)  # remembered writer step -> step
    forgot: int = -1  # the highest committed writer step no longer remembered
    started_ms: int | None = None  # a one-off writer's newest start


@dataclass
class Dedup:
    """The writers replay remembers, and the policy and clock that bound them."""

    writers: dict[str, WriterState] = field(default_factory=dict)
    window_ms: int | None = None  # None: before any `dedup` record, remember everything
    steps: int | None = None
    clock_ms: int = 0
    step_ms: int | None = None  # None: before a `clocks` record (the clock takes any time)
    step_clock_ms: int = 0  # the newest commit time, each step moving it <= step_ms
    forgot_start_ms: int | None = None  # the newest start of a one-off writer forgotten
    max_one_offs: int | None = None  # None: before an `oneoffs` record (the window alone)
    one_offs: int = 0  # one-off writers remembered (those with a start)
    _starts: list[tuple[int, str]] = field(default_factory=list)  # heap of one-off starts

    # -- questions -------------------------------------------------------------------

    def committed(self, writer_id: str, writer_step: int) -> int | None:
        """The step that committed the pair, if it is remembered."""
        w = self.writers.get(writer_id)
        return None if w is None else w.pairs.get(writer_step)

    def last(self, writer_id: str) -> int | None:
        """The writer's highest writer step seen, or None if it is not remembered."""
        w = self.writers.get(writer_id)
        return None if w is None or w.last < 0 else w.last

    def too_old(self, writer_id: str, writer_step: int, started_ms: int | None) -> str | None:
        """Why a new record of this pair cannot be judged (None: it can)."""
        if self.window_ms is None:
            return None
        if started_ms is not None and self.step_ms is not None:
            if self.forgot_start_ms is not None and started_ms <= self.forgot_start_ms:
                return (f"writer step {writer_step} of writer {writer_id!r} began at "
                        f"{started_ms} ms, no later than a one-off writer the WAL forgot "
                        f"(begun at {self.forgot_start_ms} ms) once its clock "
                        f"({self.clock_ms} ms) was the deduplication window "
                        f"({self.window_ms} ms) past it, or more one-off writers than it "
                        f"remembers ({self.max_one_offs}) began after it")
            oldest = self._oldest_start() if self._at_bound() else None
            if oldest is not None and started_ms <= oldest:
                return (f"writer step {writer_step} of writer {writer_id!r} began at "
                        f"{started_ms} ms, no later than every one-off writer the WAL "
                        f"remembers (the oldest began at {oldest} ms), and it remembers as "
                        f"many as it may ({self.max_one_offs}): it would be forgotten at once")
        elif started_ms is not None and started_ms < self.clock_ms - self.window_ms:
            return (f"writer step {writer_step} of writer {writer_id!r} began at {started_ms} ms, "
                    f"more than the deduplication window ({self.window_ms} ms) before the "
                    f"WAL's clock ({self.clock_ms} ms)")
        w = self.writers.get(writer_id)
        if w is not None and writer_step <= w.forgot and writer_step not in w.pairs:
            return (f"writer step {writer_step} of writer {writer_id!r} is older than the "
                    f"{self.steps} newest writer steps the WAL remembers of it (it remembers "
                    f"{min(w.pairs, default=w.last)}..{w.last})")
        return None

    # -- what replay applies ---------------------------------------------------------

    def tick_step(self, timestamp_ms: int) -> None:
        """A step record's commit time: it moves the step clock (by at most ``step_ms``
        from a ``clocks`` record on) and the clock with it."""
        if self.step_ms is None:
            self.tick(timestamp_ms)
            return
        if self.step_clock_ms == 0:  # the first step sets it
            self.step_clock_ms = timestamp_ms
        else:
            self.step_clock_ms = max(self.step_clock_ms,
                                     min(timestamp_ms, self.step_clock_ms + self.step_ms))
        self.tick(self.step_clock_ms)

    def tick_clean(self, timestamp_ms: int) -> None:
        """A cleaner pass's time: it moves the clock, from a ``clocks`` record on never
        more than ``step_ms`` past the step clock (repeated passes push it no further)."""
        if self.step_ms is not None:
            timestamp_ms = min(timestamp_ms, self.step_clock_ms + self.step_ms)
        self.tick(timestamp_ms)

    def set_clock_rules(self, step_ms: int) -> None:
        """A ``clocks`` record. The step clock starts at the clock, and every start the
        old rule may have forgotten (before the clock minus the window) counts as forgotten."""
        if self.step_ms is None:
            self.step_clock_ms = self.clock_ms
            if self.window_ms is not None and self.clock_ms - self.window_ms > 0:
                old_cutoff = self.clock_ms - self.window_ms - 1  # `< cutoff` as `<= this`
                self.forgot_start_ms = max(self.forgot_start_ms or 0, old_cutoff)
        self.step_ms = step_ms

    def tick(self, timestamp_ms: int) -> None:
        """Move the clock to a time; forget one-off writers past the window."""
        if timestamp_ms <= self.clock_ms:
            return
        self.clock_ms = timestamp_ms
        if self.window_ms is None:
            return
        cutoff = self.clock_ms - self.window_ms
        while self._starts and self._starts[0][0] < cutoff:
            self._forget_oldest()

    def _forget_oldest(self) -> None:
        """Forget the one-off writer with the oldest start (a stale heap entry, of a
        writer that began again since, is dropped)."""
        started, writer_id = heapq.heappop(self._starts)
        w = self.writers.get(writer_id)
        if w is not None and w.started_ms == started:  # no newer start since
            del self.writers[writer_id]
            self.one_offs -= 1
            if self.step_ms is not None:  # (before: snapshots did not keep it, so
                # every process starts it alike at the `clocks` record instead)
                self.forgot_start_ms = max(self.forgot_start_ms or started, started)

    def _at_bound(self) -> bool:
        return self.max_one_offs is not None and self.one_offs >= self.max_one_offs

    def _oldest_start(self) -> int | None:
        """The oldest start of a one-off writer remembered (stale heap heads dropped)."""
        while self._starts:
            started, writer_id = self._starts[0]
            w = self.writers.get(writer_id)
            if w is not None and w.started_ms == started:
                return started
            heapq.heappop(self._starts)
        return None

    def _bound_one_offs(self) -> None:
        """Past ``max_one_offs`` remembered one-off writers, forget by oldest start, as
        the window does: every writer with an older start goes first, so rule 3 of the
        clock rules stays exact (only with them: the bound needs ``forgot_start_ms``)."""
        if self.max_one_offs is None or self.step_ms is None:
            return
        while self.one_offs > self.max_one_offs and self._starts:
            self._forget_oldest()

    def accept(self, writer_id: str, writer_step: int, step: int,
               started_ms: int | None) -> None:
        w = self.writers.setdefault(writer_id, WriterState())
        w.pairs[writer_step] = step
        w.last = max(w.last, writer_step)
        self._bound(w)
        if started_ms is not None and self.window_ms is not None and \
                (w.started_ms is None or started_ms > w.started_ms):
            self.one_offs += w.started_ms is None
            w.started_ms = started_ms
            heapq.heappush(self._starts, (started_ms, writer_id))
            self._bound_one_offs()

    def note(self, writer_id: str, writer_step: int) -> None:
        """A writer finished ``writer_step`` without rows (a ``writer`` record)."""
        w = self.writers.setdefault(writer_id, WriterState())
        w.last = max(w.last, writer_step)

    def set_policy(self, window_ms: int, steps: int) -> None:
        """A ``dedup`` record: bound what is remembered from here on (the latest wins)."""
        self.window_ms, self.steps = window_ms, steps
        for w in self.writers.values():
            self._bound(w)

    def set_one_offs(self, writers: int) -> None:
        """An ``oneoffs`` record: remember at most ``writers`` one-off writers from here on."""
        self.max_one_offs = writers
        self._bound_one_offs()

    def _bound(self, w: WriterState) -> None:
        if self.steps is None:
            return
        while len(w.pairs) > self.steps:  # keep the newest: drop the lowest writer step
            lowest = min(w.pairs)
            del w.pairs[lowest]
            w.forgot = max(w.forgot, lowest)

    # -- snapshots -------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        writers = {}
        for writer_id, w in self.writers.items():
            runs: list[list[int]] = []  # [writer step, step, count]: a streaming writer is 1
            for wstep, step in sorted(w.pairs.items()):
                if runs and runs[-1][0] + runs[-1][2] == wstep and runs[-1][1] + runs[-1][2] == step:
                    runs[-1][2] += 1
                else:
                    runs.append([wstep, step, 1])
            writers[writer_id] = [w.last, w.forgot, w.started_ms, runs]
        return {"writers": writers, "window_ms": self.window_ms, "steps": self.steps,
                "clock_ms": self.clock_ms,
                **({"step_ms": self.step_ms, "step_clock_ms": self.step_clock_ms,
                    "forgot_start_ms": self.forgot_start_ms}
                   if self.step_ms is not None else {}),
                **({"one_offs": self.max_one_offs} if self.max_one_offs is not None else {})}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Dedup:
        dedup = cls(window_ms=d["window_ms"], steps=d["steps"], clock_ms=d["clock_ms"],
                    step_ms=d.get("step_ms"), step_clock_ms=d.get("step_clock_ms", 0),
                    forgot_start_ms=d.get("forgot_start_ms"), max_one_offs=d.get("one_offs"))
        for writer_id, (last, forgot, started_ms, runs) in d["writers"].items():
            pairs = {wstep + i: step + i for wstep, step, count in runs for i in range(count)}
            dedup.writers[writer_id] = WriterState(last, pairs, forgot, started_ms)
            if started_ms is not None:
                dedup._starts.append((started_ms, writer_id))
                dedup.one_offs += 1
        heapq.heapify(dedup._starts)
        return dedup

    @classmethod
    def from_pairs(cls, pairs: dict[str, list[list[int]]], last: dict[str, int]) -> Dedup:
        """A format 3 snapshot's pairs (every pair, as versions without a window kept)."""
        dedup = cls()
        for writer_id, runs in pairs.items():
            w = dedup.writers.setdefault(writer_id, WriterState())
            for wstep, step, count in runs:
                for i in range(count):
                    w.pairs[wstep + i] = step + i
        for writer_id, step in last.items():
            dedup.note(writer_id, step)
        for w in dedup.writers.values():
            w.last = max(w.last, max(w.pairs, default=-1))
        return dedup
