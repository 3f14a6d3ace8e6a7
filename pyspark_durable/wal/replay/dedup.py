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

One-off writers with one committed pair (every batch write) are held as columns
(:class:`~.oneoff_block.OneOffBlock`, read from a snapshot and rebuilt whenever one
is written) rather than an object each, so opening costs no Python object per writer
remembered; the writers replay touched since live in a dict, as every writer did.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from pyspark_durable.codec.arrays import int_array, string_array, table_of
from pyspark_durable.wal.replay.oneoff_block import ONE_OFF_COLUMNS, OneOffBlock

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
    # remembered writer step -> step, kept in ascending writer step: the bound drops the
    # first one, found without a scan of the writer's pairs at every step replayed
    pairs: dict[int, int] = field(default_factory=dict)
    forgot: int = -1  # the highest committed writer step no longer remembered
    started_ms: int | None = None  # a one-off writer's newest start


class WritersView(Mapping[str, WriterState]):
    """Every writer remembered, read-only: the dict's, then the block's (a copy each)."""

    def __init__(self, dedup: Dedup) -> None:
        self._dedup = dedup

    def __getitem__(self, writer_id: str) -> WriterState:
        w = self._dedup.writer(writer_id)
        if w is None:
            raise KeyError(writer_id)
        return w

    def __iter__(self) -> Iterator[str]:
        yield from self._dedup._writers  # noqa: SLF001 - the view is part of Dedup
        base = self._dedup._base  # noqa: SLF001
        if base is not None:
            yield from (base.row(i)[1] for i in base.live_rows())

    def __len__(self) -> int:
        base = self._dedup._base  # noqa: SLF001 - the view is part of Dedup
        return len(self._dedup._writers) + (base.live if base is not None else 0)  # noqa: SLF001


