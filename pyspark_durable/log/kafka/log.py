"""The Kafka log: one log of a namespace as one single-partition topic.

Reads go through a :class:`~pyspark_durable.log.kafka.partition.Partition` of the
topic; the low watermark is the higher of the broker's first offset and the log's
logical low watermark in the :class:`~pyspark_durable.log.kafka.registry.Registry`,
which every process reads before a read. The package docstring
(:mod:`pyspark_durable.log.kafka`) holds the mapping and the design rules.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import Future

from pyspark_durable.log.base import Entry, Log, Record
from pyspark_durable.log.kafka.partition import Partition
from pyspark_durable.log.kafka.pool import ClientPool
from pyspark_durable.log.kafka.registry import Registry


class KafkaLog(Log):
    """One log = one single-partition topic; see the module docstring."""

    def __init__(self, pool: ClientPool, registry: Registry, name: str, topic: str) -> None:
        super().__init__(pool.namespace, name)
        self.registry = registry
        self.topic = topic
        self.partition = Partition(pool, topic, {"namespace": self.namespace, "log": name})

    def append(self, records: Sequence[Record]) -> list[int]:
        return self.partition.append(records)

    def append_async(self, records: Sequence[Record]) -> Future[list[int]]:
        """Send every record now; the future resolves when all are acknowledged (the
        producer batches records of many calls into shared requests)."""
        return self.partition.append_async(records)

    def _watermarks(self, probe: bool = True) -> tuple[int, int]:
        begin, high = self.partition.bounds(probe)
        logical = self.registry.logical_low(self.name)
        return min(max(begin, logical), high), high

    def low_watermark(self) -> int:
        return self._watermarks()[0]

    def high_watermark(self) -> int:
        return self._watermarks()[1]

    def read(self, start: int, end: int | None = None) -> Iterator[Entry]:
        # a range below a known high watermark needs no probe for the end (saves a fetch)
        known = end is not None and start <= end <= self.partition.known_high
        low, high = self._watermarks(probe=not known)
        self.check_range(start, low, high)
        stop = high if end is None else min(end, high)
        return self.partition.scan(start, stop)

    def read_acknowledged(self, start: int, end: int) -> Iterator[Entry]:
        """Entries of ``[start, end)``, acknowledged (acks=all) by this or another process:
        read to ``end`` whatever this handle's view of the high watermark says (see
        :mod:`~pyspark_durable.log.kafka.partition`); ``BackendUnavailable`` if the
        broker's end stays short."""
        known = start <= end <= self.partition.known_high
        low, high = self._watermarks(probe=not known)
        if start < low:
            self.check_range(start, low, high)  # deleted: OffsetOutOfRange at once
        if high < end:
            high = self.partition.await_end(end, high)
        self.check_range(start, low, high)
        return self.partition.scan(start, end)

    def read_following(self, start: int, end: int) -> Iterator[Entry]:
        """Entries of ``[start, end)`` below an acknowledged ``end``: fetched at once, with
        no ListOffsets for either bound (the partition's nor the registry's logical low).
        Every offset below an acknowledged one is below the high watermark, and a fetch
        below the broker's first offset fails as :class:`OffsetOutOfRange`."""
        return self.partition.scan(start, end)

    def delete_before(self, offset: int) -> None:
        low, high = self._watermarks()
        target = min(offset, high)
        if target <= low:
            return
        self.registry.delete_before(self.name, self.topic, target)

    def close(self) -> None:
        self.partition.close()
