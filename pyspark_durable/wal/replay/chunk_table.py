"""The step index's chunks, and how a snapshot stores them: one Arrow table, a row read on demand.

A namespace of a million steps has about a thousand chunks. Decoding each into a
:class:`Chunk` at every open would make an open cost what history holds, yet an open
needs only the last chunk (where the tail starts) and a read needs the one chunk its
step lies in. So a snapshot stores the chunks as columns (integers, and the tuples of
a chunk flattened into a list of integers), and :class:`ChunkList` is the sequence of
chunks a handle holds: rows ``[lo, hi)`` of a snapshot's table, each made into a
``Chunk`` the first time it is asked for, then the chunks folded since.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

import pyarrow as pa

from pyspark_durable.codec.arrays import int_array, int_list_array, table_of
from pyspark_durable.wal.format.columns import Int64Column
from pyspark_durable.wal.format.records import StepCommit

Key = tuple[int, int]  # (region, table)


def keep_lowest(lows: dict[int, int], region_id: int, start: int) -> None:
    """Keep in ``lows`` the lowest start seen per region."""
    lows[region_id] = min(lows.get(region_id, start), start)


def _higher(highs: dict[int, int], region_id: int, end: int) -> None:
    """Keep in ``highs`` the highest end seen per region."""
    highs[region_id] = max(highs.get(region_id, end), end)


def _step_ends(commit: StepCommit) -> dict[Key, int]:
    """Per (region, table), the sequence after the step's last entry there."""
    ends = dict(commit.first_sequences)
    for run in commit.runs:
        ends[run.key] += run.entries
    return ends


@dataclass(slots=True)
class Chunk:
    """Steps ``[first_step, first_step + steps)``, whose records lie in commits offsets
    ``[start, end)``; ``refused`` lists the step records in that range replay refused.

    ``seqs`` holds per (region, table) the sequence of the chunk's first entry there and
    the one after its last, ``starts`` per region its lowest run start: tuples, since a
    namespace of a million steps holds two thousand chunks in every process."""

    first_step: int
    steps: int
    start: int
    end: int
    refused: tuple[int, ...] = ()
    seqs: tuple[tuple[int, int, int, int], ...] = ()  # (region, table, first, end)
    starts: tuple[tuple[int, int], ...] = ()  # (region, lowest run start)
    max_ts: int = 0  # the newest commit time of its steps
    # (region, table, rows, bytes, entries) and (region, highest run end): what `tables`
    # and `regions` count, so they read no chunk they hold whole; None in a chunk of a
    # snapshot written before they were kept (it is read instead)
    sizes: tuple[tuple[int, int, int, int, int], ...] | None = None
    ends: tuple[tuple[int, int], ...] | None = None

    @property
    def next_step(self) -> int:
        return self.first_step + self.steps

    @property
    def first_seq(self) -> dict[Key, int]:
        return {(r, t): f for r, t, f, _ in self.seqs}

    @property
    def end_seq(self) -> dict[Key, int]:
        return {(r, t): e for r, t, _, e in self.seqs}

    @classmethod
    def of(cls, commits: Sequence[StepCommit], refused: Sequence[int]) -> Chunk:
        """The chunk of consecutive replayed steps (``step``, ``commit_offset`` and
        ``first_sequences`` set); ``refused`` may hold offsets outside its range."""
        start, end = commits[0].commit_offset, commits[-1].commit_offset + 1
        first: dict[Key, int] = {}
        ends: dict[Key, int] = {}
        lows: dict[int, int] = {}
        highs: dict[int, int] = {}
        sizes: dict[Key, list[int]] = {}
        max_ts = 0
        for commit in commits:
            for key, seq in commit.first_sequences.items():
                first.setdefault(key, seq)
            ends.update(_step_ends(commit))
            for run in commit.runs:
                keep_lowest(lows, run.region_id, run.start)
                _higher(highs, run.region_id, run.end)
                add_counts(sizes, run.key, run.rows, run.size_bytes, run.entries)
            max_ts = max(max_ts, commit.timestamp_ms)
        return cls(commits[0].step, len(commits), start, end,
                   tuple(o for o in refused if start <= o < end), _seqs(first, ends),
                   tuple(lows.items()), max_ts, _sizes(sizes), tuple(highs.items()))

    def merged(self, nxt: Chunk, refused: Sequence[int]) -> Chunk:
        """This chunk followed by ``nxt`` as one (``refused``: refused offsets between)."""
        gap = tuple(o for o in refused if self.end <= o < nxt.start)
        lows = dict(self.starts)
        for region, low in nxt.starts:
            keep_lowest(lows, region, low)
        sizes = ends = None
        if self.sizes is not None and nxt.sizes is not None and \
                self.ends is not None and nxt.ends is not None:
            totals: dict[Key, list[int]] = {}
            for r, t, *counts in self.sizes + nxt.sizes:
                add_counts(totals, (r, t), *counts)
            highs = dict(self.ends)
            for region, high in nxt.ends:
                _higher(highs, region, high)
            sizes, ends = _sizes(totals), tuple(highs.items())
        return Chunk(self.first_step, self.steps + nxt.steps, self.start, nxt.end,
                     self.refused + gap + nxt.refused,
                     _seqs({**nxt.first_seq, **self.first_seq}, {**self.end_seq, **nxt.end_seq}),
                     tuple(lows.items()), max(self.max_ts, nxt.max_ts), sizes, ends)

    def needed(self, expired_before: int, marks: dict[Key, int]) -> bool:
        """Does any of its steps stay needed (``NamespaceState.needed``, per chunk)?"""
        if self.next_step > expired_before:
            return True
        return any((r, t) in marks and e > marks[(r, t)] for r, t, _, e in self.seqs)

    def to_json(self) -> list[Any]:
        doc = [self.first_step, self.steps, self.start, self.end, list(self.refused),
               [list(q) for q in self.seqs], [list(q) for q in self.starts], self.max_ts]
        if self.sizes is not None and self.ends is not None:
            doc += [[list(q) for q in self.sizes], [list(q) for q in self.ends]]
        return doc

    @classmethod
    def from_json(cls, d: list[Any]) -> Chunk:
        first_step, steps, start, end, refused, seqs, starts, max_ts, *counted = d
        sizes = ends = None
        if counted:  # absent in chunks written before they were kept
            raw_sizes, raw_ends = counted
            sizes = tuple((r, t, n, b, e) for r, t, n, b, e in raw_sizes)
            ends = tuple((r, h) for r, h in raw_ends)
        return cls(first_step, steps, start, end, tuple(refused),
                   tuple((r, t, f, e) for r, t, f, e in seqs),
                   tuple((r, s) for r, s in starts), max_ts, sizes, ends)


