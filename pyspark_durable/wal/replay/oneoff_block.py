"""The one-off writers a snapshot remembers, as columns read row by row on demand.

A namespace of batch writes remembers thousands of one-off writers (up to
``DEDUP_ONE_OFFS``), each with one committed pair. Decoding them into a Python object
each would make every open cost what the window holds, so a snapshot stores them as one
Arrow table and a process looks a writer up by binary search over it:

- rows in forgetting order, ``(start, writer id)`` (ids compared as UTF-8 bytes, which
  is the order of Python strings, so the heap of :mod:`.dedup` pops them in the same
  order a full replay does);
- ``by_id``: the rows in writer-id order, for lookups.

Replay never changes a row: a writer it touches again moves into the dict of
:class:`~.dedup.Dedup` (the row is then *dead*), and forgetting the oldest writer
drops rows from the front. A snapshot writes the live rows and the dict's one-offs
as a new table.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from pyspark_durable.codec.arrays import int_array
from pyspark_durable.wal.format.columns import Int64Column, StringColumn

ONE_OFF_COLUMNS = pa.schema([("start", pa.int64()), ("writer", pa.string()),
                             ("writer_step", pa.int64()), ("step", pa.int64())])
ONE_OFF_SCHEMA = ONE_OFF_COLUMNS.append(pa.field("by_id", pa.int32()))

Row = tuple[int, str, int, int]  # (start, writer id, writer step, step)


class OneOffBlock:
    """One-off writers with one committed pair each, as a snapshot stored them."""

    def __init__(self, table: pa.Table) -> None:
        self.table = table
        self._start = Int64Column(table["start"])
        self._writer = StringColumn(table["writer"])
        self._writer_step = Int64Column(table["writer_step"])
        self._step = Int64Column(table["step"])
        self._by_id = Int64Column(table["by_id"])
        self._n = table.num_rows
        if len(self._by_id) != self._n:
            raise ValueError(f"one-off block: {len(self._by_id)} ids for {self._n} writers")
        self.lo = 0  # rows below are forgotten or moved to the dict
        self._dead: set[int] = set()  # rows at or past lo moved to the dict
        self.live = self._n

    @classmethod
    def of(cls, rows: pa.Table) -> OneOffBlock:
        """The block of ``rows`` (columns :data:`ONE_OFF_COLUMNS`, any order)."""
        rows = rows.cast(ONE_OFF_COLUMNS)
        order = pc.sort_indices(rows, sort_keys=[("start", "ascending"),
                                                 ("writer", "ascending")])
        rows = rows.take(order)
        by_id = pc.sort_indices(rows["writer"]).cast(pa.int32())
        return cls(rows.append_column("by_id", by_id).combine_chunks())

    # -- rows ----------------------------------------------------------------------

    def find(self, writer_id: str) -> int | None:
        """The live row of ``writer_id``, or None (binary search over ``by_id``)."""
        key = writer_id.encode()
        lo, hi = 0, self._n
        while lo < hi:
            mid = (lo + hi) // 2
            if self._writer.raw(self._by_id[mid]) < key:
                lo = mid + 1
            else:
                hi = mid
        if lo == self._n:
            return None
        row = self._by_id[lo]
        if row < self.lo or row in self._dead or self._writer.raw(row) != key:
            return None
        return row

    def row(self, i: int) -> Row:
        return self._start[i], self._writer[i], self._writer_step[i], self._step[i]

    def head(self) -> tuple[int, str] | None:
        """(start, writer id) of the live row forgotten first, or None."""
        return (self._start[self.lo], self._writer[self.lo]) if self.live else None

    def drop(self, i: int) -> None:
        """Row ``i`` is forgotten or moved to the dict."""
        self._dead.add(i)
        self.live -= 1
        while self.lo < self._n and self.lo in self._dead:
            self._dead.discard(self.lo)
            self.lo += 1

    def live_rows(self) -> Iterator[int]:
        return (i for i in range(self.lo, self._n) if i not in self._dead)

    def remaining(self) -> pa.Table:
        """The live rows (columns :data:`ONE_OFF_COLUMNS`), sliced without a row loop
        when none in the middle moved to the dict."""
        rows = self.table.select(ONE_OFF_COLUMNS.names)
        if not self._dead:
            return rows.slice(self.lo)
        return rows.take(int_array(list(self.live_rows())))
