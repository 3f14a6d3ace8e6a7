"""The step index's chunks as a snapshot stores them: one Arrow table, a row read on demand.

A namespace of a million steps has about a thousand chunks. Decoding each into a
:class:`~.step_index.Chunk` made every open cost what history holds, yet an open
needs only the last chunk (where the tail starts) and a read needs the one chunk its
step lies in. So a snapshot stores the chunks as columns (integers, and the tuples of
a chunk flattened into a list of integers), and :class:`ChunkList` is the sequence of
chunks a handle holds: rows ``[lo, hi)`` of a snapshot's table, each made into a
``Chunk`` the first time it is asked for, then the chunks folded since.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, overload

import pyarrow as pa

from pyspark_durable.wal.columns import Int64Column

if TYPE_CHECKING:
    from pyspark_durable.wal.step_index import Chunk

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
    return pa.Table.from_pydict(cols, schema=CHUNK_SCHEMA)


def _group(flat: list[int] | None, width: int, name: str) -> tuple[tuple[int, ...], ...] | None:
    if flat is None:
        return None
    if len(flat) % width:
        raise ValueError(f"chunk column {name!r} holds {len(flat)} numbers, not a multiple "
                         f"of {width}")
    return tuple(tuple(flat[i:i + width]) for i in range(0, len(flat), width))


class ChunkList(Sequence["Chunk"]):
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
        from pyspark_durable.wal.step_index import Chunk

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
        lo, hi = 0, len(self)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.first_step(mid) <= step:
                lo = mid + 1
            else:
                hi = mid
        return lo - 1

    def from_next_step(self, block: int) -> ChunkList:
        """A copy without the leading chunks that end at or before step ``block``."""
        lo, hi = 0, len(self)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.next_step(mid) <= block:
                lo = mid + 1
            else:
                hi = mid
        out = ChunkList.__new__(ChunkList)
        out._table, out._first, out._steps, out._made = \
            self._table, self._first, self._steps, self._made
        rows = self._rows()
        out._lo, out._hi = self._lo + min(lo, rows), self._hi
        out._extra = self._extra[max(0, lo - rows):]
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