def _seqs(first: dict[Key, int], ends: dict[Key, int]) -> tuple[tuple[int, int, int, int], ...]:
    return tuple((r, t, f, ends[(r, t)]) for (r, t), f in first.items())


def add_counts(totals: dict[Key, list[int]], key: Key, *counts: int) -> None:
    """Add ``counts`` (rows, bytes, entries) to ``totals[key]``."""
    row = totals.setdefault(key, [0] * len(counts))
    for i, n in enumerate(counts):
        row[i] += n


def _sizes(totals: dict[Key, list[int]]) -> tuple[tuple[int, int, int, int, int], ...]:
    return tuple((r, t, n, b, e) for (r, t), (n, b, e) in totals.items())


INTS = pa.list_(pa.uint64())  # every number in them is >= 0; table ids use all 64 bits
CHUNK_SCHEMA = pa.schema([
    ("first_step", pa.int64()), ("steps", pa.int64()), ("start", pa.int64()),
    ("end", pa.int64()), ("max_ts", pa.int64()),
    ("refused", INTS),  # offsets
    ("seqs", INTS),  # (region, table, first, end) flattened
    ("starts", INTS),  # (region, lowest run start) flattened
    ("sizes", INTS),  # (region, table, rows, bytes, entries) flattened; null: not kept
    ("ends", INTS),  # (region, highest run end) flattened; null: not kept
])
_WIDTHS = {"seqs": 4, "starts": 2, "sizes": 5, "ends": 2}


def chunks_table(chunks: Iterable[Chunk]) -> pa.Table:
    """The chunks as rows of :data:`CHUNK_SCHEMA`."""
    cols: dict[str, list[Any]] = {name: [] for name in CHUNK_SCHEMA.names}
    for c in chunks:
        for name, value in (("first_step", c.first_step), ("steps", c.steps),
                            ("start", c.start), ("end", c.end), ("max_ts", c.max_ts),
                            ("refused", list(c.refused))):
            cols[name].append(value)
        for name in _WIDTHS:
            tuples = getattr(c, name)
            cols[name].append(None if tuples is None else [n for t in tuples for n in t])
    return table_of({name: int_array(cols[name]) if CHUNK_SCHEMA.field(name).type == pa.int64()
                     else int_list_array(cols[name]) for name in cols}, CHUNK_SCHEMA)


