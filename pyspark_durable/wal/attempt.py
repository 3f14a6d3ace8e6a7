"""A writer attempt: durable, invisible entries until its step commits.

See rule 1 of the protocol in :mod:`pyspark_durable.wal.namespace`.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from pyspark_durable.codec import EntryKey, codec_for
from pyspark_durable.codec.keys import U64_MAX
from pyspark_durable.errors import RoutingError
from pyspark_durable.log import Record
from pyspark_durable.wal.records import (
    AttemptReceipt,
    WrittenEntry,
    entry_digest,
    event_time_span,
)
from pyspark_durable.wal.schemas import conform

if TYPE_CHECKING:
    from pyspark_durable.wal.namespace import Namespace

INFLIGHT_BYTES_MAX = 32 << 20  # per attempt: bounds a writer's memory, keeps the log busy


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


class Attempt:
    """One writer attempt: appends durable, invisible entries until its step commits.

    ``write`` hands entries to the region log without waiting for them to be durable
    (at most ``INFLIGHT_BYTES_MAX`` at a time), so encoding the next rows overlaps
    the log's writes and fsyncs; :meth:`receipt` waits until every entry is durable,
    and only a receipt can make entries visible, so nothing is acknowledged early.
    """

    def __init__(self, ns: Namespace, writer_id: str, writer_step: int, attempt_id: str) -> None:
        self.ns = ns
        self.writer_id = writer_id
        self.writer_step = writer_step
        self.attempt_id = attempt_id
        self._entries: list[WrittenEntry] = []
        self._inflight: deque[_InFlight] = deque()
        self._inflight_bytes = 0
        self._next_index = 0  # attempt-local entry index, the key's sequence field
        self._event_time: tuple[int, int] | None = None
        self._headers = (("a", attempt_id.encode()), ("w", writer_id.encode()),
                         ("s", str(writer_step).encode()))

    def write(self, table: int | str, data: pa.Table | pa.RecordBatch, region_id: int = 0,
              payload_format: str = "arrow", merge_schema: bool = False) -> int:
        """Append rows of one table to a region as entries (split under entry_max_bytes).

        Rows are written as the table's newest schema version (missing columns null,
        narrower types cast up); ``merge_schema`` lets new columns and widenings add a
        version first (see :meth:`Namespace.define_table`).
        """
        if not isinstance(region_id, int) or isinstance(region_id, bool) or not (
                0 <= region_id <= U64_MAX):
            raise RoutingError(f"region {region_id!r} is not a u64", namespace=self.ns.name,
                               table=table)
        if data.num_rows == 0:
            return 0  # nothing to write; an empty batch defines no table either
        info = self.ns.define_table(table, data.schema, payload_format, merge_schema)
        version = info.version
        data = conform(data, info.schema)
        codec = codec_for(info.payload_format, info.schema)
        chunk_rows = max(1, int(data.num_rows * self.ns.entry_max_bytes / max(data.nbytes, 1)))
        records, stats = [], []
        for start in range(0, data.num_rows, chunk_rows):
            part = data.slice(start, chunk_rows)
            key = EntryKey(self.ns.namespace_id, region_id, info.table_id,
                           self._next_index + len(records))
            value = codec.encode_value(part)
            raw_key = key.encode()
            records.append(Record(raw_key, value, self._headers))
            stats.append((part.num_rows, len(value), entry_digest(raw_key, value)))
        future = self.ns.store.open_region(region_id).append_async(records)
        self._next_index += len(records)
        self._inflight.append(_InFlight(future, region_id, info.table_id, version, stats))
        self._inflight_bytes += self._inflight[-1].size_bytes
        while self._inflight_bytes > INFLIGHT_BYTES_MAX and len(self._inflight) > 1:
            self._settle_oldest()
        return data.num_rows

    def _settle_oldest(self) -> None:
        done = self._inflight.popleft()
        self._inflight_bytes -= done.size_bytes
        offsets = done.future.result()  # the log's typed error, if the append failed
        for off, (rows, size, digest) in zip(offsets, done.stats, strict=True):
            self._entries.append(WrittenEntry(done.region_id, done.table_id, off, rows, size,
                                              done.schema_version, digest))

    def receipt(self) -> AttemptReceipt:
        """What this attempt wrote, once every entry of it is durable."""
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
