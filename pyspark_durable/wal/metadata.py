"""The metadata columns a reader gets beside a table's rows: where each row came from.

Spark's reader (:mod:`pyspark_durable.spark.source`), the Python API
(:func:`pyspark_durable.endpoint.api.read_steps`) and the CLI's ``tail`` all build them
with :func:`metadata_columns`, and Spark's writer refuses rows that carry them
(:data:`METADATA_NAMES`), so the names and types are written here once:

=====================  ===================  ============================================
column                 type                 value
=====================  ===================  ============================================
``_region``            int64                the region the row's entry was read from
``_table``             string               the table's name
``_sequence``          int64                the entry's sequence number in its
                                            (region, table)
``_step``              int64                the step that committed the row
``_commit_timestamp``  timestamp[us, UTC]   when that step committed
``_row``               int64                the row's position in its entry (0, 1, ...)
``_event_time_min``    timestamp[us, UTC]   the step's earliest event time (its writer's
                                            ``eventTimeColumn``), null if not recorded
``_event_time_max``    timestamp[us, UTC]   the step's latest event time, or null
=====================  ===================  ============================================

(``_region``, ``_table``, ``_sequence``, ``_row``) names a row: an entry's content and
its sequence number never change once its step committed, so a replay, a re-read or a
read split over other tasks gives every row the same key. Columns added later come
after the older ones, so readers written before them keep their positions (and a read
schema may name any subset of them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    from pyspark_durable.wal.reading import StepBatch

UTC_US = pa.timestamp("us", tz="UTC")
METADATA_FIELDS: tuple[pa.Field, ...] = (
    pa.field("_region", pa.int64()),
    pa.field("_table", pa.string()),
    pa.field("_sequence", pa.int64()),
    pa.field("_step", pa.int64()),
    pa.field("_commit_timestamp", UTC_US),
    pa.field("_row", pa.int64()),
    pa.field("_event_time_min", UTC_US),
    pa.field("_event_time_max", UTC_US),
)
METADATA_NAMES: tuple[str, ...] = tuple(f.name for f in METADATA_FIELDS)


def metadata_columns(sb: StepBatch, table_name: str, rows: int,
                     first_row: int = 0) -> list[pa.Array]:
    """The metadata columns of ``rows`` rows of one entry, starting at its row
    ``first_row`` (an entry may decode into several batches), in
    :data:`METADATA_FIELDS` order, built directly in their final types (no cast)."""
    values = (sb.region_id, table_name, sb.sequence_num, sb.step, sb.commit_timestamp_ms * 1000)
    same = [pa.repeat(pa.scalar(v, f.type), rows) for v, f in zip(values, METADATA_FIELDS,
                                                                  strict=False)]
    low, high = sb.event_time or (None, None)
    return [*same, _positions(first_row, rows), pa.repeat(pa.scalar(low, UTC_US), rows),
            pa.repeat(pa.scalar(high, UTC_US), rows)]


_POSITIONS: list[pa.Array] = [pa.array([], pa.int64())]  # 0, 1, 2, ...: sliced, never copied


def _positions(first: int, rows: int) -> pa.Array:
    """``first .. first + rows - 1`` as a zero-copy slice of one cached int64 array."""
    cached = _POSITIONS[0]
    if first + rows > len(cached):  # grown by doubling; a racing thread builds the same
        n = max(first + rows, 2 * len(cached), 1 << 16)
        cached = pc.cumulative_sum(pa.repeat(pa.scalar(1, pa.int64()), n), start=-1)
        _POSITIONS[0] = cached
    return cached.slice(first, rows)
