"""Arrow casts that give nulls back, where pyarrow's own cast breaks on them.

pyarrow (26.0.1 and earlier) fails two casts of nulls, even to the array's own type:

* a list or map holding the null type: the null values below it come out as many as
  the list has rows, an invalid array (``offset for slot 2 out of bounds``). Spark's
  ``array(null)``, ``array()`` and ``map('k', null)`` are such values;
* a null struct with a non-nullable field: Spark writes a null struct with null fields
  (a null variant is a null ``struct<value: binary not null, ...>``), and pyarrow
  refuses the null fields (``nulls in input cannot be viewed as non-nullable``) without
  looking at the struct's own null.

Every write and read casts (to the stored schema, to Avro's plain numbers, to the
reader's schema). So a type of either kind is cast here part by part, its null values
made afresh and its fields put back under the same nulls; any other type is left to
pyarrow. A field that is not nullable may come out holding nulls where its struct is
null, as Arrow allows; ``spark.arrow_types.readable`` fills them where a reader needs.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from pyspark_durable.codec.arrays import scalar_of

Columnar = pa.Table | pa.RecordBatch
ArrayLike = pa.Array | pa.ChunkedArray


def cast(data: Columnar, schema: pa.Schema) -> Columnar:
    """``data`` (a table or batch) cast to ``schema``, as ``data.cast(schema)``."""
    if data.schema.equals(schema, check_metadata=True):
        return data
    columns = [cast_array(c, f.type) for c, f in zip(data.columns, schema, strict=True)]
    return type(data).from_arrays(columns, schema=schema)


def cast_array(arr: ArrayLike, t: pa.DataType) -> ArrayLike:
    """``arr`` cast to ``t``, as ``arr.cast(t)``."""
    if isinstance(arr, pa.ChunkedArray):
        return pa.chunked_array([cast_array(c, t) for c in arr.chunks], type=t)
    if arr.type.equals(t, check_metadata=True):
        return arr
    if pa.types.is_null(arr.type):
        return pa.nulls(len(arr), t)
    if not (_fragile(arr.type) or _fragile(t)):
        return arr.cast(t)
    mask = arr.is_null() if arr.null_count else None
    if pa.types.is_struct(arr.type) and pa.types.is_struct(t) and arr.type.names == t.names:
        return pa.StructArray.from_arrays(
            [cast_array(arr.field(i), f.type) for i, f in enumerate(t)], fields=list(t),
            mask=mask)
    if pa.types.is_map(arr.type) and pa.types.is_map(t):
        offsets, start, size = offsets_from_zero(arr)
        return pa.MapArray.from_arrays(
            offsets, cast_array(arr.keys.slice(start, size), t.key_type),
            cast_array(arr.items.slice(start, size), t.item_type), type=t, mask=mask)
    lists = (pa.types.is_list(t), pa.types.is_large_list(t))
    if any(lists) and (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
        kind, width = (pa.ListArray, pa.int32()) if lists[0] else (pa.LargeListArray, pa.int64())
        offsets, start, size = offsets_from_zero(arr)
        return kind.from_arrays(offsets.cast(width),
                                cast_array(arr.values.slice(start, size), t.value_type),
                                type=t, mask=mask)
    return arr.cast(t)  # another shape: pyarrow's cast, and its error


def offsets_from_zero(arr: pa.Array) -> tuple[pa.Array, int, int]:
    """A list's or map's offsets counted from 0, and the start and size of its values in
    its values array: what rebuilding it (or a slice of it) takes, as pyarrow builds no
    list with a null mask from a slice of offsets."""
    start, end = arr.offsets[0].as_py(), arr.offsets[-1].as_py()
    return pc.subtract(arr.offsets, scalar_of(start, arr.offsets.type)), start, end - start


def _fragile(t: pa.DataType, in_list: bool = False) -> bool:
    """Whether pyarrow may break casting ``t``: the null type below a list or map, or a
    field (of a struct, or a list's element, or a map's value) that is not nullable."""
    if pa.types.is_struct(t):
        return any(not f.nullable or _fragile(f.type, in_list) for f in t)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return not t.value_field.nullable or _fragile(t.value_type, True)
    if pa.types.is_map(t):
        return (not t.item_field.nullable or _fragile(t.key_type, True)
                or _fragile(t.item_type, True))
    return in_list and pa.types.is_null(t)
