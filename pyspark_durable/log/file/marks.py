"""The two small files beside a log's segments: what was acknowledged, and where it starts.

Acknowledgement record (``acked``, two 20-byte slots, written in turn)::

    +----------+------------------+-----------------------------+
    | seq u64  | next_offset u64  | crc32 of the 16 bytes before|
    |          | (all below: ack) | (u32)                       |
    +----------+------------------+-----------------------------+

Low watermark (``low_watermark``): ``{offset} {crc32 of the offset's digits, 8 hex}``,
replaced atomically.

Older forms still read: ``acked`` of two 24-byte slots (``ACK_SLOT_PADDED``, four zero
bytes after the CRC; commit 426c954 until 2dfc380), rewritten in today's form by the
log's next append; a ``low_watermark`` of bare decimal digits (before 426c954), which no
CRC protects, replaced with a checked one by the log's next deletion.

A damaged file never stops a read: the other slot, or the first segment's base, is
used and the problem is reported through ``note`` (a log keeps it in its repairs).
"""

from __future__ import annotations

import errno
import os
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pyspark_durable.log.base import is_decimal
from pyspark_durable.log.file.disk import (
    Access,
    fsync_dir,
    open_or_create,
    read_small,
    size_of,
    write_atomic,
)

ACK_SLOT = struct.Struct(">QQI")
ACK_SLOT_PADDED = struct.Struct(">QQI4x")  # commits 426c954-2dfc380: a 48-byte file
ACK_BODY = struct.Struct(">QQ")
ACK_FILE = "acked"
LOW_FILE = "low_watermark"


def read_acked(folder: Path, note: Callable[[str], None]) -> tuple[int, int, bool]:
    """(seq, next_offset, trusted) of the newest valid slot of ``acked``.

    Not trusted when there is no file (a log written before the mark existed) or a slot
    is damaged: a damaged slot may have been the newer one, torn by a crash (then the
    other is right) or rotted later (then the other is too low, and cutting frames past
    it would drop acknowledged ones), so the log then keeps the older rule, with the
    valid slot's offset as a floor, until its next append writes the mark again.
    """
    try:
        raw = read_small(os.path.join(folder, ACK_FILE))  # no pathlib: read at every append
    except FileNotFoundError:
        return 0, 0, False
    best, trusted = (0, 0), True
    slot = ACK_SLOT_PADDED if len(raw) == 2 * ACK_SLOT_PADDED.size else ACK_SLOT
    for i in range(2):
        chunk = raw[i * slot.size : (i + 1) * slot.size]
        if len(chunk) == slot.size:
            seq, nxt, crc = slot.unpack(chunk)
            if zlib.crc32(chunk[: ACK_BODY.size]) == crc:
                best = max(best, (seq, nxt))
                continue
        # slots are written whole; slot 1 first, so a slot 0 never written is zeros
        unwritten = not chunk if i else (chunk == bytes(slot.size) and len(raw) > len(chunk))
        if not unwritten:
            trusted = False
            note(f"{ACK_FILE} file: slot {i} (bytes {i * slot.size}-"
                 f"{(i + 1) * slot.size - 1}) is damaged; the other slot is used")
    if raw and best == (0, 0):
        note(f"{ACK_FILE} file is damaged (no valid slot, {len(raw)} bytes): "
             "acknowledged entries are not protected until the next append")
    return best[0], best[1], trusted and bool(raw)


def write_acked(folder: Path, seq: int, next_offset: int, access: Access) -> None:
    """Durably record, in slot ``seq % 2``, that every offset below ``next_offset`` is
    acknowledged (a torn slot write leaves the other, still valid one). Creating the
    file fsyncs its folder, so a crash cannot forget the mark."""
    slot = ACK_SLOT.pack(seq, next_offset, zlib.crc32(ACK_BODY.pack(seq, next_offset)))
    path = os.path.join(folder, ACK_FILE)  # no pathlib: written at every append
    fd, created = open_or_create(path, access)
    try:
        if not created and size_of(fd) == 2 * ACK_SLOT_PADDED.size:
            # the padded form: replaced whole (atomically) by today's, the other slot unwritten
            write_atomic(Path(path), bytes(ACK_SLOT.size) + slot if seq % 2 else slot, access)
            return
        os.pwrite(fd, slot, (seq % 2) * ACK_SLOT.size)
        os.fdatasync(fd)
    finally:
        os.close(fd)
    if created:
        fsync_dir(folder)


