"""A snapshot's binary blocks: Arrow IPC streams, read as columns without a Python object per row.

An open must not cost one Python object per remembered writer or step-index chunk
(a namespace keeps thousands of each), so a snapshot stores them as Arrow columns and a
process reads a row only when it asks for it: an integer column is a ``memoryview`` of
the Arrow buffer (indexing it makes one ``int``), a string column its offsets and bytes.
"""

from __future__ import annotations

import io

import pyarrow as pa

from pyspark_durable.codec.arrays import int_array
from pyspark_durable.errors import DecodeError

Blocks = dict[str, list[int]]  # block name -> [position, length] in the blocks area

def encode_blocks(tables: dict[str, pa.Table]) -> tuple[bytes, Blocks]:
    """The tables as consecutive Arrow IPC streams, and where each one lies."""
    out = io.BytesIO()
    where: Blocks = {}
    for name, table in tables.items():
        start = out.tell()
        with pa.ipc.new_stream(out, table.schema) as writer:
            writer.write_table(table)
        where[name] = [start, out.tell() - start]
    return out.getvalue(), where


def decode_block(blocks: bytes, where: Blocks, name: str, schema: pa.Schema) -> pa.Table:
    """The block ``name`` as one table of ``schema`` (its columns in one Arrow chunk each)."""
    try:
        start, length = where[name]
        if start < 0 or length < 0 or start + length > len(blocks):
            raise ValueError(f"block {name!r} at [{start}, {start + length}) lies outside the "
                             f"{len(blocks)} bytes of blocks")
        table = pa.ipc.open_stream(pa.py_buffer(blocks)[start:start + length]).read_all()
    except (pa.ArrowInvalid, OSError) as exc:
        raise ValueError(f"block {name!r} is not an Arrow stream: {exc}") from exc
    if not table.schema.equals(schema):
        raise ValueError(f"block {name!r} has columns {table.schema.names} of other types "
                         f"than {schema.names}")
    return table.combine_chunks()


class Int64Column:
    """An int64 (or int32) column without nulls, indexed without decoding the rest."""

    def __init__(self, column: pa.ChunkedArray | pa.Array) -> None:
        arr = column.chunk(0) if isinstance(column, pa.ChunkedArray) and column.num_chunks \
            else column
        if isinstance(arr, pa.ChunkedArray) or len(arr) == 0:
            self._view: memoryview | list[int] = []
            return
        if arr.null_count:
            raise DecodeError(f"column of {len(arr)} values holds {arr.null_count} nulls")
        code = "q" if arr.type == pa.int64() else "i"
        width = 8 if code == "q" else 4
        end = (arr.offset + len(arr)) * width
        self._view = memoryview(arr.buffers()[1])[:end].cast(code)[arr.offset:]

    def __len__(self) -> int:
        return len(self._view)

    def __getitem__(self, i: int) -> int:
        return self._view[i]


class StringColumn:
    """A utf8 column without nulls: row ``i`` as bytes, or as ``str``."""

    def __init__(self, column: pa.ChunkedArray | pa.Array) -> None:
        arr = column.chunk(0) if isinstance(column, pa.ChunkedArray) and column.num_chunks \
            else column
        self._n = 0 if isinstance(arr, pa.ChunkedArray) else len(arr)
        if self._n == 0:
            self._offsets, self._data = Int64Column(int_array([], pa.int32())), memoryview(b"")
            return
        if arr.null_count:
            raise DecodeError(f"column of {len(arr)} strings holds {arr.null_count} nulls")
        _, offsets, data = arr.buffers()
        whole = pa.Array.from_buffers(pa.int32(), arr.offset + len(arr) + 1, [None, offsets])
        self._offsets = Int64Column(whole.slice(arr.offset))
        self._data = memoryview(data) if data is not None else memoryview(b"")

    def __len__(self) -> int:
        return self._n

    def raw(self, i: int) -> bytes:
        return bytes(self._data[self._offsets[i]:self._offsets[i + 1]])

    def __getitem__(self, i: int) -> str:
        return self.raw(i).decode()
