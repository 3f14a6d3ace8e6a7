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

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from pyspark_durable.codec.arrays import int_array, scalar_of

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
_TYPES: dict[str, pa.DataType] = {f.name: f.type for f in METADATA_FIELDS}


def metadata_fields(names: Sequence[str]) -> list[pa.Field]:
    """The fields of the metadata columns ``names``, in the order given."""
    return [pa.field(n, _TYPES[n]) for n in names]


def metadata_columns(sb: StepBatch, table_name: str, rows: int, first_row: int = 0,
                     names: Sequence[str] = METADATA_NAMES) -> list[pa.Array]:
    """The metadata columns ``names`` (by default all, in :data:`METADATA_FIELDS` order)
    of ``rows`` rows of one entry, starting at its row ``first_row`` (an entry may
    decode into several batches), built directly in their final types (no cast).

    Every column but ``_sequence`` and ``_row`` holds one value for a whole step (or
    region, or table), so it is a zero-copy slice of an array filled once per process
    and value (:func:`_constant`): a read of a step's entries fills nothing for them.
    ``_sequence`` changes with every entry, so it is filled once per entry (by Arrow,
    no Python per row); ``_row`` is a slice of one cached range."""
    low, high = sb.event_time or (None, None)
    build: dict[str, Callable[[], pa.Array]] = {
        "_region": lambda: _constant("_region", sb.region_id, rows),
        "_table": lambda: _constant("_table", table_name, rows),
        "_sequence": lambda: pa.repeat(scalar_of(sb.sequence_num, pa.int64()), rows),
        "_step": lambda: _constant("_step", sb.step, rows),
        "_commit_timestamp": lambda: _constant("_commit_timestamp",
                                               sb.commit_timestamp_ms * 1000, rows),
        "_row": lambda: _positions(first_row, rows),
        "_event_time_min": lambda: _constant("_event_time_min", low, rows),
        "_event_time_max": lambda: _constant("_event_time_max", high, rows),
    }
    return [build[name]() for name in names]


# 0, 1, 2, ...: sliced, never copied (its values are made from buffers: see
# codec/arrays.py on why not from Python values)
_POSITIONS: list[pa.Array] = [pa.nulls(0, pa.int64())]


def _positions(first: int, rows: int) -> pa.Array:
    """``first .. first + rows - 1`` as a zero-copy slice of one cached int64 array."""
    cached = _POSITIONS[0]
    if first + rows > len(cached):  # grown by doubling; a racing thread builds the same
        n = max(first + rows, 2 * len(cached), 1 << 16)
        cached = int_array(range(n))
        _POSITIONS[0] = cached
    return cached.slice(first, rows)


# the filled arrays kept, least recently used dropped first
CONSTANTS_MAX_BYTES = 32 << 20
CONSTANTS_MAX_KEYS = 1024
_CONSTANTS: OrderedDict[tuple[str, object], pa.Array] = OrderedDict()
_CONSTANTS_BYTES = [0]
_CONSTANTS_LOCK = threading.Lock()


def _constant(column: str, value: object, rows: int) -> pa.Array:
    """``rows`` copies of ``value`` in metadata column ``column``'s type (the cache's key
    is the column's name, quicker to hash than an Arrow type) as a zero-copy slice
    (from its start, so no offset moves in Arrow IPC) of a cached array, grown by
    doubling. Arrow arrays are immutable, so every batch may share one. The cache is bounded
    (:data:`CONSTANTS_MAX_BYTES`, :data:`CONSTANTS_MAX_KEYS`); an array larger than
    it is built and not kept."""
    key = (column, value)
    with _CONSTANTS_LOCK:
        cached = _CONSTANTS.get(key)
        if cached is not None and len(cached) >= rows:
            _CONSTANTS.move_to_end(key)
            return cached.slice(0, rows)
    filled = pa.repeat(scalar_of(value, _TYPES[column]),
                       max(rows, 2 * len(cached) if cached is not None else 0))
    if filled.nbytes <= CONSTANTS_MAX_BYTES:
        with _CONSTANTS_LOCK:
            old = _CONSTANTS.pop(key, None)
            _CONSTANTS_BYTES[0] += filled.nbytes - (old.nbytes if old is not None else 0)
            _CONSTANTS[key] = filled
            while _CONSTANTS_BYTES[0] > CONSTANTS_MAX_BYTES or \
                    len(_CONSTANTS) > CONSTANTS_MAX_KEYS:
                _CONSTANTS_BYTES[0] -= _CONSTANTS.popitem(last=False)[1].nbytes
    return filled.slice(0, rows)
