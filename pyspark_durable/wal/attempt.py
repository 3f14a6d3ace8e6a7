"""A writer attempt: durable, invisible entries until its step commits.

See rule 1 of the protocol in :mod:`pyspark_durable.wal.namespace`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from pyspark_durable.codec import EntryKey, codec_for
from pyspark_durable.codec.keys import U64_MAX
from pyspark_durable.errors import RoutingError
from pyspark_durable.log import Log, LogStore, Record
from pyspark_durable.wal.format.receipts import AttemptReceipt, WrittenEntry, event_time_span
from pyspark_durable.wal.format.runs import entry_digest
from pyspark_durable.wal.format.schemas import conform
from pyspark_durable.wal.tables import TableCatalog

INFLIGHT_BYTES_MAX = 32 << 20  # per attempt: bounds a writer's memory, keeps the log busy
# entries handed to the log in one append: several appends stay in flight at once, and a
# large write never holds more than this of encoded entries that the log does not have yet
APPEND_GROUP_BYTES = 8 << 20


class WritesSteps(Protocol):
    """What an attempt needs of the namespace it writes into (a ``Namespace`` is one):
    so this module knows nothing of the namespace module, which makes attempts."""

    name: str
    store: LogStore
    namespace_id: int
    entry_max_bytes: int
    tables: TableCatalog  # where an attempt defines the tables it writes

    def commit(self, writer_id: str, writer_step: int, receipts: list[AttemptReceipt],
               consecutive: bool = ..., started_ms: int | None = ...) -> int: ...


@dataclass(slots=True)
class _InFlight:
    """Entries handed to a region log whose durability the attempt has not seen yet."""

    future: Future[list[int]]
    region_id: int
    table_id: int
    schema_version: int
    stats: list[tuple[int, int, str]]  # (rows, value bytes, content digest) per entry

    @property
    def size_bytes(self) -> int:
        return sum(size for _, size, _ in self.stats)


@dataclass(slots=True)
class _Group:
    """The encoded entries of one append to a region log: handed over at once, or held
    by the attempt for a while (see :class:`Attempt`)."""

    region: Log
    records: list[Record]
    region_id: int
    table_id: int
    schema_version: int
    stats: list[tuple[int, int, str]]


def _joined(parts: list[pa.Table | pa.RecordBatch]) -> pa.Table | pa.RecordBatch:
    """Chunks of one schema as one table, without copying their rows."""
    if len(parts) == 1:
        return parts[0]
    return pa.Table.from_batches([b for p in parts for b in (
        p.to_batches() if isinstance(p, pa.Table) else (p,))], schema=parts[0].schema)


def _detached(rows: pa.Table | pa.RecordBatch) -> pa.Table | pa.RecordBatch:
    """A copy of the rows left over after whole entries (less than one entry), so they
    do not keep the caller's whole, possibly huge, chunk alive until the next entry."""
    if rows.num_rows == 0:
        return rows
    try:
        return pa.RecordBatch.from_arrays(
            [pa.concat_arrays(c.chunks if isinstance(c, pa.ChunkedArray) else [c])
             for c in rows.columns], schema=rows.schema)
    except pa.ArrowException:  # a type Arrow cannot concatenate: keep the slice
        return rows


