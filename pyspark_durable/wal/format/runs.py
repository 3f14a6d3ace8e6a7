"""A step's runs, and how a ``step`` record stores them (compactly from a few runs on).

A *run* is region offsets ``[start, end)`` holding entries of one table, written for
one step; the layout of the stored forms is in docs/record-format.md ("Compact runs").
"""

from __future__ import annotations

import base64
import struct
import sys
import zlib
from array import array
from dataclasses import dataclass
from typing import Any

import xxhash

from pyspark_durable.errors import NewerVersion


@dataclass(frozen=True, slots=True)
class Run:
    """Consecutive region offsets holding entries of one table, written for one step."""

    region_id: int
    table_id: int
    start: int
    end: int
    rows: int
    size_bytes: int
    schema_version: int = 0
    digests: str = ""  # DIGEST_HEX hex digits per entry (entry_digest); "": not recorded

    @property
    def entries(self) -> int:
        return self.end - self.start

    @property
    def key(self) -> tuple[int, int]:
        """(region, table): what sequence numbers count in."""
        return self.region_id, self.table_id


RUNS_FORMAT = 1  # byte 0 of a step's compact runs (encode_runs)
RUNS_DEFLATED = 0x01  # flag of byte 1: the columns after it are zlib-deflated
COMPACT_FROM = 4  # runs in a step from which they are stored compactly
_RUN_COUNTS = struct.Struct("<II")  # runs, distinct tables
_WIDTHS = {array(code).itemsize: code for code in "BHIQ"}  # bytes -> array typecode


def encode_runs(runs: tuple[Run, ...]) -> str | list[list[Any]]:
    """A step's runs as stored: from ``COMPACT_FROM`` runs on the compact form (a
    base64 string); below it, or for runs it cannot hold (a negative or over-u64
    number, digests that are not 16 lowercase hex digits per entry), JSON lists
    ``[region, table, start, end, rows, bytes, schema_version, digests?]``.

    The compact form (``RUNS_FORMAT`` 1; docs/record-format.md) is columnar: each
    column in the narrowest width its values need, table ids listed once per step and
    referred to, starts as the gap after the previous run of the region, digests as
    raw bytes, the columns deflated when that is shorter. A 1,000-table step's record
    drops from 64 KB of JSON lists to the 16 bytes per run its random table id and
    digest need, plus a little. A step of a few runs keeps the lists: as small, and
    twice as fast to decode (a streaming query's usual step, replayed on every open)."""
    packed = _pack_runs(runs) if len(runs) >= COMPACT_FROM else None
    if packed is None:
        return [[r.region_id, r.table_id, r.start, r.end, r.rows, r.size_bytes,
                 r.schema_version, *([r.digests] if r.digests else [])] for r in runs]
    return base64.b64encode(packed).decode()


def decode_runs(stored: Any) -> tuple[Run, ...]:
    """A step's stored runs (:func:`encode_runs`): the compact string, or JSON lists of
    6 (before schema versions: version 0), 7 (before digests: none) or 8 elements.
    Damage is a ``ValueError`` or ``TypeError`` (a ``DecodeError`` to the caller)."""
    if isinstance(stored, str):
        return _unpack_runs(base64.b64decode(stored, validate=True))
    return tuple([Run(*r) for r in stored])


def _column(values: list[int]) -> bytes | None:
    """``values`` as a width byte and little-endian unsigned ints of that width."""
    top = max(values, default=0)
    width = next((w for w in sorted(_WIDTHS) if top < 1 << (8 * w)), None)
    if width is None:
        return None
    try:
        col = array(_WIDTHS[width], values)
    except (OverflowError, TypeError):  # a negative or a non-int: the list form holds it
        return None
    if sys.byteorder == "big":
        col.byteswap()
    return bytes((width,)) + col.tobytes()


def _pack_runs(runs: tuple[Run, ...]) -> bytes | None:
    tables: dict[int, int] = {}  # table id -> its index, in order of first use
    cols: list[list[int]] = [[] for _ in range(7)]
    refs, regions, gaps, entries, rows, sizes, versions = cols
    digests = bytearray()
    ends: dict[int, int] = {}  # region -> end of its previous run
    for r in runs:
        ref = tables.get(r.table_id)
        refs.append(0 if ref is None else ref + 1)  # 0: the next table of the list
        if ref is None:
            tables[r.table_id] = len(tables)
        if r.start < 0:
            return None
        gap = r.start - ends.get(r.region_id, 0)
        ends[r.region_id] = r.end
        regions.append(r.region_id)
        gaps.append(2 * gap if gap >= 0 else -2 * gap - 1)  # zigzag: any order holds
        entries.append(r.end - r.start)
        rows.append(r.rows)
        sizes.append(r.size_bytes)
        versions.append(r.schema_version * 2 + bool(r.digests))
        if r.digests:
            try:
                raw = bytes.fromhex(r.digests)
            except ValueError:
                return None
            if len(raw) != 8 * (r.end - r.start) or raw.hex() != r.digests:
                return None
            digests += raw
    body = bytearray(_RUN_COUNTS.pack(len(runs), len(tables)))
    for col in (list(tables), *cols):
        packed = _column(col)
        if packed is None:
            return None
        body += packed
    body += digests
    flags = 0
    deflated = zlib.compress(body)
    if len(deflated) < len(body):
        body, flags = bytearray(deflated), RUNS_DEFLATED
    return bytes((RUNS_FORMAT, flags)) + body


