"""The Python Data Source floor: what any Python source or sink costs in Spark.

``pyfloor`` is a Python data source that does no I/O at all: its stream reader yields
the same prebuilt ``pyarrow.RecordBatch`` (the durablewal read schema, 10,000 rows
of ~100 bytes plus the eight metadata columns) from memory over two partitions, its
batch reader (``spark.read``) yields the same batches from as many partitions as the
driver has cores (``partitions`` overrides both), and its stream writer
(``DataSourceStreamArrowWriter``) counts the Arrow batches Spark hands it and keeps
nothing. Measured side by side with ``rate`` → ``noop`` it shows how much of the JVM
floor PySpark's Python data source path (Arrow IPC over a socket to a Python worker,
and back) leaves to any Python source or sink; durablewal against it shows the share
of that ceiling the WAL reaches. With ``columns=payload`` it yields the payload
columns only (``id``, ``payload``): the floor of a source that hands Spark the rows
and nothing about where they came from, against which a default durablewal read
(metadata columns included) shows what its metadata columns cost. Workers import
this module, so ``bench/`` must be on their ``PYTHONPATH`` (``bench/run.py`` sets it
before starting Spark).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

BATCH_ROWS = 10_000
PAYLOAD_BYTES = 92
SCHEMA = pa.schema([
    ("id", pa.int64()), ("payload", pa.binary()), ("_region", pa.int64()),
    ("_table", pa.string()), ("_sequence", pa.int64()), ("_step", pa.int64()),
    ("_commit_timestamp", pa.timestamp("us", tz="UTC")), ("_row", pa.int64()),
    ("_event_time_min", pa.timestamp("us", tz="UTC")),
    ("_event_time_max", pa.timestamp("us", tz="UTC")),
])
PAYLOAD_DDL = "id long, payload binary"
DDL = ("id long, payload binary, _region long, _table string, _sequence long, _step long, "
       "_commit_timestamp timestamp, _row long, _event_time_min timestamp, "
       "_event_time_max timestamp")


def floor_batch(region: int, payload_only: bool = False) -> pa.RecordBatch:
    """One batch shaped like a durablewal read of the benchmark's rows (``payload_only``:
    like one with a user schema of the payload columns)."""
    n = BATCH_ROWS
    raw = np.random.default_rng(region).integers(97, 123, n * PAYLOAD_BYTES, np.uint8)
    offsets = np.arange(0, (n + 1) * PAYLOAD_BYTES, PAYLOAD_BYTES, dtype=np.int32)
    payload = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets),
                                                     pa.py_buffer(raw.tobytes())])
    if payload_only:
        return pa.RecordBatch.from_arrays([pa.array(np.arange(n, dtype=np.int64)), payload],
                                          names=["id", "payload"])
    return pa.RecordBatch.from_arrays([
        pa.array(np.arange(n, dtype=np.int64)), payload,
        pa.repeat(pa.scalar(region, pa.int64()), n),
        pa.repeat(pa.scalar(f"t{region}", pa.string()), n),
        pa.repeat(pa.scalar(7, pa.int64()), n), pa.repeat(pa.scalar(3, pa.int64()), n),
        pa.repeat(pa.scalar(1_700_000_000_000_000, SCHEMA.field("_commit_timestamp").type), n),
        pa.array(np.arange(n, dtype=np.int64)),
        pa.nulls(n, SCHEMA.field("_event_time_min").type),
        pa.nulls(n, SCHEMA.field("_event_time_max").type),
    ], schema=SCHEMA)


@dataclass
class FloorPartition(InputPartition):
    region: int
    batches: int


def split(rows: int, parts: int) -> list[FloorPartition]:
    """``rows`` (a multiple of ``BATCH_ROWS``) as evenly as can be over ``parts``."""
    per, extra = divmod(rows // BATCH_ROWS, parts)
    return [FloorPartition(p, per + (p < extra)) for p in range(parts)]


def read_partition(partition: FloorPartition, payload_only: bool) -> Iterator[pa.RecordBatch]:
    batch = floor_batch(partition.region, payload_only)
    for _ in range(partition.batches):
        yield batch


class FloorReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """One micro-batch of ``rows`` rows over ``parts`` partitions, then nothing."""

    def __init__(self, rows: int, parts: int = 2, payload_only: bool = False) -> None:
        self.rows = rows
        self.parts = parts
        self.payload_only = payload_only

    def initialOffset(self) -> dict:
        return {"done": 0}

    def prepareForTriggerAvailableNow(self) -> None:
        pass

    def latestOffset(self, start: dict, limit: object) -> dict:
        return {"done": 1}

    def partitions(self, start: dict, end: dict) -> list[FloorPartition]:
        if start["done"] >= end["done"]:
            return []
        return split(self.rows, self.parts)

    def read(self, partition: FloorPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition, self.payload_only)

    def commit(self, end: dict) -> None:
        pass


class FloorBatchReader(DataSourceReader):
    """``spark.read``: ``rows`` rows (a multiple of ``BATCH_ROWS``) split evenly over
    ``parts`` partitions (by default the driver's cores), each yielding its share of
    the prebuilt batches."""

    def __init__(self, rows: int, parts: int, payload_only: bool = False) -> None:
        self.rows = rows
        self.parts = parts
        self.payload_only = payload_only

    def partitions(self) -> list[FloorPartition]:
        return split(self.rows, self.parts)

    def read(self, partition: FloorPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition, self.payload_only)


class DiscardWriter(DataSourceStreamArrowWriter):
    """Takes every Arrow batch Spark hands a Python sink and keeps nothing."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        for _ in iterator:
            pass
        return WriterCommitMessage()

    def commit(self, messages: list, batchId: int) -> None:
        pass

    def abort(self, messages: list, batchId: int) -> None:
        pass


class PythonFloor(DataSource):
    """``format("pyfloor")``: the do-nothing Python source and sink."""

    @classmethod
    def name(cls) -> str:
        return "pyfloor"

    def schema(self) -> str:
        return PAYLOAD_DDL if self._payload_only() else DDL

    def _payload_only(self) -> bool:
        return self.options.get("columns", "all") == "payload"

    def _rows(self) -> int:
        return int(self.options.get("rows", "1000000"))

    def streamReader(self, schema: object) -> FloorReader:
        parts = int(self.options.get("partitions", "2"))
        return FloorReader(self._rows(), parts, self._payload_only())

    def reader(self, schema: object) -> FloorBatchReader:
        parts = int(self.options.get("partitions", "0")) or os.cpu_count() or 1
        return FloorBatchReader(self._rows(), parts, self._payload_only())

    def streamWriter(self, schema: object, overwrite: bool) -> DiscardWriter:
        return DiscardWriter()
