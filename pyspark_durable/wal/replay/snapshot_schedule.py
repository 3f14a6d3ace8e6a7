"""When a committer writes a snapshot: every :data:`SNAPSHOT_EVERY_RECORDS` records.

A namespace that no cleaner ever cleans still opens by replaying a bounded tail, as
Delta's writer writes a checkpoint every 10 commits: after its own commit returns, a
committer whose state is :data:`SNAPSHOT_EVERY_RECORDS` records or more past the newest
snapshot it knows lists the stored versions and, if that is still so, writes one as of
the log's end and prunes all but the newest :data:`SNAPSHOTS_KEPT`. It keeps the rules
cleaners keep (docs/protocol.md, "Snapshots"):

- a snapshot is the state exactly as of its version (the commits offset it describes);
  replay is a pure function of the log, so two committers writing the same version in
  separate processes write equivalent states, and the store keeps one of them whole
  (the file log renames a private temporary file over it, Kafka keeps the last record
  of its key): racing writers are harmless;
- no version below the newest one seen is written, and readers take the highest
  version, so snapshots never go backwards;
- only cleaners trim the commits log, below the older of the two newest snapshots:
  a committer's snapshot never deletes a record, and pruning keeps two *good* ones
  (:func:`prune`: a snapshot that fails its check never counts, so pruning never
  deletes a good snapshot while it keeps a damaged one).

The cost is amortized: a listing every ``SNAPSHOT_EVERY_RECORDS`` records at most, and a
snapshot write (one fold of the tail into chunks, one stored file) and a read of the
stored versions (two, three while one is damaged) per that many.
A failed write is logged with its typed error and tried again at the next commit:
the step it follows is committed either way.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from pyspark_durable.errors import DecodeError, DurableWalError, NewerVersion, StepsTrimmed
from pyspark_durable.log import LogStore
from pyspark_durable.wal.format.snapshot_file import SNAPSHOT_NAME
from pyspark_durable.wal.replay.state import NamespaceState

log = logging.getLogger(__name__)

SNAPSHOT_EVERY_RECORDS = 1_000  # commits records a replay after the newest snapshot may need
SNAPSHOTS_KEPT = 2  # the newest, and one before it while a reader may still load it


def every_records(store: LogStore) -> int:
    """Records between two snapshots: the store's preference, else this module's."""
    return store.snapshot_every_records or SNAPSHOT_EVERY_RECORDS


def every_offsets(store: LogStore, records: int | None = None) -> int:
    """Commits offsets between two snapshots: ``records`` (default :func:`every_records`)
    records, each with the copies the store writes of it."""
    return (every_records(store) if records is None else records) * store.record_copies


@dataclass
class SnapshotCopies:
    """The stored snapshot versions as read back: which ones recovery can start from.

    A version is *good* when it decodes whole, as recovery decodes it (CRC, envelope,
    document, blocks), and *damaged* when it does not: recovery skips it, so it never
    counts as a copy. A newer release's snapshot is neither: never counted, never deleted.
    """

    good: dict[int, int] = field(default_factory=dict)  # version -> its keep_from, ascending
    damaged: dict[int, DecodeError] = field(default_factory=dict)  # version -> why
    newer: dict[int, NewerVersion] = field(default_factory=dict)
    vanished: bool = False  # a listed version was deleted while read (a racing pruner)

    def kept(self) -> list[int]:
        """The newest :data:`SNAPSHOTS_KEPT` good versions: the copies pruning keeps."""
        return sorted(self.good)[-SNAPSHOTS_KEPT:]

    def short(self) -> bool:
        """Whether damage left fewer than :data:`SNAPSHOTS_KEPT` good copies (a repair is
        due: a fresh snapshot, then the damaged ones go)."""
        return bool(self.damaged) and len(self.good) < SNAPSHOTS_KEPT

    def doomed(self) -> list[int]:
        """What pruning deletes: good versions older than the kept ones, and damaged ones
        once :data:`SNAPSHOTS_KEPT` good ones exist (never the last good copy, and a
        damaged one stays until its replacement is stored: ``check`` names it till then)."""
        kept = self.kept()
        old = [v for v in sorted(self.good) if v < kept[0]] if kept else []
        return sorted(old + (list(self.damaged) if len(kept) >= SNAPSHOTS_KEPT else []))


def read_copies(store: LogStore, namespace: str | None = None) -> SnapshotCopies:
    """Read and decode every stored snapshot version (each is small: the state as of its
    version, not the steps it covers); a backend error propagates."""
    copies = SnapshotCopies()
    name = store.namespace if namespace is None else namespace
    for version in store.snapshot_versions(SNAPSHOT_NAME):
        raw = store.read_snapshot_version(SNAPSHOT_NAME, version)
        if raw is None:
            copies.vanished = True
            continue
        try:
            copies.good[version] = NamespaceState.from_snapshot(name, raw, version).keep_from
        except NewerVersion as exc:
            copies.newer[version] = exc
        except DecodeError as exc:
            copies.damaged[version] = exc
    return copies


def prune(store: LogStore, copies: SnapshotCopies) -> list[int]:
    """Delete what :meth:`SnapshotCopies.doomed` names; the versions deleted."""
    doomed = copies.doomed()
    for version in doomed:
        store.delete_snapshot(SNAPSHOT_NAME, version)
    for version in doomed:
        copies.good.pop(version, None)
        copies.damaged.pop(version, None)
    return doomed


class SnapshotSchedule:
    """One handle's view of the newest snapshot, and the committer's rule to write one."""

    def __init__(self, store: LogStore, every_records: int | None = None) -> None:
        self.store = store
        self.every_records = every_records
        self.newest = -1  # the newest version this handle knows of (-1: none known)

    def _every(self) -> int:
        return every_offsets(self.store, self.every_records)

    def due(self, state: NamespaceState) -> bool:
        """Whether ``state`` is far enough past the newest snapshot known (no I/O)."""
        newest = max(self.newest, state.snapshot_offset)
        return state.next_offset - newest >= self._every()

    def write_if_due(self, state: NamespaceState) -> int | None:
        """Write a snapshot of ``state`` (replayed to the log's end by the caller, who
        holds the handle's lock) if it is due; its version, or None."""
        if not self.due(state):
            return None
        try:
            versions = self.store.snapshot_versions(SNAPSHOT_NAME)
            self.newest = max(self.newest, versions[-1] if versions else -1)
            if not self.due(state):
                return None  # another process wrote one meanwhile
            at, raw = state.snapshot(record_copies=self.store.record_copies)
            if at <= self.newest:  # never a version below the newest seen
                return None
            self.store.write_snapshot(SNAPSHOT_NAME, at, raw)
            self.newest = at
            prune(self.store, read_copies(self.store))
        except StepsTrimmed:
            raise  # the caller heals and asks again
        except DurableWalError as exc:
            log.warning(
                "namespace=%s: the committer's snapshot at commits offset %d failed, "
                "tried again at the next commit: %s",
                self.store.namespace,
                state.next_offset,
                exc,
            )
            return None
        log.debug("namespace=%s: committer wrote snapshot %d", self.store.namespace, at)
        return at
