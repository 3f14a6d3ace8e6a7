"""How a namespace snapshot is stored: a header with the payload's CRC and length.

The payload (the state, format ``SNAPSHOT_VERSION`` of
:mod:`~pyspark_durable.wal.replay.stored_state`) is documented in
docs/record-format.md; this envelope makes every byte of it checked before it is read.

Envelope ``DWS3`` holds a JSON document and binary blocks after it (the remembered
one-off writers and the step index's chunks as Arrow IPC columns, so an open decodes
them without one Python object per writer or chunk): ``u32`` document length, the
document, the blocks. ``DWS2`` (formats 3 and 4) holds the JSON document alone.

Releases before the envelope (formats 1 and 2, up to commit 5cfc928) stored the JSON
payload bare: it is still read, unchecked as it was written. A magic ``DWS`` with a
higher digit whose length and CRC hold is a newer release's envelope:
:class:`NewerVersion`, not damage (with a bad CRC it is a flipped bit, and damage).
"""

from __future__ import annotations

import json
import struct
import zlib

from pyspark_durable.errors import CorruptEntryError, NewerVersion

SNAPSHOT_NAME = "wal"
SNAPSHOT_HEAD = struct.Struct(">4sII")  # magic | crc32 of the payload | payload length
SNAPSHOT_MAGIC = b"DWS3"  # a JSON document, then binary blocks
JSON_MAGIC = b"DWS2"  # the JSON document alone (formats 3 and 4)
DOC_LENGTH = struct.Struct(">I")
BARE_FORMATS = (1, 2)  # payload formats stored without the envelope (before commit 426c954)


def seal_snapshot(doc: bytes, blocks: bytes | None = None) -> bytes:
    """A snapshot as stored: a header with the payload's CRC and length, then the payload
    (``doc`` alone in a ``DWS2`` envelope when there are no blocks, as formats 3 and 4)."""
    if blocks is None:
        magic, payload = JSON_MAGIC, doc
    else:
        magic, payload = SNAPSHOT_MAGIC, DOC_LENGTH.pack(len(doc)) + doc + blocks
    return SNAPSHOT_HEAD.pack(magic, zlib.crc32(payload), len(payload)) + payload


def open_snapshot(raw: bytes, namespace: str, version: int | None) -> tuple[bytes, bytes]:
    """The JSON document and the binary blocks (empty before ``DWS3``) of a stored
    snapshot, checked; every byte is covered by the CRC."""
    where = {"namespace": namespace, "snapshot": SNAPSHOT_NAME, "version": version}
    if len(raw) < SNAPSHOT_HEAD.size:
        raise CorruptEntryError(f"snapshot is {len(raw)} bytes, shorter than its header",
                                **where)
    if raw[:1] == b"{":
        return _bare_payload(raw, where), b""
    magic, crc, length = SNAPSHOT_HEAD.unpack_from(raw)
    payload = raw[SNAPSHOT_HEAD.size:]
    # a newer release's envelope, if its header is ours and holds (else a flipped bit)
    newer = magic[:3] == SNAPSHOT_MAGIC[:3] and magic[3:].isdigit() and magic > SNAPSHOT_MAGIC
    if magic not in (SNAPSHOT_MAGIC, JSON_MAGIC) and not newer:
        raise CorruptEntryError(f"snapshot starts with {magic!r}, expected {SNAPSHOT_MAGIC!r} "
                                f"or {JSON_MAGIC!r} (bytes 0-3)", **where)
    if length != len(payload):
        raise CorruptEntryError(f"snapshot header says {length} payload bytes, the snapshot "
                                f"holds {len(payload)} (bytes 8-11; truncated or damaged)",
                                **where)
    if zlib.crc32(payload) != crc:
        raise CorruptEntryError(f"snapshot payload fails its CRC (stored {crc:08x}, computed "
                                f"{zlib.crc32(payload):08x}; bytes 4-7 or 12-{len(raw) - 1})",
                                **where)
    if newer:
        raise NewerVersion("snapshot envelope", magic.decode(), SNAPSHOT_MAGIC.decode(), **where)
    if magic == JSON_MAGIC:
        return payload, b""
    end = DOC_LENGTH.size + (DOC_LENGTH.unpack_from(payload)[0] if len(payload) >= 4 else 0)
    if len(payload) < end or end == DOC_LENGTH.size:
        raise CorruptEntryError(f"snapshot document length {end - DOC_LENGTH.size} does not fit "
                                f"its {len(payload)}-byte payload (bytes 12-15)", **where)
    return payload[DOC_LENGTH.size:end], payload[end:]


def _bare_payload(raw: bytes, where: dict[str, object]) -> bytes:
    """A snapshot an older release stored without the envelope: only formats 1 and 2 were,
    so anything else starting with ``{`` is damage (a later snapshot always has one)."""
    try:
        found = json.loads(raw).get("v")
    except (ValueError, AttributeError) as exc:
        raise CorruptEntryError(f"snapshot without an envelope is not a JSON object: {exc}",
                                **where) from None
    if found not in BARE_FORMATS:
        raise CorruptEntryError(f"snapshot without an envelope says format {found!r}; only "
                                f"formats {BARE_FORMATS} were stored without one", **where)
    return raw