def read_low(folder: Path, first_base: int, note: Callable[[str], None]) -> int:
    """The low watermark file (``offset crc32``), or the first segment's base if damaged."""
    try:
        raw = read_small(os.path.join(folder, LOW_FILE))
    except FileNotFoundError:
        return first_base
    text, _, crc = raw.decode("latin-1").partition(" ")
    if is_decimal(text) and crc == f"{zlib.crc32(text.encode()):08x}":
        return int(text)
    if is_decimal(text) and not crc and not _lost_space(text) and int(text) >= first_base:
        return int(text)  # bare digits: written before the CRC (commit 426c954)
    note(f"{LOW_FILE} file is damaged ({raw[:40]!r}); using the first segment's "
         f"base {first_base} (entries below the real low watermark may be listed)")
    return first_base


def _lost_space(text: str) -> bool:
    """Today's ``{offset} {crc}`` whose space became a digit (its hex CRC all digits):
    damage, not the older bare form."""
    return len(text) > 9 and text[-8:] == f"{zlib.crc32(text[:-9].encode()):08x}"


def write_low(folder: Path, offset: int, access: Access) -> None:
    text = str(offset).encode()
    write_atomic(folder / LOW_FILE, text + f" {zlib.crc32(text):08x}".encode(), access)


# -- the shared state of a log's writers ---------------------------------------------

SYNC_MAGIC = b"DWS1"
SYNC_HEAD = struct.Struct(">4sQQQ")  # magic, written, epoch, syncing
SYNC_CUT = struct.Struct(">QQB")  # epoch, the mark it cut at, kind
SYNC_CUTS = 8  # cuts remembered: a writer waiting through more learns it is indeterminate
CUT, UNSURE = 0, 1  # a cut's kind: frames past the mark cut; or the mark's write failed


@dataclass
class SyncState:
    """What a log's writers share about frames past its acknowledged end, kept in the
    log's ``lock`` file (protocol in docs/backends.md, "Shared syncs"). Read and
    written under the log's exclusive lock only; fsync'd only when a cut changes it,
    since a power cut ends every waiter and the rule needs only a ``written`` that is at
    or below the true one.

    ``written``: every frame below this offset belongs to an append that finished its
    write (a whole batch); a byte past it is a torn write. ``epoch`` counts cuts of
    frames past the mark, and ``cuts`` remembers the last ones as (epoch, mark, kind):
    a writer that wrote at epoch E learns from cut E+1 whether its frames were below
    that mark (acknowledged) or cut. ``syncing``: a sync began and has not finished; the
    next holder of the lock finds it set only if that syncer died, and then cannot know
    whether the frames reached the disk, so it cuts them."""

    written: int = 0
    epoch: int = 0
    syncing: bool = False
    cuts: list[tuple[int, int, int]] = field(default_factory=list)

    def cut(self, at: int, kind: int = CUT) -> None:
        """Frames past ``at`` are gone (CUT) or in doubt (UNSURE): a new epoch."""
        self.epoch += 1
        self.cuts = [*self.cuts, (self.epoch, at, kind)][-SYNC_CUTS:]
        self.written = at if kind == CUT else self.written
        self.syncing = False

    def encode(self) -> bytes:
        body = SYNC_HEAD.pack(SYNC_MAGIC, self.written, self.epoch, int(self.syncing)) + \
            bytes([len(self.cuts)]) + b"".join(SYNC_CUT.pack(*c) for c in self.cuts)
        return body + struct.pack(">I", zlib.crc32(body))


def read_sync(fd: int, fallback_written: int) -> SyncState:
    """The writers' state in the ``lock`` file ``fd``; an empty, short or damaged one is
    a fresh state written at ``fallback_written`` (the mark: nothing past it is whole)
    with an epoch no waiter holds, so a waiter from before the damage learns its append
    is in doubt."""
    raw = os.pread(fd, SYNC_HEAD.size + 1 + SYNC_CUTS * SYNC_CUT.size + 4, 0)
    if len(raw) > SYNC_HEAD.size and raw[:4] == SYNC_MAGIC:
        n = raw[SYNC_HEAD.size]
        end = SYNC_HEAD.size + 1 + n * SYNC_CUT.size
        if n <= SYNC_CUTS and len(raw) >= end + 4 and \
                struct.unpack_from(">I", raw, end)[0] == zlib.crc32(raw[:end]):
            _, written, epoch, syncing = SYNC_HEAD.unpack_from(raw)
            cuts = [SYNC_CUT.unpack_from(raw, SYNC_HEAD.size + 1 + i * SYNC_CUT.size)
                    for i in range(n)]
            return SyncState(written, epoch, bool(syncing), cuts)
    return SyncState(fallback_written, int.from_bytes(os.urandom(7), "big"))


def write_sync(fd: int, state: SyncState, durable: bool = False) -> None:
    """Replace the state in place (a shorter state leaves the old one's tail behind it,
    which its count of cuts and its CRC leave out)."""
    data = state.encode()
    if os.pwrite(fd, data, 0) != len(data):
        raise OSError(errno.EIO, "short write of the sync state")
    if durable:
        os.fdatasync(fd)
