"""What a :class:`~pyspark_durable.wal.namespace.Namespace` answers about itself (``info``).

Code outside ``wal/`` (the CLI, Spark, the endpoints) asks these instead of reading
the replay state (:class:`~pyspark_durable.wal.replay.state.NamespaceState`), so the state can
change shape without them, and what they get back cannot change it: tuples, frozen
records and read-only mappings of copies.

Every answer is as of the handle's last refresh: on Kafka a refresh costs broker round
trips, so a caller that needs what other processes appended since calls
``refresh()`` (or a method that refreshes, such as ``steps()``) first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from pyspark_durable.wal.format.records import StepCommit
from pyspark_durable.wal.ledger import Ledger
from pyspark_durable.wal.replay.state import NamespaceState
from pyspark_durable.wal.replay.stored_state import ReaderPosition


def handed_out(commit: StepCommit) -> StepCommit:
    """A copy of a step the state indexes, for a caller: replay fills in a step's number
    and sequences in place, so the state's own object must never leave ``wal/``."""
    return replace(commit, first_sequences=dict(commit.first_sequences))


@dataclass(frozen=True, slots=True)
class RegionEntries:
    """A region's entries ``[low, high)`` by who refers to them: retained steps, expired
    (still indexed) steps, or no step at all (attempts that wrote but never committed,
    which no reader ever reads: rule 4 of the protocol in :mod:`.namespace`)."""

    region_id: int
    low: int
    high: int
    retained: int
    expired: int
    freed: int = 0  # freed in place by a cleaner (no step referred to them): no longer held

    @property
    def uncommitted(self) -> int:
        return self.high - self.low - self.retained - self.expired - self.freed


@dataclass(frozen=True, slots=True)
class TableSize:
    """What steps hold of one (region, table): rows, bytes, the first entry's sequence."""

    rows: int
    size_bytes: int
    first_sequence: int


class NamespaceInfo:
    """Read-only answers about a namespace (``Namespace.info``), from its ledger."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger

    @property
    def _state(self) -> NamespaceState:
        return self._ledger.state

    @property
    def incarnation(self) -> str | None:
        """The id this namespace got when it was created (None: an older WAL without one)."""
        return self._ledger.incarnation

    def first_indexed_step(self) -> int:
        """The first step still indexed; steps below it were folded into a snapshot."""
        return self._state.base_step

    def indexed_steps(self) -> tuple[StepCommit, ...]:
        """The indexed steps in step order, expired ones (still indexed) included (copies)."""
        return self._ledger.healing(lambda s: tuple(handed_out(c) for c in s.index))

    def regions(self) -> tuple[int, ...]:
        """Regions that hold committed entries, ascending."""
        return tuple(self._state.regions())

    def readers(self) -> Mapping[str, ReaderPosition]:
        """Registered readers and their positions."""
        return MappingProxyType(dict(self._state.readers))

    def reader_position(self, reader_id: str) -> ReaderPosition | None:
        """A registered reader's position, or None if it is not registered."""
        return self._state.readers.get(reader_id)

    def lost_steps(self) -> Mapping[int, str]:
        """Steps recorded lost (``durablewal repair``), each with what was lost."""
        return MappingProxyType(dict(self._state.lost))

    def last_clean_ms(self) -> int:
        """When the newest cleaner pass (in log order) recorded itself (0: never)."""
        return self._state.last_clean_ms

    def clock_ms(self) -> int:
        """The WAL's clock: its newest commit time as the clock rules move it (0: none yet;
        :mod:`.clocks`). As of this handle's last refresh."""
        return self._state.dedup.clock_ms

    def one_off_start_ms(self, own_ms: int) -> int:
        """A start for a one-off writer (a batch write) whose host reads ``own_ms``: that,
        or the WAL's clock if it is later. A host behind the WAL then writes a start the
        WAL can judge, and every retry of the commit carries the same one."""
        return max(own_ms, self._state.dedup.clock_ms)

    def first_step_committed_at(self, timestamp_ms: int) -> int:
        """The first indexed step committed at or after ``timestamp_ms``; the next step if none.

        A commit time is the committing process's clock when it appended its record, so
        times are not ordered by step (writers race between clock and append, machines'
        clocks differ). Their running maximum is ordered, and first reaches ``t`` at the
        first step committed at or after ``t``: that is what is searched, chunk by chunk
        (a snapshot keeps each chunk's newest time, so one chunk is read). Steps no
        longer indexed (below :meth:`first_indexed_step`) have no known time.
        """
        return self._ledger.healing(lambda s: s.first_step_committed_at(timestamp_ms))

    def region_entries(self) -> tuple[RegionEntries, ...]:
        """Every region's entries by who refers to them (:class:`RegionEntries`): the
        watermarks are read from the regions now, the runs are the indexed steps' as of
        the last refresh (steps below :meth:`first_indexed_step` are not counted), taken
        from the step index's chunk counts where a watermark does not cut a chunk's runs."""
        watermarks, freed = {}, {}
        for region_id in self._ledger.store.list_regions():
            region = self._ledger.store.open_region(region_id, create=False)
            watermarks[region_id] = region.low_watermark(), region.high_watermark()
            freed[region_id] = sum(end - start for start, end in region.freed_ranges())
        counts = self._ledger.healing(lambda s: s.index.region_spans(watermarks, s.expired_before))
        return tuple(RegionEntries(region_id, low, high, *counts[region_id], freed[region_id])
                     for region_id, (low, high) in watermarks.items())

    def table_sizes(self, from_step: int) -> Mapping[tuple[int, int], TableSize]:
        """Per (region, table), the rows and bytes the indexed steps from ``from_step``
        on hold there, and the sequence of their first entry. Counted from the step
        index's numbers: a namespace of a million steps reads one chunk at most."""
        sizes = self._ledger.healing(lambda s: s.index.table_sizes(from_step))
        return MappingProxyType({key: TableSize(*found) for key, found in sizes.items()})

    def newest_committed_writer_step(self, writer_id: str) -> int | None:
        """The highest writer step ``writer_id`` committed as a step, or None."""
        w = self._state.dedup.writers.get(writer_id)
        return None if w is None else max(w.pairs, default=None)
