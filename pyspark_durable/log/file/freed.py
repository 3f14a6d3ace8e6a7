"""Freed frames: the ``freed`` file beside a log's segments, and the holes punched for them.

A frame in the middle of a segment is freed in two durable steps, in this order:

1. a record naming it is appended to ``freed`` and fsync'd (the folder too, when the
   file is new);
2. the frames' bytes are given back with ``fallocate(FALLOC_FL_PUNCH_HOLE |
   FALLOC_FL_KEEP_SIZE)``: the file keeps its size and every other frame its position,
   the punched blocks read as zeros and no longer take space (``st_blocks``).

A record (big-endian, 44 bytes)::

    +-----------+-----------+---------+------------+----------+-------------------+
    | seg_base  | start_off | end_off | start_byte | end_byte | crc32 of the 40   |
    | u64       | u64       | u64     | u64        | u64      | bytes before (u32)|
    +-----------+-----------+---------+------------+----------+-------------------+

says: the frames of offsets ``[start_off, end_off)`` of segment ``seg_base`` occupy
bytes ``[start_byte, end_byte)`` and are freed. A scan that reaches ``start_off`` at
``start_byte`` steps to ``end_byte`` (the punched bytes are never parsed); a record
that does not match the frames as they lie (its segment was recreated, or it is damaged
in a way its CRC missed) is not applied, so the frames it names read, or are reported
damaged, as they are. Why the record comes first: a crash between the two steps leaves
a record of frames still whole, which read as freed; the other order would leave
punched frames no record explains, which a scan must take for damage. Such a record
keeps its frames' space until the next free of the log punches it: every free first
walks the records back from the last one, punching those whose blocks still hold data,
and stops at the first it finds punched (a free appends only after the frees before it
punched or died, so only the last records can lack their holes).

A damaged record (CRC) is skipped and reported through ``note``: the frames it named
are then scanned as they are, and if they were punched they are damage, reported by
reads and ``check`` like any damaged frame, never taken for entries. A partial last
record is a free that died before its fsync (nothing was punched for it): a torn write
like a segment's torn tail, so it is logged (``torn``), not reported as damage, and the
next free cuts it off.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import struct
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pyspark_durable.log.file.disk import (
    Access,
    fsync_dir,
    open_or_create,
    write_all,
    write_atomic,
)
from pyspark_durable.log.file.frames import FRAME_HEAD

FREED_FILE = "freed"
FREED_RECORD = struct.Struct(">QQQQQI")
FREED_BODY = struct.Struct(">QQQQQ")
FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02


@dataclass(frozen=True, slots=True)
class FreedFrames:
    """One record: frames ``[start, end)`` of segment ``base`` at bytes ``[pos, end_pos)``."""

    base: int
    start: int
    end: int
    pos: int
    end_pos: int

    def encode(self) -> bytes:
        body = FREED_BODY.pack(self.base, self.start, self.end, self.pos, self.end_pos)
        return body + struct.pack(">I", zlib.crc32(body))


def read_freed(folder: Path, note: Callable[[str], None],
               torn: Callable[[str], None]) -> tuple[list[FreedFrames], int]:
    """The valid records of ``folder/freed`` and the byte where whole records end; damage
    goes to ``note``, a torn last record (harmless, module docstring) to ``torn``."""
    try:
        raw = (folder / FREED_FILE).read_bytes()
    except FileNotFoundError:
        return [], 0
    found: list[FreedFrames] = []
    whole = len(raw) - len(raw) % FREED_RECORD.size
    for at in range(0, whole, FREED_RECORD.size):
        *fields, crc = FREED_RECORD.unpack_from(raw, at)
        if zlib.crc32(raw[at : at + FREED_BODY.size]) != crc:
            note(f"freed-frames record at byte {at} of {FREED_FILE} fails its CRC: ignored, "
                 "the frames it named are read as they lie")
            continue
        record = FreedFrames(*fields)
        if record.start < record.end and record.pos <= record.end_pos:
            found.append(record)
        else:
            note(f"freed-frames record at byte {at} of {FREED_FILE} names no frames: ignored")
    if whole < len(raw):
        torn(f"{FREED_FILE} ends in a partial record at byte {whole} (a free that did not "
             "finish; nothing was punched for it): ignored, and cut off by the next free")
    return found, whole


def append_freed(folder: Path, records: Sequence[FreedFrames], whole: int,
                 access: Access) -> None:
    """Append ``records`` durably after the whole records (``whole`` bytes; a partial
    last record is cut off first). The caller holds the log's exclusive lock."""
    path = folder / FREED_FILE
    fd, created = open_or_create(path, access)
    try:
        os.ftruncate(fd, whole)
        os.lseek(fd, whole, os.SEEK_SET)
        write_all(fd, [r.encode() for r in records])
        os.fsync(fd)
    except OSError:
        # the fsync rule: a record whose write or fsync failed is cut off again (nothing
        # was punched for it), so no later reader takes bytes the disk may not hold
        try:
            os.ftruncate(fd, whole)
            os.fsync(fd)
        except OSError:
            pass  # cut by the next free, which truncates to the whole records it read
        raise
    finally:
        os.close(fd)
    if created:
        fsync_dir(folder)


def rewrite_freed(folder: Path, records: Sequence[FreedFrames], access: Access) -> None:
    """Replace ``freed`` with ``records`` (those of deleted segments dropped), atomically."""
    write_atomic(folder / FREED_FILE, b"".join(r.encode() for r in records), access)


_libc: ctypes.CDLL | None = None


def _fallocate() -> Callable[..., int] | None:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    fn = getattr(_libc, "fallocate", None)
    if fn is not None:
        fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
        fn.restype = ctypes.c_int
    return fn


def _inner_blocks(pos: int, end_pos: int, block: int) -> tuple[int, int]:
    """The whole blocks inside ``[pos, end_pos)`` past the first frame's head."""
    return -(-(pos + FRAME_HEAD.size) // block) * block, end_pos // block * block


def hole_state(path: Path, pos: int, end_pos: int, block: int) -> str | None:
    """Whether the blocks a punch of ``[pos, end_pos)`` gives back are a ``"hole"`` or
    still hold ``"data"`` (a file system without ``SEEK_DATA`` reports all of a file as
    data); None when no whole block lies inside (nothing to give back)."""
    start, stop = _inner_blocks(pos, end_pos, block)
    if stop <= start:
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        return "data" if os.lseek(fd, start, os.SEEK_DATA) < stop else "hole"
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # no data at or after ``start``
            return "hole"
        raise
    finally:
        os.close(fd)


def punch(path: Path, pos: int, end_pos: int, block: int) -> bool:
    """Give back the whole blocks inside ``[pos, end_pos)`` of ``path`` and fsync; the
    first frame's length and CRC stay (a segment is known by its first frame's head).
    False when the file system cannot punch holes (the frames stay freed, unread)."""
    start, stop = _inner_blocks(pos, end_pos, block)
    if stop <= start:
        return True  # no whole block inside: nothing to give back
    fn = _fallocate()
    if fn is None:
        return False
    fd = os.open(path, os.O_WRONLY)
    try:
        if fn(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, start, stop - start) != 0:
            err = ctypes.get_errno()
            if err in (errno.EOPNOTSUPP, errno.ENOSYS):
                return False
            raise OSError(err, os.strerror(err), str(path))
        os.fsync(fd)
    finally:
        os.close(fd)
    return True