class Attempt:
    """One writer attempt: appends durable, invisible entries until its step commits.

    ``write`` hands entries to the region log without waiting for them to be durable
    (at most ``INFLIGHT_BYTES_MAX`` at a time), so encoding the next rows overlaps
    the log's writes and fsyncs; :meth:`receipt` waits until every entry is durable,
    and only a receipt can make entries visible, so nothing is acknowledged early.

    The last group of a ``write`` is held until the next write, which hands it over like
    the rest (the overlap is kept), or until the receipt: an attempt with nothing else in
    flight (a small commit, the usual case) then appends it on the caller's thread, which
    costs no thread switch (and on Kafka no ``linger_ms``); with appends in flight it is
    handed over behind them.
    """

    def __init__(self, ns: WritesSteps, writer_id: str, writer_step: int, attempt_id: str) -> None:
        self.ns = ns
        self.writer_id = writer_id
        self.writer_step = writer_step
        self.attempt_id = attempt_id
        self._entries: list[WrittenEntry] = []
        self._inflight: deque[_InFlight] = deque()
        self._inflight_bytes = 0
        self._held: _Group | None = None  # the last group of the last write, not handed over
        self._next_index = 0  # attempt-local entry index, the key's sequence field
        self._event_time: tuple[int, int] | None = None
        self._headers = (("a", attempt_id.encode()), ("w", writer_id.encode()),
                         ("s", str(writer_step).encode()))

    def write(self, table: int | str, data: pa.Table | pa.RecordBatch, region_id: int = 0,
              payload_format: str = "arrow", merge_schema: bool = False) -> int:
        """Append rows of one table to a region as entries (split under entry_max_bytes).

        Rows are written as the table's newest schema version (missing columns null,
        narrower types cast up); ``merge_schema`` lets new columns and widenings add a
        version first (see :meth:`TableCatalog.define`). A large ``data`` is encoded
        and handed to the log slice by slice, so what this adds to the caller's memory
        is bounded (``INFLIGHT_BYTES_MAX`` plus an append group), not ``data``'s size.
        """
        self._check_region(region_id, table)
        if data.num_rows == 0:
            return 0  # nothing to write; an empty batch defines no table either
        return self._write_rows(table, data, region_id, payload_format, merge_schema, whole=True)

    def write_batches(self, table: int | str, chunks: Iterable[pa.Table | pa.RecordBatch],
                      region_id: int = 0, payload_format: str = "arrow",
                      merge_schema: bool = False) -> int:
        """Append the rows of ``chunks`` (consumed lazily, one at a time) to one table.

        Small chunks are gathered into entries of about ``entry_max_bytes`` and large
        ones sliced into such entries, so a generator of any batch size writes the
        same entries as one table would, while memory holds at most one entry's rows
        of it beyond the chunk the caller hands over. Returns the rows written.
        """
        self._check_region(region_id, table)
        pending: list[pa.Table | pa.RecordBatch] = []  # rows of less than one entry, one schema
        pending_bytes = written = 0
        for chunk in chunks:
            if chunk.num_rows == 0:
                continue
            if pending and not chunk.schema.equals(pending[0].schema, check_metadata=True):
                written += self._write_rows(table, _joined(pending), region_id, payload_format,
                                            merge_schema, whole=True)
                pending, pending_bytes = [], 0
            pending.append(chunk)
            pending_bytes += chunk.nbytes
            if pending_bytes >= self.ns.entry_max_bytes:
                rows = _joined(pending)
                done = self._write_rows(table, rows, region_id, payload_format, merge_schema,
                                        whole=False)
                written += done
                rest = _detached(rows.slice(done))
                pending = [rest] if rest.num_rows else []
                pending_bytes = rest.nbytes if rest.num_rows else 0
                del chunk, rows, rest  # freed before the iterator makes the next chunk
        if pending:
            written += self._write_rows(table, _joined(pending), region_id, payload_format,
                                        merge_schema, whole=True)
        return written

    def _check_region(self, region_id: int, table: int | str) -> None:
        if not isinstance(region_id, int) or isinstance(region_id, bool) or not (
                0 <= region_id <= U64_MAX):
            raise RoutingError(f"region {region_id!r} is not a u64", namespace=self.ns.name,
                               table=table)

    def _write_rows(self, table: int | str, data: pa.Table | pa.RecordBatch, region_id: int,
                    payload_format: str, merge_schema: bool, whole: bool) -> int:
        """Encode and append entries of ``data``; without ``whole``, only full entries
        (the rows left over wait for the next chunk). Returns the rows appended."""
        self._release()
        info = self.ns.tables.define(table, data.schema, payload_format, merge_schema)
        codec = codec_for(info.payload_format, info.schema)
        most = self.ns.entry_max_bytes
        nbytes = data.nbytes  # a sum over the buffers each time it is asked
        chunk_rows = max(1, int(data.num_rows * most / max(nbytes, 1)))
        if not data.schema.equals(info.schema):  # added null columns, wider types: size one
            conformed = conform(data.slice(0, chunk_rows), info.schema).nbytes
            if conformed > most:
                chunk_rows = max(1, int(chunk_rows * most / conformed))
        end = data.num_rows if whole else data.num_rows - data.num_rows % chunk_rows
        region = self.ns.store.open_region(region_id)
        region.expect_append(min(nbytes, APPEND_GROUP_BYTES))
        records: list[Record] = []
        stats: list[tuple[int, int, str]] = []
        group_bytes = 0
        for start in range(0, end, chunk_rows):
            # conformed slice by slice: a cast copies one entry's rows, not all of them
            part = conform(data.slice(start, min(chunk_rows, end - start)), info.schema)
            key = EntryKey(self.ns.namespace_id, region_id, info.table_id,
                           self._next_index + len(records))
            value = codec.encode_value(part)
            raw_key = key.encode()
            records.append(Record(raw_key, value, self._headers))
            stats.append((part.num_rows, len(value), entry_digest(raw_key, value)))
            group_bytes += len(value)
            if group_bytes >= APPEND_GROUP_BYTES:
                self._append(region, region_id, info.table_id, info.version, records, stats)
                records, stats, group_bytes = [], [], 0
        if records:
            self._held = _Group(region, records, region_id, info.table_id, info.version, stats)
            self._next_index += len(records)
        return end

    def _append(self, region: Log, region_id: int, table_id: int, version: int,
                records: list[Record], stats: list[tuple[int, int, str]]) -> None:
        """Hand entries to the log; wait for the oldest appends while too much is in flight."""
        self._next_index += len(records)
        self._hand_over(_Group(region, records, region_id, table_id, version, stats))

    def _hand_over(self, group: _Group) -> None:
        flight = _InFlight(group.region.append_async(group.records), group.region_id,
                           group.table_id, group.schema_version, group.stats)
        self._inflight.append(flight)
        self._inflight_bytes += flight.size_bytes
        while self._inflight_bytes > INFLIGHT_BYTES_MAX and len(self._inflight) > 1:
            self._settle_oldest()

    def _release(self) -> None:
        """Hand the held group over before more entries are encoded: so what an attempt
        holds in memory is bounded as if it had been handed over at once."""
        held, self._held = self._held, None
        if held is not None:
            self._hand_over(held)

    def _settle_oldest(self) -> None:
        done = self._inflight.popleft()
        self._inflight_bytes -= done.size_bytes
        offsets = done.future.result()  # the log's typed error, if the append failed
        self._note_entries(done, offsets)

    def _note_entries(self, done: _InFlight | _Group, offsets: list[int]) -> None:
        for off, (rows, size, digest) in zip(offsets, done.stats, strict=True):
            self._entries.append(WrittenEntry(done.region_id, done.table_id, off, rows, size,
                                              done.schema_version, digest))

    def receipt(self) -> AttemptReceipt:
        """What this attempt wrote, once every entry of it is durable."""
        held, self._held = self._held, None
        if held is not None and not self._inflight:  # nothing to overlap: append here
            # (with appends in flight it is handed over behind them: a log orders what
            # is handed over, not a call beside it, and the step reads in that order)
            self._note_entries(held, held.region.append(held.records))
        elif held is not None:
            self._hand_over(held)
        while self._inflight:
            self._settle_oldest()
        return AttemptReceipt(self.attempt_id, self.writer_id, self.writer_step,
                              tuple(self._entries), self._event_time)

    def note_event_time(self, low_us: int, high_us: int) -> None:
        """Widen the event-time span (µs since the epoch) of the rows this attempt wrote:
        the step records the span of all its attempts (Spark's ``eventTimeColumn``)."""
        self._event_time = event_time_span([self._event_time, (low_us, high_us)])

    def commit(self, started_ms: int | None = None) -> int:
        """Commit this attempt alone as the step of (writer_id, writer_step)
        (``started_ms``: a one-off writer's start, see ``Namespace.commit``)."""
        return self.ns.commit(self.writer_id, self.writer_step, [self.receipt()],
                              started_ms=started_ms)