def _read_column(view: memoryview, pos: int, count: int) -> tuple[array, int]:
    if pos >= len(view):
        raise ValueError(f"compact runs end at byte {pos}, before a column")
    width = view[pos]
    code = _WIDTHS.get(width)
    if code is None:
        raise ValueError(f"compact runs: column width {width} at byte {pos} is not "
                         f"{'/'.join(map(str, sorted(_WIDTHS)))}")
    end = pos + 1 + width * count
    if end > len(view):
        raise ValueError(f"compact runs end at byte {len(view)}, inside a column of "
                         f"{count} values ending at {end}")
    col = array(code)
    col.frombytes(view[pos + 1:end])
    if sys.byteorder == "big":
        col.byteswap()
    return col, end


def _unpack_runs(data: bytes) -> tuple[Run, ...]:
    if len(data) < 2:
        raise ValueError(f"compact runs of {len(data)} bytes, shorter than their 2-byte head")
    if data[0] > RUNS_FORMAT:  # a newer release's: refused by name (decode_record locates it)
        raise NewerVersion("compact runs format", data[0], RUNS_FORMAT)
    if data[0] != RUNS_FORMAT:
        raise ValueError(f"compact runs of format {data[0]}, expected {RUNS_FORMAT}")
    flags, body = data[1], data[2:]
    if flags & ~RUNS_DEFLATED:
        raise ValueError(f"compact runs with unknown flags {flags:#04x}")
    if flags & RUNS_DEFLATED:
        try:
            body = zlib.decompress(body)
        except zlib.error as exc:
            raise ValueError(f"compact runs do not inflate: {exc}") from None
    view = memoryview(body)
    if len(view) < _RUN_COUNTS.size:
        raise ValueError(f"compact runs of {len(view)} bytes, shorter than their counts")
    count, distinct = _RUN_COUNTS.unpack_from(view)
    tables, pos = _read_column(view, _RUN_COUNTS.size, distinct)
    cols = []
    for _ in range(7):
        col, pos = _read_column(view, pos, count)
        cols.append(col)
    digests = view[pos:]
    need = 8 * sum(n for n, v in zip(cols[3], cols[6], strict=True) if v & 1)
    if len(digests) != need:
        raise ValueError(f"compact runs hold {len(digests)} digest bytes, their runs "
                         f"need {need}")
    runs: list[Run] = []
    ends: dict[int, int] = {}
    seen = at = 0  # tables of the list used so far, digest bytes read so far
    for ref, region, gap, n, rows, size, version in zip(*cols, strict=True):
        if ref > seen or (ref == 0 and seen == distinct):
            raise ValueError(f"compact runs: run {len(runs)} refers to table {ref} "
                             f"of {seen} used so far, {distinct} listed")
        table = tables[seen if ref == 0 else ref - 1]
        seen += ref == 0
        start = ends.get(region, 0) + (gap >> 1 if not gap & 1 else -((gap + 1) >> 1))
        if start < 0:
            raise ValueError(f"compact runs: run {len(runs)} starts at {start}")
        ends[region] = start + n
        digest = ""
        if version & 1:
            digest, at = digests[at:at + 8 * n].hex(), at + 8 * n
        runs.append(Run(region, table, start, start + n, rows, size, version >> 1, digest))
    if seen != distinct:
        raise ValueError(f"compact runs list {distinct} tables, their runs use {seen}")
    return tuple(runs)


DIGEST_HEX = 16  # hex digits of one entry's digest


def entry_digest(key: bytes, value: Any) -> str:
    """An entry's content digest as its step records it: XXH3-64 of its key and value.

    Not a security hash: it catches bytes that changed while the log's own CRC still
    matches (a frame rewritten with a new CRC, a copy restored from elsewhere, another
    cluster's topic under the same name). XXH3 hashes ~20 GB/s, so verifying every read
    costs little beside decoding it."""
    h = xxhash.xxh3_64(key)
    h.update(value)
    return h.hexdigest()