@dataclass
class Dedup:
    """The writers replay remembers, and the policy and clock that bound them."""

    _writers: dict[str, WriterState] = field(default_factory=dict)
    _base: OneOffBlock | None = None  # one-off writers a snapshot held, as columns
    window_ms: int | None = None  # None: before any `dedup` record, remember everything
    steps: int | None = None
    clock_ms: int = 0
    step_ms: int | None = None  # None: before a `clocks` record (the clock takes any time)
    step_clock_ms: int = 0  # the newest commit time, each step moving it <= step_ms
    forgot_start_ms: int | None = None  # the newest start of a one-off writer forgotten
    max_one_offs: int | None = None  # None: before an `oneoffs` record (the window alone)
    one_offs: int = 0  # one-off writers remembered (those with a start)
    _starts: list[tuple[int, str]] = field(default_factory=list)  # heap of the dict's starts

    # -- questions -------------------------------------------------------------------

    @property
    def writers(self) -> WritersView:
        """Every writer remembered (read-only)."""
        return WritersView(self)

    def writer(self, writer_id: str) -> WriterState | None:
        """What is remembered of a writer (a block row read as a new object), or None."""
        w = self._writers.get(writer_id)
        if w is not None or self._base is None:
            return w
        row = self._base.find(writer_id)
        if row is None:
            return None
        started, _, wstep, step = self._base.row(row)
        return WriterState(wstep, {wstep: step}, -1, started)

    def _own(self, writer_id: str) -> WriterState:
        """The writer's dict entry, made (or moved from the block) for replay to change."""
        w = self._writers.get(writer_id)
        if w is not None:
            return w
        w = self.writer(writer_id)
        if w is None:
            w = WriterState()
        else:  # out of the block, still remembered: its start joins the heap
            assert self._base is not None and w.started_ms is not None
            row = self._base.find(writer_id)
            assert row is not None
            self._base.drop(row)
            heapq.heappush(self._starts, (w.started_ms, writer_id))
        self._writers[writer_id] = w
        return w

    def committed(self, writer_id: str, writer_step: int) -> int | None:
        """The step that committed the pair, if it is remembered."""
        w = self.writer(writer_id)
        return None if w is None else w.pairs.get(writer_step)

    def last(self, writer_id: str) -> int | None:
        """The writer's highest writer step seen, or None if it is not remembered."""
        w = self.writer(writer_id)
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
        w = self.writer(writer_id)
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
        while (oldest := self._oldest()) is not None and oldest[0] < cutoff:
            self._forget_oldest()

    def _forget_oldest(self) -> None:
        """Forget the one-off writer with the oldest start, ``(start, writer id)`` order
        over the heap and the block alike, as a full replay's heap pops them."""
        oldest = self._oldest()
        if oldest is None:
            return
        started, writer_id = oldest
        if self._starts and self._starts[0] == oldest:
            heapq.heappop(self._starts)
            del self._writers[writer_id]
        else:
            assert self._base is not None
            self._base.drop(self._base.lo)
        self.one_offs -= 1
        if self.step_ms is not None:  # (before: snapshots did not keep it, so
            # every process starts it alike at the `clocks` record instead)
            self.forgot_start_ms = max(self.forgot_start_ms or started, started)

    def _at_bound(self) -> bool:
        return self.max_one_offs is not None and self.one_offs >= self.max_one_offs

    def _oldest(self) -> tuple[int, str] | None:
        """(start, writer id) of the one-off writer remembered that is forgotten first:
        the heap's head (stale heads, of writers that began again since, dropped) or
        the block's, whichever is older."""
        while self._starts:
            started, writer_id = self._starts[0]
            w = self._writers.get(writer_id)
            if w is not None and w.started_ms == started:
                break
            heapq.heappop(self._starts)
        heap = self._starts[0] if self._starts else None
        base = self._base.head() if self._base is not None else None
        if heap is None or base is None:
            return heap or base
        return min(heap, base)

    def _oldest_start(self) -> int | None:
        """The oldest start of a one-off writer remembered."""
        oldest = self._oldest()
        return None if oldest is None else oldest[0]

    def _bound_one_offs(self) -> None:
        """Past ``max_one_offs`` remembered one-off writers, forget by oldest start, as
        the window does: every writer with an older start goes first, so rule 3 of the
        clock rules stays exact (only with them: the bound needs ``forgot_start_ms``)."""
        if self.max_one_offs is None or self.step_ms is None:
            return
        while self.one_offs > self.max_one_offs and self._oldest() is not None:
            self._forget_oldest()

    def accept(self, writer_id: str, writer_step: int, step: int,
               started_ms: int | None) -> None:
        w = self._own(writer_id)
        pairs = w.pairs
        out_of_order = bool(pairs) and writer_step < next(reversed(pairs))
        pairs[writer_step] = step
        if out_of_order:
            w.pairs = dict(sorted(pairs.items()))
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
        w = self._own(writer_id)
        w.last = max(w.last, writer_step)

    def set_policy(self, window_ms: int, steps: int) -> None:
        """A ``dedup`` record: bound what is remembered from here on (the latest wins)."""
        self.window_ms, self.steps = window_ms, steps
        if steps < 1 and self._base is not None:  # a block row holds one pair
            for writer_id in list(self.writers):
                self._own(writer_id)
        for w in self._writers.values():
            self._bound(w)

    def set_one_offs(self, writers: int) -> None:
        """An ``oneoffs`` record: remember at most ``writers`` one-off writers from here on."""
        self.max_one_offs = writers
        self._bound_one_offs()

    def _bound(self, w: WriterState) -> None:
        if self.steps is None:
            return
        while len(w.pairs) > self.steps:  # keep the newest: drop the lowest writer step
            lowest = next(iter(w.pairs))
            del w.pairs[lowest]
            w.forgot = max(w.forgot, lowest)

    # -- snapshots -------------------------------------------------------------------

    def encode(self) -> tuple[dict[str, Any], pa.Table]:
        """The snapshot's form: the JSON document, and the one-off writers with one pair
        as a block (:data:`ONE_OFF_SCHEMA` columns). The handle holds them as that block
        from now on too, as a process recovering from the snapshot does, so the dict
        keeps only what replay touches after it."""
        moved = [writer_id for writer_id, w in self._writers.items() if _one_pair(w)]
        cols: list[list[Any]] = [[], [], [], []]
        for writer_id in moved:
            w = self._writers.pop(writer_id)
            [(wstep, step)] = w.pairs.items()
            for col, value in zip(cols, (w.started_ms, writer_id, wstep, step), strict=True):
                col.append(value)
        starts, writers, wsteps, steps = cols
        rows = table_of({"start": int_array(starts), "writer": string_array(writers),
                         "writer_step": int_array(wsteps), "step": int_array(steps)},
                        ONE_OFF_COLUMNS)
        if self._base is not None:
            rows = pa.concat_tables([self._base.remaining(), rows])
        self._base = OneOffBlock.of(rows)
        self._starts = [(w.started_ms, writer_id) for writer_id, w in self._writers.items()
                        if w.started_ms is not None]
        heapq.heapify(self._starts)
        return self.to_json(), self._base.table

    def to_json(self) -> dict[str, Any]:
        """The JSON document of a snapshot: the dict's writers (not the block's)."""
        writers = {}
        for writer_id, w in self._writers.items():
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
    def from_json(cls, d: dict[str, Any], block: pa.Table | None = None) -> Dedup:
        """A snapshot's dedup state: the document's writers, and the block's one-off
        writers (format 5), held as columns."""
        dedup = cls(window_ms=d["window_ms"], steps=d["steps"], clock_ms=d["clock_ms"],
                    step_ms=d.get("step_ms"), step_clock_ms=d.get("step_clock_ms", 0),
                    forgot_start_ms=d.get("forgot_start_ms"), max_one_offs=d.get("one_offs"))
        for writer_id, (last, forgot, started_ms, runs) in d["writers"].items():
            pairs = dict(sorted((wstep + i, step + i) for wstep, step, count in runs
                                for i in range(count)))
            dedup._writers[writer_id] = WriterState(last, pairs, forgot, started_ms)
            if started_ms is not None:
                dedup._starts.append((started_ms, writer_id))
                dedup.one_offs += 1
        heapq.heapify(dedup._starts)
        if block is not None and block.num_rows:
            dedup._base = OneOffBlock(block)
            dedup.one_offs += dedup._base.live
        return dedup

    @classmethod
    def from_pairs(cls, pairs: dict[str, list[list[int]]], last: dict[str, int]) -> Dedup:
        """A format 3 snapshot's pairs (every pair, as versions without a window kept)."""
        dedup = cls()
        for writer_id, runs in pairs.items():
            w = dedup._writers.setdefault(writer_id, WriterState())
            for wstep, step, count in runs:
                for i in range(count):
                    w.pairs[wstep + i] = step + i
        for writer_id, step in last.items():
            dedup.note(writer_id, step)
        for w in dedup._writers.values():
            w.pairs = dict(sorted(w.pairs.items()))
            w.last = max(w.last, max(w.pairs, default=-1))
        return dedup


def _one_pair(w: WriterState) -> bool:
    """A one-off writer a block row holds whole: a start, one pair (its highest writer
    step) and nothing forgotten."""
    return w.started_ms is not None and w.forgot == -1 and len(w.pairs) == 1 and \
        w.last in w.pairs
