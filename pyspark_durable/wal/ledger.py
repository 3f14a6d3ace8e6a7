"""The ledger of one namespace: its ``commits`` log and the state replayed from it.

Everything the WAL knows lives in the ``commits`` log (rules 1-8 of the protocol in
:mod:`pyspark_durable.wal.namespace`); a :class:`Ledger` is one process's reading of it.
It owns the log, the replayed :class:`~pyspark_durable.wal.replay.state.NamespaceState`,
the lock that makes refresh, decide and append one unit, and the healing that
recovers from the newest snapshot when cleaners trimmed the log under the handle.

It is the WAL's own door to that state: the namespace's façade, its table catalog,
its read path and its answers go through it, and so does ``upkeep/`` (the cleaner,
check and repair), which must decide on the replayed state itself. Code outside
``wal/`` asks the :class:`~pyspark_durable.wal.namespace.Namespace` instead.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from pyspark_durable.errors import IncarnationMismatch, LogNotFound, OffsetOutOfRange, StepsTrimmed
from pyspark_durable.log import Log, LogStore
from pyspark_durable.wal.format.commit_record import CommitRecord
from pyspark_durable.wal.format.records import encode_meta
from pyspark_durable.wal.replay.copies import commit_entries
from pyspark_durable.wal.replay.snapshot_schedule import SnapshotSchedule
from pyspark_durable.wal.replay.state import RECOVER_ATTEMPTS, NamespaceState

log = logging.getLogger("pyspark_durable.wal.namespace")

COMMITS_LOG = "commits"
# A state this handle replayed this recently serves a check that replay re-decides after
# the append (a commit's early answers): on S3 each catch-up is a LIST, and a driver's
# commit follows the catch-up of opening its cached handle by microseconds.
JUST_CAUGHT_UP_S = 0.5

T = TypeVar("T")


class Ledger:
    """One namespace's ``commits`` log, its replayed state, its lock and its healing."""

    def __init__(self, store: LogStore, create: bool = True) -> None:
        """Open the commits log (with ``create``: create it) and recover the state.

        A namespace that has no commits log is :class:`LogNotFound` listing the
        namespaces the store holds, so a misspelt name says what there is.
        """
        self.store = store
        self.name = store.namespace
        self._lock = threading.RLock()
        try:
            self._commits = store.open_log(COMMITS_LOG, create=create)
        except LogNotFound:
            names = [n for n in store.sibling_namespaces() if n != self.name]
            raise LogNotFound(f"unknown namespace {self.name!r}; namespaces: "
                              f"{', '.join(names) or 'none'} in {store.location()}") from None
        self._state = NamespaceState.recover(store, self._commits)
        self._caught_up_at = time.monotonic()
        self.snapshots = SnapshotSchedule(store)  # the committer's: every N records

    @property
    def state(self) -> NamespaceState:
        """The replayed state as of the last refresh (no log read): for a caller that
        just refreshed, or one asking what never changes once committed."""
        return self._state

    @property
    def commits(self) -> Log:
        """The ``commits`` log this ledger replays."""
        return self._commits

    @property
    def incarnation(self) -> str | None:
        """The id the namespace got when it was created (None: an older WAL without one)."""
        return self._state.incarnation

    def refreshed(self, within_s: float = 0.0,
                  through: tuple[int, float] | None = None) -> NamespaceState:
        """Replay what any process appended to the commits log since we last looked; the
        state after it. With ``within_s``, a state this handle caught up with that
        recently is returned as it is (no log read): for answers that a replay decides
        again later, never for what a reader is shown. With ``through``, ``(end,
        started)`` of this handle's own append, begun at ``started`` (monotonic), the
        replay stops at ``end`` and asks the log for no bounds: everything acknowledged
        before the append began lies below it.

        If a cleaner cleaned the log below where we are, the ledger heals: it recovers
        again from the newest snapshot (rule 8 of the protocol). A log that is another
        incarnation's is :class:`IncarnationMismatch`, after which the ledger follows
        the WAL that is there now.
        """
        with self._lock:
            started = time.monotonic()
            if within_s > 0 and started - self._caught_up_at < within_s:
                return self._state
            before = self._state.next_step
            try:
                self._state.replay(self._commits, None if through is None else through[0])
                # replay only appends: the committed high watermark never goes back
                assert self._state.next_step >= before, (before, self._state.next_step)
            except OffsetOutOfRange:
                log.info("namespace=%s: commits log cleaned below offset %d under this handle; "
                         "recovering from the newest snapshot", self.name, self._state.next_offset)
                self._state = NamespaceState.recover(self.store, self._commits)
            except IncarnationMismatch as exc:
                old = self._state.incarnation
                self.store.reset()  # cached log state describes the WAL that is gone
                self._commits = self.store.open_log(COMMITS_LOG, create=False)
                self._state = NamespaceState.recover(self.store, self._commits)
                raise IncarnationMismatch(
                    f"{exc.args[0].split(': ', 1)[-1]} (this handle knew incarnation {old}; the "
                    f"WAL now is incarnation {self._state.incarnation} with "
                    f"{self._state.next_step} steps; this handle follows it from now on)",
                    namespace=self.name) from exc
            # what was acknowledged before we (or the append we read through) began is replayed
            self._caught_up_at = started if through is None else through[1]
            return self._state

    def exclusive(self) -> threading.RLock:
        """The lock: hold it to refresh, decide and append as one unit."""
        return self._lock

    def append(self, record: CommitRecord) -> int:
        """Append one record to the commits log; its offset. Replay decides what it
        means: :meth:`refreshed` to see it."""
        return self.append_json([record.to_json()])[0]

    def append_json(self, records: list[dict]) -> list[int]:
        """Append records' JSON in order as one append (one sync, whatever their number),
        each tagged with the incarnation it belongs to; each record's offset.

        A record that carries its own tag keeps it: the namespace's first record names
        the incarnation it starts before replay knows any.
        """
        _, offsets = self._append_values(records)
        return offsets[::self.store.record_copies]  # a record's offset is its original's

    def append_replayed(self, record: CommitRecord) -> int:
        """Append one record and replay the log through it; its offset. A record that
        landed right where this handle's replay stands is applied as written (its own
        bytes, decoded as a replay would): the log is read back only when another
        process appended between (a writer's commit then costs its append alone)."""
        started = time.monotonic()
        [value], raw = self._append_values([record.to_json()])
        offset, end = raw[0], raw[-1] + 1
        with self._lock:
            if raw != list(range(offset, end)) or not self._state.replay_own(value, offset, end):
                if self._state.next_offset < end:
                    self.refreshed(through=(end, started))
        return offset

    def _append_values(self, records: list[dict]) -> tuple[list[bytes], list[int]]:
        """Records' JSON tagged and encoded, appended as one append (with their copies,
        which share its one sync): the encoded values and every entry's offset."""
        tag = {} if self._state.incarnation is None else {"i": self._state.incarnation}
        values = [encode_meta({**r, **tag}) for r in records]
        return values, self._commits.append(commit_entries(values, self.store.record_copies))

    def healing(self, ask: Callable[[NamespaceState], T]) -> T:
        """``ask(state)``; if it reads steps the commits log no longer holds
        (:class:`StepsTrimmed`), recover from the newest snapshot and ask again.

        A ledger's step index is its view as of its last fold: cleaners in other
        processes may meanwhile expire those steps, write two newer snapshots and trim
        the log below them. Trimmed steps were unneeded in the newer snapshots' view,
        and a step never becomes needed again, so the recovered state (the newest
        snapshot, replayed to the log's end) answers as a fresh open would.
        """
        for attempt in range(RECOVER_ATTEMPTS):
            try:
                return ask(self._state)
            except StepsTrimmed as exc:
                if attempt == RECOVER_ATTEMPTS - 1:
                    raise
                log.info("namespace=%s: %s; recovering from the newest snapshot", self.name, exc)
                self._state = NamespaceState.recover(self.store, self._commits)
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def snapshot_if_due(self) -> int | None:
        """After a commit: a snapshot of the state as of the log's end if
        ``SNAPSHOT_EVERY_RECORDS`` records came since the newest one (its version, or
        None), so an open replays a bounded tail even where no cleaner runs
        (:mod:`.snapshot_schedule`)."""
        with self._lock:
            if not self.snapshots.due(self._state):
                return None
            return self.healing(lambda _: self.snapshots.write_if_due(self.refreshed()))
