"""Schema evolution and union by name: the rules that keep old rows readable.

A table's schema versions only ever grow in two safe ways, as Delta's
``mergeSchema`` does: a new nullable column is appended, or a column's type is
widened without loss (a narrower integer to a wider one, a narrower float to a
wider one). So rows written with any version read as the newest one: missing
columns are null, narrower values are cast up. Everything else is a type
conflict, a :class:`SchemaMismatch` naming the column and both types.

Reading several tables at once applies the same rules across tables (Spark's
``unionByName(allowMissingColumns=True)``): one schema with every column by name.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

from pyspark_durable.codec.casts import cast_array
from pyspark_durable.errors import SchemaMismatch

_INT_ORDER = (pa.int8(), pa.int16(), pa.int32(), pa.int64())
_FLOAT_ORDER = (pa.float16(), pa.float32(), pa.float64())


def _rank(t: pa.DataType) -> tuple[int, int] | None:
    for family, order in enumerate((_INT_ORDER, _FLOAT_ORDER)):
        if t in order:
            return family, order.index(t)
    return None


def common_type(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    """The type both fit in without loss (``a`` if equal), or None for a conflict.

    Nested field metadata counts: it is what tells a variant or a geometry from a
    plain struct of binaries, a collated string from a plain one."""
    if a.equals(b, check_metadata=True):
        return a
    ra, rb = _rank(a), _rank(b)
    if ra is None or rb is None or ra[0] != rb[0]:
        return None
    return a if ra[1] > rb[1] else b


def _common_field(have: pa.Field, new: pa.Field) -> pa.Field | None:
    """One column of both fields (nullable, ``have``'s name), or None for a conflict;
    a column's metadata (a Spark collation, comment) is part of its type."""
    if (have.metadata or {}) != (new.metadata or {}):
        return None
    wider = common_type(have.type, new.type)
    return None if wider is None else pa.field(have.name, wider, nullable=True,
                                               metadata=have.metadata)


def fits(rows: pa.Schema, table: pa.Schema) -> bool:
    """Rows of ``rows`` can be written as ``table`` as is: a subset of its columns, each
    of the table's type or one that widens to it (missing columns are written null)."""
    if rows.equals(table, check_metadata=True):
        return True  # the same columns, types and metadata: the common case, at once
    for f in rows:
        i = table.get_field_index(f.name)
        if i < 0:
            return False
        common = _common_field(table.field(i), f)
        if common is None or not common.type.equals(table.field(i).type, check_metadata=True):
            return False
    return True


def merge(table: pa.Schema, rows: pa.Schema, *, what: str = "the table") -> pa.Schema:
    """The next schema version: the table's columns widened where rows need it, then
    the rows' new columns (nullable). A real conflict is :class:`SchemaMismatch`."""
    fields = list(table)
    lowered = {f.name.lower(): f.name for f in table}
    for f in rows:
        i = table.get_field_index(f.name)
        if i < 0:
            twin = lowered.get(f.name.lower())
            if twin is not None:
                raise SchemaMismatch(
                    f"column {f.name!r} differs from {what}'s column {twin!r} only in case; "
                    "Spark resolves column names case-insensitively, so both cannot exist")
            fields.append(f.with_nullable(True))
            lowered[f.name.lower()] = f.name
            continue
        common = _common_field(table.field(i), f)
        if common is None:
            raise SchemaMismatch(
                f"column {f.name!r} has type {_spelled(table.field(i))} in {what} and "
                f"{_spelled(f)} in the rows; only new columns and lossless widenings (int to "
                "long, float to double) evolve a schema")
        fields[i] = common
    return pa.schema(fields)


def conform(data: pa.Table | pa.RecordBatch, target: pa.Schema) -> pa.Table | pa.RecordBatch:
    """``data`` as ``target``: columns by name, missing ones null, narrower types cast up."""
    if data.schema.equals(target):
        return data
    n = data.num_rows
    columns = []
    for f in target:
        i = data.schema.get_field_index(f.name)
        if i < 0:
            columns.append(pa.nulls(n, f.type))
            continue
        col = data.column(i)
        columns.append(col if col.type.equals(f.type, check_metadata=True)
                       else cast_array(col, f.type))
    if isinstance(data, pa.RecordBatch):
        return pa.RecordBatch.from_arrays(columns, schema=target)
    return pa.Table.from_arrays(columns, schema=target)


def _spelled(f: pa.Field) -> str:
    """A field's type, with its metadata when it has any (what tells two apart)."""
    if not f.metadata:
        return str(f.type)
    meta = ", ".join(f"{k.decode(errors='replace')}={v.decode(errors='replace')}"
                     for k, v in f.metadata.items())
    return f"{f.type} ({meta})"


def union_by_name(named: list[tuple[str, pa.Schema]],
                  type_name: Callable[[pa.Field], str] = _spelled) -> pa.Schema:
    """One schema for rows of several tables: every column by name, widened where the
    tables differ. A real conflict names both tables, the column and both types
    (spelled by ``type_name``: the Spark layer passes Spark's type names)."""
    fields: list[pa.Field] = []
    index: dict[str, int] = {}
    owner: dict[str, str] = {}
    for table, schema in named:
        for f in schema:
            i = index.get(f.name)
            if i is None:
                index[f.name] = len(fields)
                owner[f.name] = table
                fields.append(f.with_nullable(True))
                continue
            common = _common_field(fields[i], f)
            if common is None:
                raise SchemaMismatch(
                    f"column {f.name!r} is {type_name(fields[i])} in table "
                    f"{owner[f.name]!r} and {type_name(f)} in table {table!r}, so the "
                    f"tables cannot be read as one DataFrame; choose tables of one type with "
                    f".option(\"tables\", \"{owner[f.name]}\") (then .option(\"tables\", "
                    f"\"{table}\") for the other)")
            fields[i] = common
    return pa.schema(fields)