def _group(flat: list[int] | None, width: int, name: str) -> tuple[tuple[int, ...], ...] | None:
    if flat is None:
        return None
    if len(flat) % width:
        raise ValueError(f"chunk column {name!r} holds {len(flat)} numbers, not a multiple "
                         f"of {width}")
    return tuple(tuple(flat[i:i + width]) for i in range(0, len(flat), width))


class ChunkList(Sequence[Chunk]):
    """Chunks in step order: rows ``[lo, hi)`` of a snapshot's table, then ``extra``."""

    def __init__(self, table: pa.Table | None = None, extra: Iterable[Chunk] = ()) -> None:
        self._table = table if table is not None else chunks_table(())
        self._first = Int64Column(self._table["first_step"])
        self._steps = Int64Column(self._table["steps"])
        self._lo, self._hi = 0, self._table.num_rows
        self._made: dict[int, Chunk] = {}  # rows made into chunks so far
        self._extra: list[Chunk] = list(extra)

    def _rows(self) -> int:
        return self._hi - self._lo

    def __len__(self) -> int:
        return self._rows() + len(self._extra)

    @overload
    def __getitem__(self, i: int) -> Chunk: ...
    @overload
    def __getitem__(self, i: slice) -> list[Chunk]: ...

    def __getitem__(self, i: int | slice) -> Chunk | list[Chunk]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        if i >= self._rows():
            return self._extra[i - self._rows()]
        return self._row(self._lo + i)

    def __iter__(self) -> Iterator[Chunk]:
        return (self[i] for i in range(len(self)))

    def _row(self, r: int) -> Chunk:
        made = self._made.get(r)
        if made is None:
            d = self._table.slice(r, 1).to_pylist()[0]
            made = Chunk(d["first_step"], d["steps"], d["start"], d["end"],
                         tuple(d["refused"]), *(_group(d[n], _WIDTHS[n], n) for n in
                                                ("seqs", "starts")),  # type: ignore[arg-type]
                         d["max_ts"], _group(d["sizes"], 5, "sizes"),  # type: ignore[arg-type]
                         _group(d["ends"], 2, "ends"))  # type: ignore[arg-type]
            self._made[r] = made
        return made

    def first_step(self, i: int) -> int:
        """The first step of chunk ``i`` (no chunk made for a row)."""
        return self._first[self._lo + i] if i < self._rows() else \
            self._extra[i - self._rows()].first_step

    def next_step(self, i: int) -> int:
        if i < self._rows():
            return self._first[self._lo + i] + self._steps[self._lo + i]
        return self._extra[i - self._rows()].next_step

    def position(self, step: int) -> int:
        """The index of the last chunk whose first step is at or below ``step`` (-1: none)."""
        return bisect.bisect_right(range(len(self)), step, key=self.first_step) - 1

    def from_next_step(self, block: int) -> ChunkList:
        """A copy without the leading chunks that end at or before step ``block``."""
        lo = bisect.bisect_right(range(len(self)), block, key=self.next_step)
        rows = self._rows()
        return self._copy(self._lo + min(lo, rows), self._extra[max(0, lo - rows):])

    def _copy(self, lo: int, extra: list[Chunk]) -> ChunkList:
        """This list over rows ``[lo, hi)`` of the same table, then ``extra``."""
        out = ChunkList.__new__(ChunkList)
        out.__dict__.update(self.__dict__)
        out.__dict__.update(_lo=lo, _extra=extra)
        return out

    def append(self, chunk: Chunk) -> None:
        self._extra.append(chunk)

    def set_last(self, chunk: Chunk) -> None:
        """Replace the last chunk (a fold merged steps into it)."""
        if self._extra:
            self._extra[-1] = chunk
        else:
            self._hi -= 1
            self._extra.append(chunk)

    def table(self) -> pa.Table:
        """The chunks as one table of :data:`CHUNK_SCHEMA` (the rows held, sliced, and
        the chunks made since as new rows)."""
        held = self._table.slice(self._lo, self._rows())
        if not self._extra:
            return held
        return pa.concat_tables([held, chunks_table(self._extra)]).combine_chunks()

    def rebased(self, table: pa.Table) -> ChunkList:
        """The same chunks as rows of ``table`` (:meth:`table`'s, which a snapshot just
        wrote), so the chunks folded since are no longer re-encoded one by one."""
        if table.num_rows != len(self):
            raise ValueError(f"a table of {table.num_rows} chunks for {len(self)} chunks")
        return ChunkList(table)


def chunk_list(chunks: Sequence[Chunk] | ChunkList) -> ChunkList:
    return chunks if isinstance(chunks, ChunkList) else ChunkList(extra=chunks)
