"""Arrow arrays built from their buffers, not converted from Python values.

pyarrow's converter from Python values (``pa.array``, ``pa.table``,
``Table.from_pydict``/``from_pylist``, ``pa.scalar``, ``Schema.empty_table``, a compute
function's scalar option) imports pandas to ask about its input: ~0.2 s and ~50 MB
that every CLI command and Python-API process would pay at its first open, before it
reads any history. The package builds the arrays it makes itself (the step index,
the one-off writers, the metadata columns, raw payloads) here instead.
"""

from __future__ import annotations

import array
from collections.abc import Mapping, Sequence

import pyarrow as pa

_CODES = {pa.int64(): "q", pa.uint64(): "Q", pa.int32(): "i", pa.uint32(): "I",
          pa.int16(): "h", pa.uint16(): "H", pa.int8(): "b", pa.uint8(): "B"}
INT64, UINT64, BINARY = pa.int64(), pa.uint64(), pa.binary()


def int_array(values: Sequence[int], type_: pa.DataType = INT64) -> pa.Array:
    """An integer array without nulls (of 8 to 64 bits), from its buffer.

    A value out of the type's range raises ``OverflowError``, as ``pa.array`` would
    refuse it too."""
    data = array.array(_CODES[type_], values)
    return pa.Array.from_buffers(type_, len(data), [None, pa.py_buffer(data)])


def _validity(valid: Sequence[bool]) -> pa.Buffer | None:
    """Arrow's validity bitmap (bit i of byte i // 8 set: row i is not null), or None if
    no row is null."""
    if all(valid):
        return None
    bits = bytearray((len(valid) + 7) // 8)
    for i, ok in enumerate(valid):
        if ok:
            bits[i >> 3] |= 1 << (i & 7)
    return pa.py_buffer(bytes(bits))


def int_list_array(lists: Sequence[Sequence[int] | None],
                   type_: pa.DataType = UINT64) -> pa.Array:
    """A ``list<type_>`` array (None: a null list) from offsets and one child array."""
    offsets = array.array("i", [0])
    flat: list[int] = []
    for item in lists:
        if item is not None:
            flat.extend(item)
        offsets.append(len(flat))
    valid = [item is not None for item in lists]
    return pa.Array.from_buffers(pa.list_(type_), len(lists),
                                 [_validity(valid), pa.py_buffer(offsets)],
                                 null_count=valid.count(False),
                                 children=[int_array(flat, type_)])


def string_array(values: Sequence[str]) -> pa.Array:
    """A utf8 array without nulls, from its offsets and bytes."""
    return bytes_array([v.encode() for v in values], pa.utf8())


def bytes_array(encoded: Sequence[bytes], type_: pa.DataType = BINARY) -> pa.Array:
    """A binary (or, of UTF-8 bytes, utf8) array without nulls, from its offsets and bytes."""
    offsets = array.array("i", [0])
    size = 0
    for item in encoded:
        size += len(item)
        offsets.append(size)
    return pa.Array.from_buffers(type_, len(encoded),
                                 [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))])


def scalar_of(value: int | str | None, type_: pa.DataType) -> pa.Scalar:
    """``value`` as a scalar of ``type_``: an integer type, a 64-bit timestamp (``value``
    in its unit), a string, or null."""
    if value is None:
        return pa.nulls(1, type_)[0]
    if isinstance(value, str):
        return string_array([value])[0]
    if pa.types.is_timestamp(type_):
        return int_array([value]).view(type_)[0]
    return int_array([value], type_)[0]


def table_of(columns: Mapping[str, pa.Array], schema: pa.Schema) -> pa.Table:
    """A table of ``schema`` from arrays built above (in the schema's column order)."""
    return pa.Table.from_arrays([columns[name] for name in schema.names], schema=schema)
