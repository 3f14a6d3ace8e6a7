"""Reading committed steps: the read path of :class:`~pyspark_durable.wal.namespace.Namespace`.

Every entry a reader gets is checked against the step that committed it (rule 1-4 of
the protocol in :mod:`pyspark_durable.wal.namespace`): it must lie in one of the
step's runs, belong to one of its attempts, carry the namespace, region and table the
run names, and each run must read back exactly its number of entries. Whatever reads
(a Spark task, the Python API, the CLI, a split task reading a window of a step) goes
through :meth:`StepReads._step_batch`, so the checks are written once.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

import pyarrow as pa

from pyspark_durable.codec import codec_for, decode_key, decode_value
from pyspark_durable.codec.payload import PayloadCodec
from pyspark_durable.errors import (
    ContentMismatch,
    CorruptEntryError,
    OffsetOutOfRange,
    StepExpired,
    StepLost,
    StepNotCommitted,
)
from pyspark_durable.log import Entry, Log
from pyspark_durable.log.base import Damaged, read_around_damage
from pyspark_durable.wal.arguments import check_step_arg
from pyspark_durable.wal.format.records import StepCommit
from pyspark_durable.wal.format.runs import DIGEST_HEX, Run, entry_digest
from pyspark_durable.wal.format.schemas import conform
from pyspark_durable.wal.format.table_records import TableInfo
from pyspark_durable.wal.ledger import Ledger
from pyspark_durable.wal.queries import handed_out
from pyspark_durable.wal.replay.state import NamespaceState

# foreign entries (other attempts, other tables) one region read may pass over to serve
# two runs with one read: cheaper than a second bounds check and fetch set-up
READ_GAP_ENTRIES = 32


@dataclass(frozen=True, slots=True)
class StepBatch:
    """Rows of one entry of a step (in the table's newest schema), with where they came from."""

    step: int
    region_id: int
    table_id: int
    sequence_num: int
    offset: int
    commit_timestamp_ms: int
    batches: list[pa.RecordBatch]
    event_time: tuple[int, int] | None = None  # the step's (min, max), µs


@dataclass(slots=True)
class _RunRead:
    """One run of a committed step to read, with what checking its entries needs."""

    commit: StepCommit
    run: Run
    seq0: int  # sequence number of the run's first entry
    attempts: set[bytes]
    codec: PayloadCodec | None = field(default=None)


def foreign_attempt(commit: StepCommit, entry: Entry) -> str | None:
    """Why ``entry`` cannot be one of ``commit``'s (None: its attempt is one the step
    names). One check for reads and for ``durablewal check``."""
    raw = entry.header("a")
    attempt = None if raw is None else raw.decode(errors="replace")
    if attempt in commit.attempts:
        return None
    return (f"entry belongs to attempt {attempt!r}, which step {commit.step} does not name "
            f"({', '.join(commit.attempts)})")


def foreign_table(tables: Mapping[int, TableInfo], commit: StepCommit, run: Run,
                  table_id: int) -> str | None:
    """Why an entry holding ``table_id`` cannot be in ``run`` (None: it can)."""
    if table_id == run.table_id:
        return None
    return (f"entry holds table {table_name(tables, table_id)}, step {commit.step} says "
            f"{table_name(tables, run.table_id)}")


def table_name(tables: Mapping[int, TableInfo], table_id: int) -> str:
    info = tables.get(table_id)
    return f"{info.name} (id {table_id})" if info is not None else f"id {table_id}"


class StepReads:
    """The read path of a namespace, from its ledger: which steps there are, a step's
    commit record, a step's rows (``Namespace`` hands these on)."""

    def __init__(self, ledger: Ledger, namespace_id: int) -> None:
        self._ledger = ledger
        self.name = ledger.name
        self._namespace_id = namespace_id

    def steps(self, refresh: bool = True) -> range:
        """Committed steps still readable: [first retained, next step).

        ``refresh=False``: as of this handle's last refresh, for a caller that just
        refreshed (on Kafka a refresh costs broker round trips).
        """
        s = self._ledger.refreshed() if refresh else self._ledger.state
        return range(s.expired_before, s.next_step)

    def step_commit(self, step: int) -> StepCommit:
        """A copy of a step's commit record (a committed step never changes: no refresh
        needed unless the step is outside what this handle knows)."""
        check_step_arg("step", step, self.name)
        state = self._ledger.state
        if step >= state.next_step or step < state.expired_before:
            self._ledger.refreshed()

        def ask(s: NamespaceState) -> StepCommit:
            if step < s.expired_before:
                raise StepExpired(
                    f"step {step} was expired; available steps are "
                    f"[{s.expired_before}, {s.next_step})", namespace=self.name, step=step)
            if step >= s.next_step:
                raise StepNotCommitted(
                    f"step {step} is not committed yet; committed steps are "
                    f"[{s.expired_before}, {s.next_step})", namespace=self.name, step=step)
            return handed_out(s.step(step))

        return self._ledger.healing(ask)  # a healed state may have expired it meanwhile

    def read_step(
        self, step: int, tables: set[int] | None = None, regions: set[int] | None = None
    ) -> Iterator[StepBatch]:
        """Yield the rows of one committed step, region by region, in offset order."""
        return self._read_runs(self._selected_runs([self.step_commit(step)], tables, regions))

    def read_region_steps(
        self, region_id: int, steps: Iterable[int], tables: set[int] | None = None,
        windows: Sequence[tuple[int, int] | None] | None = None,
    ) -> Iterator[StepBatch]:
        """Yield the rows of ``steps`` in one region, step by step: what one Spark task reads.

        The same rows as ``read_step`` per step, but runs that lie close together in the
        region log are read with one ``read``: its bounds check and fetch set-up are paid
        once per group, not once per step (on Kafka each is a broker round trip).

        ``windows`` (one per step, None for the whole step) reads only the step's entries
        at region offsets ``[start, end)``: tasks that split a large step read disjoint
        windows of it, and each entry keeps its sequence number and is checked against
        its step as in a whole read (a run is consecutive offsets, so a window of it is
        a run of ``end - start`` entries).
        """
        commits = [self.step_commit(step) for step in steps]
        return self._read_runs(self._selected_runs(commits, tables, {region_id}, windows))

    def _selected_runs(self, commits: list[StepCommit], tables: set[int] | None,
                       regions: set[int] | None,
                       windows: Sequence[tuple[int, int] | None] | None = None
                       ) -> list[_RunRead]:
        """The runs to read, in yield order, each with its first sequence number."""
        out = []
        for i, commit in enumerate(commits):
            attempts = {a.encode() for a in commit.attempts}
            next_seq = dict(commit.first_sequences)
            window = None if windows is None else windows[i]
            for run in commit.runs:
                seq0 = next_seq[run.key]
                next_seq[run.key] = seq0 + run.entries
                if (tables is None or run.table_id in tables) and (
                        regions is None or run.region_id in regions):
                    if window is not None:
                        start, end = max(run.start, window[0]), min(run.end, window[1])
                        if start >= end:
                            continue
                        seq0 += start - run.start
                        cut = slice((start - run.start) * DIGEST_HEX, (end - run.start) * DIGEST_HEX)
                        run = replace(run, start=start, end=end,  # rows: still the run's
                                      digests=run.digests[cut])
                    out.append(_RunRead(commit, run, seq0, attempts))
        return out

    def _read_runs(self, runs: list[_RunRead]) -> Iterator[StepBatch]:
        """Read runs group by group; a group is consecutive runs of one region in rising
        offset order with at most ``READ_GAP_ENTRIES`` foreign entries between two."""
        group: list[_RunRead] = []
        for item in runs:
            if item.commit.step in self._ledger.state.lost:  # in order: the steps before it read
                if group:
                    yield from self._read_group(group)
                raise StepLost(f"step {item.commit.step} is lost, as recorded by durablewal "
                               f"repair: {self._ledger.state.lost[item.commit.step]}",
                               namespace=self.name, step=item.commit.step)
            if group and (item.run.region_id != group[-1].run.region_id
                          or not 0 <= item.run.start - group[-1].run.end <= READ_GAP_ENTRIES):
                yield from self._read_group(group)
                group = []
            group.append(item)
        if group:
            yield from self._read_group(group)

    def _read_group(self, group: list[_RunRead]) -> Iterator[StepBatch]:
        region_id = group[0].run.region_id
        region = self._ledger.store.open_region(region_id, create=False)
        try:
            # committed runs were acknowledged: read to their end, whatever this
            # handle's view of the region's end (Kafka: another process appended)
            entries = self._entries_around_damage(region, group)
            first = next(entries, None)
        except OffsetOutOfRange:
            for item in group:  # expired meanwhile: raises StepExpired
                self.step_commit(item.commit.step)
            raise
        if first is not None:
            entries = itertools.chain([first], entries)
        it = iter(group)
        item: _RunRead | None = next(it)
        count, last = 0, -1
        for entry in entries:
            if entry.offset <= last:
                raise CorruptEntryError(
                    f"the log returned offset {entry.offset} after {last}",
                    namespace=self.name, region=region_id, offset=entry.offset)
            last = entry.offset
            while item is not None and entry.offset >= item.run.end:
                self._check_count(item, count)
                item, count = next(it, None), 0
            if item is None:
                raise CorruptEntryError(
                    f"the log returned offset {entry.offset}, past the read's end "
                    f"{group[-1].run.end}", namespace=self.name, region=region_id,
                    offset=entry.offset)
            if entry.offset < item.run.start:
                continue  # between two runs: another attempt's or another table's entry
            count += 1
            yield self._step_batch(item, entry, count - 1)
        if item is not None:
            self._check_count(item, count)
        for rest in it:  # runs the read never reached: entries are missing
            self._check_count(rest, 0)

    def _entries_around_damage(self, region: Log, group: list[_RunRead]) -> Iterator[Entry]:
        """The group's entries; a damaged entry between its runs (another attempt's, no
        step of this read refers to it) is read around, and one inside a run is a
        :class:`CorruptEntryError` naming the step that lost it."""
        start, end = group[0].run.start, group[-1].run.end
        return self._around(read_around_damage(region.read_acknowledged, start, end), group)

    def _around(self, items: Iterator[Entry | Damaged], group: list[_RunRead]) -> Iterator[Entry]:
        """``items``' entries; a damaged one is skipped unless a run of ``group`` holds it."""
        for item in items:
            if not isinstance(item, Damaged):
                yield item
                continue
            at, exc = item.offset, item.error
            owner = next((i for i in group if i.run.start <= at < i.run.end), None)
            if owner is not None:
                raise CorruptEntryError(
                    f"step {owner.commit.step} cannot be read: its entry at offset {at} "
                    f"is damaged ({exc.reason})", namespace=self.name,
                    region=owner.run.region_id, offset=at,
                    step=owner.commit.step) from exc

    def _check_count(self, item: _RunRead, count: int) -> None:
        run = item.run
        if count != run.entries:
            raise CorruptEntryError(
                f"run [{run.start}, {run.end}) of step {item.commit.step} read back {count} "
                "entries", namespace=self.name, region=run.region_id)

    def _step_batch(self, item: _RunRead, entry: Entry, index: int) -> StepBatch:
        """Check one entry against the step that committed it; decode its rows."""
        commit, run = item.commit, item.run
        info = self._ledger.state.tables[run.table_id]
        if run.schema_version >= len(info.schemas):
            raise CorruptEntryError(
                f"step {commit.step} names schema version {run.schema_version} of table "
                f"{info.name}, which has {len(info.schemas)}", namespace=self.name,
                region=run.region_id)
        problem = foreign_attempt(commit, entry)
        key = decode_key(entry.key, expect_namespace_id=self._namespace_id,
                         expect_region_id=run.region_id, offset=entry.offset)
        problem = problem or foreign_table(self._ledger.state.tables, commit, run, key.table_id)
        if problem:
            raise CorruptEntryError(problem, namespace=self.name, region=run.region_id,
                                    offset=entry.offset, step=commit.step)
        if run.digests:  # the bytes are those the step committed, whatever their CRC says
            at = (entry.offset - run.start) * DIGEST_HEX
            if entry_digest(entry.key, entry.value) != run.digests[at:at + DIGEST_HEX]:
                raise ContentMismatch(
                    f"entry at offset {entry.offset} of region {run.region_id} is not the "
                    f"entry step {commit.step} committed (its content digest differs): the "
                    "log was rewritten, restored from another copy, or is another WAL's",
                    namespace=self.name, region=run.region_id, offset=entry.offset,
                    step=commit.step)
        payload = decode_value(entry.value, region_id=run.region_id, offset=entry.offset)
        if item.codec is None:
            item.codec = codec_for(info.payload_format, info.schemas[run.schema_version])
        batches = item.codec.decode(payload)
        if run.schema_version != info.version:  # older rows read as the newest schema
            batches = [conform(b, info.schema) for b in batches]
        return StepBatch(commit.step, run.region_id, run.table_id, item.seq0 + index,
                         entry.offset, commit.timestamp_ms, batches, commit.event_time)

    def read_step_table(self, step: int, tables: set[int] | None = None,
                        regions: set[int] | None = None) -> pa.Table | None:
        """Convenience: a step's rows of one schema as one Arrow table (None if empty)."""
        batches = [b for sb in self.read_step(step, tables, regions) for b in sb.batches]
        return pa.Table.from_batches(batches) if batches else None

