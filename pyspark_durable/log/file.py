"""The embedded file log: the zero-setup default backend.

Layout (one folder per namespace, one per log)::

    {root}/
      {namespace}/
        region_0/
          00000000000000000000.seg     segments, named by their first offset
          00000000000000041210.seg     (rolled at segment_size_bytes)
          lock                         flock(2) target, serializes processes
          acked                        what was acknowledged: 2 slots (below)
          low_watermark                decimal + CRC, replaced atomically
        commits/ ...                   the WAL's own logs look the same
        snapshots/{name}.{version:020d}   snapshot versions, each written atomically;
                                       the highest one is the snapshot

Frame of one entry (big-endian)::

    +-----------+-----------+-------------------------------------------------------+
    | len (u32) | crc32(u32)| body: offset u64 | timestamp_ms u64 | key_len u16 |     |
    |           | of body   |       n_headers u16 | key | headers | value          |
    +-----------+-----------+-------------------------------------------------------+
    header: name_len u16 | value_len u32 | name | value

Acknowledgement record (``acked``, two 20-byte slots, written in turn)::

    +----------+------------------+-----------------------------+
    | seq u64  | next_offset u64  | crc32 of the 16 bytes before|
    |          | (all below: ack) | (u32)                       |
    +----------+------------------+-----------------------------+

Low watermark (``low_watermark``): ``{offset} {crc32 of the offset's digits, 8 hex}``.

Implementation notes (why):

* **Group commit.** Appends from every thread of a process go to one writer thread,
  which writes all pending frames with one ``write`` and one ``fdatasync``; an
  append returns only after its fsync. The writer waits at most
  ``group_commit_interval_ms`` after the previous fsync (IOx waits 10 ms), so a
  lone append is never delayed and a busy log shares its fsyncs.
* **Several processes.** Spark runs writers in separate Python workers. A writer
  holds ``flock(LOCK_EX)`` on ``lock`` while it catches up with frames other
  processes appended, writes and fsyncs. Readers take ``LOCK_SH`` only to learn the
  end, so every byte they read was fsync'd by a writer that has released the lock.
* **Torn tails vs. damage: the rule.** An append is acknowledged only after its
  frames were fsync'd *and* then the ``acked`` record saying "every offset below N
  is durable" was fsync'd (one small extra write per group commit; two slots, so a
  torn slot write leaves the previous, still valid one). A crash (power loss) can
  leave a partial last frame: if its offset is at or above the acknowledged N it
  was never acknowledged, and the first writer to take the lock truncates it and
  logs a warning (readers stop before it). A bad frame *below* N, or a log that ends
  before N, is damage to acknowledged data: an error naming the segment and byte,
  never a truncation. A frame that fails its CRC with valid data after it is
  corruption too: never a silent skip. (Kafka keeps a recovery point for the same
  reason; TigerBeetle keeps redundant headers.)
* **Deletion.** ``delete_before`` records the low watermark in a file (replaced with
  rename(2), then the folder is fsync'd) and removes whole segments below it.
"""

from __future__ import annotations

import errno
import fcntl
import itertools
import logging
import mmap
import os
import struct
import threading
import time
import zlib
from array import array
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from pyspark_durable.errors import (
    BackendUnavailable,
    ConfigError,
    CorruptEntryError,
    LogNotFound,
    OffsetOutOfRange,
)
from pyspark_durable.log.base import (
    Entry,
    Log,
    LogStore,
    Record,
    check_name,
    check_version,
    is_decimal,
)

log = logging.getLogger(__name__)

FRAME_HEAD = struct.Struct(">II")
BODY_HEAD = struct.Struct(">QQHH")
HEADER_HEAD = struct.Struct(">HI")
MIN_BODY = BODY_HEAD.size
MAX_BODY = 1 << 30
SEGMENT_SUFFIX = ".seg"
READ_CHUNK_BYTES = 1 << 20
ACK_SLOT = struct.Struct(">QQI")
ACK_FILE = "acked"
LOW_FILE = "low_watermark"
IOV_MAX = 1024  # buffers per writev(2) (Linux' UIO_MAXIOV)


def fsync_dir(path: Path) -> None:
    """Make a created, renamed or deleted directory entry durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new file.

    A failed write (disk full, read-only) leaves no temporary file behind.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


@contextmanager
def storage_errors(what: str, path: Path, **where: Any) -> Iterator[None]:
    """An OSError of the storage (disk full, read-only, permissions) as a typed error
    naming what was being done, where, and the operating system's reason."""
    try:
        yield
    except OSError as exc:
        if isinstance(exc, FileNotFoundError | IsADirectoryError | NotADirectoryError):
            raise LogNotFound(f"{what}: {path} is gone or not a folder ({exc.strerror})",
                              **where) from exc
        hint = {errno.ENOSPC: " (the disk is full)", errno.EROFS: " (read-only file system)",
                errno.EDQUOT: " (disk quota exceeded)"}.get(exc.errno or 0, "")
        raise BackendUnavailable(f"{what} failed at {path}: [Errno {exc.errno}] "
                                 f"{exc.strerror}{hint}", **where) from exc


def frame_parts(offset: int, timestamp_ms: int, record: Record) -> tuple[bytes, bytes]:
    """One frame as (everything before the value, the value): the value is not copied."""
    key = bytes(record.key)
    parts = [BODY_HEAD.pack(offset, timestamp_ms, len(key), len(record.headers)), key]
    for name, value in record.headers:
        raw = name.encode()
        parts += [HEADER_HEAD.pack(len(raw), len(value)), raw, bytes(value)]
    head = b"".join(parts)
    value = record.value
    crc = zlib.crc32(value, zlib.crc32(head))
    return FRAME_HEAD.pack(len(head) + len(value), crc) + head, value


def encode_frame(offset: int, timestamp_ms: int, record: Record) -> bytes:
    head, value = frame_parts(offset, timestamp_ms, record)
    return head + bytes(value)


def write_all(fd: int, buffers: list) -> None:
    """``writev`` every buffer, in order, resuming after partial writes."""
    buffers = [b for b in buffers if len(b)]  # an empty one would make no progress
    i = 0
    while i < len(buffers):
        written = os.writev(fd, buffers[i : i + IOV_MAX])
        while written:
            size = len(buffers[i])
            if written < size:
                buffers[i] = memoryview(buffers[i])[written:]
                break
            written -= size
            i += 1


def read_body(f: BinaryIO, length: int, crc: int) -> Entry | None:
    """Read a frame body of ``length`` bytes as an Entry, or None if it is damaged.

    The body is read piece by piece (CRC carried along), so the value, nearly all
    of it, lands in its own ``bytes`` straight from the file with no second copy.
    """
    left, seen = length, 0

    def take(n: int) -> bytes | None:
        nonlocal left, seen
        data = f.read(n) if 0 <= n <= left else b""
        if len(data) != n:
            return None
        left -= n
        seen = zlib.crc32(data, seen)
        return data

    head = take(BODY_HEAD.size)
    if head is None:
        return None
    offset, ts, key_len, n_headers = BODY_HEAD.unpack(head)
    key = take(key_len)
    raw_headers = []
    for _ in range(n_headers):
        sizes = take(HEADER_HEAD.size)
        if sizes is None:
            return None
        name_len, value_len = HEADER_HEAD.unpack(sizes)
        raw_headers.append((take(name_len), take(value_len)))
    value = take(left)
    pieces = [key, value, *(p for pair in raw_headers for p in pair)]
    if seen != crc or any(p is None for p in pieces):
        return None
    return Entry(offset, key, value, tuple((n.decode(), v) for n, v in raw_headers), ts)


@dataclass
class _Segment:
    base: int
    path: Path
    positions: array = field(default_factory=lambda: array("q"))  # byte position per entry
    end: int = 0  # byte position after the last known-good frame
    scanned: bool = False
    inode: int = -1  # the file's identity: a file recreated under the same name is new
    head: bytes = b""  # its first frame's length and CRC: an inode number can be reused

    def same_file(self) -> bool:
        """Is the file at ``path`` still the one indexed (same first frame, not shorter)?"""
        if len(self.head) < FRAME_HEAD.size:
            return True  # nothing indexed from it yet
        try:
            with open(self.path, "rb") as f:
                return f.read(FRAME_HEAD.size) == self.head and \
                    os.fstat(f.fileno()).st_size >= self.end
        except FileNotFoundError:
            return True  # gone: the caller's listing decides

    @property
    def count(self) -> int:
        return len(self.positions)


class FileLog(Log):
    """One log in a folder of segment files; see the module docstring."""

    def __init__(
        self,
        namespace: str,
        name: str,
        path: Path,
        segment_size_bytes: int,
        group_commit_interval_ms: float,
    ) -> None:
        super().__init__(namespace, name)
        self.path = path
        self.segment_size_bytes = segment_size_bytes
        self.group_commit_interval_ms = group_commit_interval_ms
        self._segments: list[_Segment] = []
        self._low = 0
        self._state = threading.Lock()  # guards _segments and _low
        self._pending: list[tuple[Sequence[Record], Future]] = []
        self._cond = threading.Condition()
        self._writer: threading.Thread | None = None
        self._closed = False
        self._last_sync = 0.0
        self._write_fd: int | None = None
        self._acked = 0  # every offset below is acknowledged (the acked file)
        self._ack_seq = 0
        with self._locked(fcntl.LOCK_SH):
            self._refresh(exclusive=False)

    # -- locking and catching up ------------------------------------------------

    def _locked(self, mode: int) -> _FileLock:
        return _FileLock(self.path / "lock", mode, self)

    def _read_acked(self) -> tuple[int, int]:
        """(seq, next_offset) of the newest valid slot of ``acked``; (0, 0) if none."""
        try:
            raw = (self.path / ACK_FILE).read_bytes()
        except FileNotFoundError:
            return 0, 0
        best = (0, 0)
        for i in range(2):
            chunk = raw[i * ACK_SLOT.size : (i + 1) * ACK_SLOT.size]
            if len(chunk) == ACK_SLOT.size:
                seq, nxt, crc = ACK_SLOT.unpack(chunk)
                if zlib.crc32(chunk[:16]) == crc:
                    best = max(best, (seq, nxt))
                    continue
            # slots are written whole; slot 1 first, so a slot 0 never written is zeros
            unwritten = not chunk if i else (chunk == bytes(ACK_SLOT.size) and len(raw) > len(chunk))
            if not unwritten:
                self._note(f"{ACK_FILE} file: slot {i} (bytes {i * ACK_SLOT.size}-"
                           f"{(i + 1) * ACK_SLOT.size - 1}) is damaged; the other slot is used")
        if raw and best == (0, 0):
            self._note(f"{ACK_FILE} file is damaged (no valid slot, {len(raw)} bytes): "
                       "acknowledged entries are not protected until the next append")
        return best

    def _write_ack(self, next_offset: int) -> None:
        """Durably record that every offset below ``next_offset`` is acknowledged."""
        self._ack_seq += 1
        body = struct.pack(">QQ", self._ack_seq, next_offset)
        slot = ACK_SLOT.pack(self._ack_seq, next_offset, zlib.crc32(body))
        fd = os.open(self.path / ACK_FILE, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, slot, (self._ack_seq % 2) * ACK_SLOT.size)
            os.fdatasync(fd)
        finally:
            os.close(fd)
        self._acked = next_offset

    def _note(self, problem: str) -> None:
        if problem not in self.repairs:
            log.warning("namespace=%s log=%s: %s", self.namespace, self.name, problem)
            self.repairs.append(problem)

    def _read_low(self, first_base: int) -> int:
        """The low watermark file (``offset crc32``), or the first segment's base if damaged."""
        low_path = self.path / LOW_FILE
        try:
            raw = low_path.read_bytes()
        except FileNotFoundError:
            return first_base
        text, _, crc = raw.decode("latin-1").partition(" ")
        if is_decimal(text) and crc == f"{zlib.crc32(text.encode()):08x}":
            return int(text)
        self._note(f"{LOW_FILE} file is damaged ({raw[:40]!r}); using the first segment's "
                   f"base {first_base} (entries below the real low watermark may be listed)")
        return first_base

    def _refresh(self, exclusive: bool) -> None:
        """Catch up with what any process appended or deleted (caller holds the flock)."""
        self._ack_seq, self._acked = self._read_acked()
        with os.scandir(self.path) as it:  # inodes: a recreated file is a new segment
            found = sorted((e.name, e.inode()) for e in it if e.name.endswith(SEGMENT_SUFFIX)
                           and is_decimal(e.name[: -len(SEGMENT_SUFFIX)]))
        bases = [int(n[: -len(SEGMENT_SUFFIX)]) for n, _ in found]
        low = self._read_low(bases[0] if bases else 0)
        with self._state:
            known = {(s.base, s.inode): s for s in self._segments}
            segments = [known.get((b, ino)) or _Segment(b, self.path / n, inode=ino)
                        for b, (n, ino) in zip(bases, found, strict=True)]
            if segments and not segments[-1].same_file():
                # a new file under the old name and inode number (a recreated log), or the
                # old one shorter than indexed (restored from a copy): the files are the
                # truth, the index is rebuilt from them, and the `acked` rule tells a log
                # that lost acknowledged entries
                segments[-1] = _Segment(segments[-1].base, segments[-1].path,
                                        inode=segments[-1].inode)
            if not segments:
                first = self.path / f"{low:020d}{SEGMENT_SUFFIX}"
                first.touch()
                fsync_dir(self.path)
                segments = [_Segment(low, first, inode=first.stat().st_ino)]
            self._segments = segments
            self._low = max(low, segments[0].base)
            for seg, nxt in itertools.pairwise(segments):
                if seg.base + seg.count != nxt.base:
                    seg.scanned = False  # sealed by another process: rescan when read
            self._scan(segments[-1], exclusive=exclusive, tail=True)

    def _scan(self, seg: _Segment, exclusive: bool, tail: bool,
              end_offset: int | None = None) -> None:
        """Index frames of ``seg`` from its known end; handle a torn tail.

        A sealed segment (``end_offset``: the next segment's base) must hold exactly
        the offsets up to it.
        """
        try:
            size = os.path.getsize(seg.path)
        except FileNotFoundError:
            raise OffsetOutOfRange(
                f"segment {seg.path.name} was deleted (below the low watermark)",
                namespace=self.namespace, log=self.name,
            ) from None
        if size < seg.end:
            raise CorruptEntryError(
                f"segment {seg.path.name} shrank to {size} bytes below its indexed end "
                f"{seg.end} (cut)", namespace=self.namespace, log=self.name)
        if seg.end >= size and seg.scanned:
            return
        with open(seg.path, "rb") as f:
            if not seg.head:
                seg.head = f.read(FRAME_HEAD.size)
            f.seek(seg.end)
            pos, expect = seg.end, seg.base + seg.count
            # Positions are kept aside and indexed only once the scan succeeded: a scan
            # that raises (corruption) must leave the index as it was, or the next scan
            # would resume at the old end with a wrong expected offset and report a
            # wrong place (and the high watermark would count unchecked frames).
            found = array("q")
            while pos < size:
                head = f.read(FRAME_HEAD.size)
                bad = None
                if len(head) < FRAME_HEAD.size:
                    bad = "partial frame header"
                else:
                    length, crc = FRAME_HEAD.unpack(head)
                    if not MIN_BODY <= length <= MAX_BODY or pos + 8 + length > size:
                        bad = f"frame length {length} runs past the end of the segment"
                    else:
                        body = f.read(length)
                        if zlib.crc32(body) != crc:
                            bad = "CRC mismatch"
                        elif BODY_HEAD.unpack_from(body)[0] != expect:
                            bad = f"frame holds offset {BODY_HEAD.unpack_from(body)[0]}, expected {expect}"
                if bad is not None:
                    frame_end = pos + 8 + (length if len(head) == 8 else 0)
                    if tail and expect < self._acked:
                        raise CorruptEntryError(
                            f"{bad} at byte {pos} of segment {seg.path.name} (expected offset "
                            f"{expect}): entries below {self._acked} were acknowledged, so "
                            "this is damage, not a torn write",
                            namespace=self.namespace, log=self.name, offset=expect)
                    if not tail or not self._only_tail(f, pos, frame_end, size, expect):
                        raise CorruptEntryError(
                            f"{bad} at byte {pos} of segment {seg.path.name} "
                            f"(expected offset {expect})",
                            namespace=self.namespace, log=self.name,
                        )
                    if exclusive:
                        log.warning(
                            "namespace=%s log=%s: truncating torn tail of %s at byte %d "
                            "(%d bytes, %s); no acknowledged entry is lost",
                            self.namespace, self.name, seg.path.name, pos, size - pos, bad,
                        )
                        os.truncate(seg.path, pos)
                        with open(seg.path, "rb+") as g:
                            os.fsync(g.fileno())
                    break
                found.append(pos)
                pos += 8 + length
                expect += 1
            if tail and expect < self._acked:
                raise CorruptEntryError(
                    f"the log ends at offset {expect} (byte {pos} of segment {seg.path.name}) "
                    f"but entries below {self._acked} were acknowledged: entries are missing",
                    namespace=self.namespace, log=self.name, offset=expect)
            if end_offset is not None and expect != end_offset:
                raise CorruptEntryError(
                    f"segment {seg.path.name} ends at offset {expect} (byte {pos}) but the "
                    f"next segment starts at offset {end_offset}: entries are missing",
                    namespace=self.namespace, log=self.name, offset=expect)
            seg.positions.extend(found)
            seg.end = pos
            seg.scanned = True

    @staticmethod
    def _only_tail(f: Any, pos: int, frame_end: int, size: int, expect: int) -> bool:
        """A bad frame at ``pos`` is a torn tail if only zeros follow it, or if it
        reaches the end and no valid frame of a later offset starts after it."""
        if frame_end < size:
            f.seek(frame_end)
            while chunk := f.read(READ_CHUNK_BYTES):
                if chunk.strip(b"\0"):
                    return False
            return True
        # A damaged length field makes a frame in the middle seem to run past the end
        # of the segment, exactly like a torn last write; truncating it would drop every
        # acknowledged entry after it. A torn write has nothing valid after it.
        return not FileLog._frame_follows(f, pos, size, expect + 1)

    @staticmethod
    def _frame_follows(f: Any, pos: int, size: int, offset: int) -> bool:
        """Does a complete, CRC-valid frame holding ``offset`` start after byte ``pos``?

        Looks for the big-endian offset (the first field of a body) with mmap, so the
        segment is never loaded into memory; only an error path runs it.
        """
        needle = struct.pack(">Q", offset)
        with mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as m:
            hit = m.find(needle, pos + FRAME_HEAD.size + 1)
            while hit != -1:
                head = hit - FRAME_HEAD.size
                if head > pos:
                    length, crc = FRAME_HEAD.unpack_from(m, head)
                    fits = MIN_BODY <= length <= size - hit
                    if fits and zlib.crc32(m[hit : hit + length]) == crc:
                        return True
                hit = m.find(needle, hit + 1)
        return False

    # -- appending ------------------------------------------------------------

    def append(self, records: Sequence[Record]) -> list[int]:
        return self.append_async(records).result()

    def append_async(self, records: Sequence[Record]) -> Future[list[int]]:
        fut: Future[list[int]] = Future()
        if not records:
            fut.set_result([])
            return fut
        with self._cond:
            if self._closed:
                raise BackendUnavailable("log is closed", namespace=self.namespace, log=self.name)
            self._pending.append((records, fut))
            if self._writer is None:
                self._writer = threading.Thread(
                    target=self._write_loop, name=f"durablewal-{self.name}", daemon=True
                )
                self._writer.start()
            self._cond.notify()
        return fut

    def _write_loop(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if not self._pending and self._closed:
                    return
            wait_s = self._last_sync + self.group_commit_interval_ms / 1000 - time.monotonic()
            if wait_s > 0:
                time.sleep(wait_s)
            with self._cond:
                batch, self._pending = self._pending, []
            try:
                with storage_errors("appending", self.path, namespace=self.namespace,
                                    log=self.name):
                    offsets = self._write_batch([r for r, _ in batch])
            except BaseException as exc:  # noqa: BLE001 - forwarded to every waiter, none hangs
                for _, fut in batch:
                    fut.set_exception(exc)
                continue
            for (_, fut), offs in zip(batch, offsets, strict=False):
                fut.set_result(offs)

    def _write_batch(self, groups: list[Sequence[Record]]) -> list[list[int]]:
        with self._locked(fcntl.LOCK_EX):
            self._refresh(exclusive=True)
            with self._state:
                seg = self._segments[-1]
                next_offset = seg.base + seg.count
            if seg.end >= self.segment_size_bytes and seg.count:
                seg = self._roll(next_offset)
            now = int(time.time() * 1000)
            buffers: list = []
            result, positions, end = [], [], seg.end
            for records in groups:
                offs = []
                for record in records:
                    head, value = frame_parts(next_offset, now, record)
                    positions.append(end)
                    buffers += (head, value)
                    end += len(head) + len(value)
                    offs.append(next_offset)
                    next_offset += 1
                result.append(offs)
            fd = os.open(seg.path, os.O_WRONLY)
            try:
                os.lseek(fd, seg.end, os.SEEK_SET)
                write_all(fd, buffers)
                os.fdatasync(fd)
            finally:
                os.close(fd)
            self._write_ack(next_offset)  # only now is the batch acknowledged
            self._last_sync = time.monotonic()
            with self._state:
                if seg.end == 0:
                    seg.head = bytes(buffers[0][: FRAME_HEAD.size])
                seg.positions.extend(positions)
                seg.end = end
        return result

    def _roll(self, base: int) -> _Segment:
        path = self.path / f"{base:020d}{SEGMENT_SUFFIX}"
        path.touch()
        fsync_dir(self.path)
        seg = _Segment(base, path, scanned=True, inode=path.stat().st_ino)
        with self._state:
            self._segments.append(seg)
        return seg

    # -- reading --------------------------------------------------------------

    def _bounds(self) -> tuple[int, int, list[_Segment]]:
        with self._locked(fcntl.LOCK_SH):
            self._refresh(exclusive=False)
        with self._state:
            last = self._segments[-1]
            return self._low, last.base + last.count, list(self._segments)

    def low_watermark(self) -> int:
        return self._bounds()[0]

    def high_watermark(self) -> int:
        return self._bounds()[1]

    def read(self, start: int, end: int | None = None) -> Iterator[Entry]:
        low, high, segments = self._bounds()
        self.check_range(start, low, high)
        stop = high if end is None else min(end, high)
        return self._iter(start, stop, segments)

    def _iter(self, start: int, stop: int, segments: list[_Segment]) -> Iterator[Entry]:
        offset = start
        for i, seg in enumerate(segments):
            if offset >= stop:
                return
            seg_end = segments[i + 1].base if i + 1 < len(segments) else stop
            if offset >= seg_end:
                continue
            if not seg.scanned:
                with self._state:
                    self._scan(seg, exclusive=False, tail=False,
                               end_offset=segments[i + 1].base if i + 1 < len(segments) else None)
            if offset >= seg.base + seg.count:
                raise CorruptEntryError(
                    f"segment {seg.path.name} holds offsets [{seg.base}, "
                    f"{seg.base + seg.count}), offset {offset} is missing",
                    namespace=self.namespace, log=self.name, offset=offset)
            upto = min(stop, seg_end, seg.base + seg.count)
            yield from self._read_segment(seg, offset, upto)
            offset = upto

    def _read_segment(self, seg: _Segment, start: int, stop: int) -> Iterator[Entry]:
        try:
            f = open(seg.path, "rb", buffering=READ_CHUNK_BYTES)
        except FileNotFoundError:
            raise OffsetOutOfRange(
                f"offset {start} was deleted while reading (segment {seg.path.name})",
                namespace=self.namespace, log=self.name,
            ) from None
        with f:
            pos = seg.positions[start - seg.base]
            f.seek(pos)
            for offset in range(start, stop):
                # The index knows where this frame ends: a damaged length field must fail
                # the check below, not make f.read allocate up to 4 GiB (MemoryError) first.
                nxt = offset - seg.base + 1
                limit = seg.positions[nxt] if nxt < len(seg.positions) else seg.end
                head = f.read(FRAME_HEAD.size)
                length, crc = FRAME_HEAD.unpack(head) if len(head) == FRAME_HEAD.size else (-1, 0)
                fits = 0 <= length <= limit - pos - FRAME_HEAD.size
                entry = read_body(f, length, crc) if fits else None
                if entry is None:
                    raise CorruptEntryError(
                        f"CRC or length mismatch at byte {pos} of segment {seg.path.name}",
                        namespace=self.namespace, log=self.name, offset=offset,
                    )
                if entry.offset != offset:
                    raise CorruptEntryError(
                        f"frame at byte {pos} of segment {seg.path.name} holds offset "
                        f"{entry.offset}", namespace=self.namespace, log=self.name, offset=offset,
                    )
                pos += 8 + length
                yield entry

    # -- deleting and closing ---------------------------------------------------

    def delete_before(self, offset: int) -> None:
        with storage_errors("deleting", self.path, namespace=self.namespace, log=self.name):
            self._delete_before(offset)

    def _delete_before(self, offset: int) -> None:
        with self._locked(fcntl.LOCK_EX):
            self._refresh(exclusive=True)
            with self._state:
                last = self._segments[-1]
                target = min(offset, last.base + last.count)
                if target <= self._low:
                    return
                doomed = [s for s, nxt in itertools.pairwise(self._segments) if nxt.base <= target]
            text = str(target).encode()
            write_atomic(self.path / LOW_FILE, text + f" {zlib.crc32(text):08x}".encode())
            for seg in doomed:
                seg.path.unlink(missing_ok=True)
            if doomed:
                fsync_dir(self.path)
            gone = {id(s) for s in doomed}
            with self._state:
                self._low = target
                self._segments = [s for s in self._segments if id(s) not in gone]

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._writer is not None:
            self._writer.join()


class _FileLock:
    """``with`` wrapper over flock(2) on a fresh open file description."""

    def __init__(self, path: Path, mode: int, owner: FileLog) -> None:
        self.path, self.mode, self.owner = path, mode, owner

    def __enter__(self) -> None:
        where = {"namespace": self.owner.namespace, "log": self.owner.name}
        self.fd: int | None = None
        try:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:
            raise LogNotFound("log folder is gone", **where) from None
        except OSError as exc:
            if self.mode != fcntl.LOCK_SH or exc.errno not in (errno.EROFS, errno.EACCES,
                                                               errno.EPERM):
                with storage_errors("locking the log for writing", self.path, **where):
                    raise
            # a read-only WAL (a read-only mount, a snapshot copy) is read without a
            # lock file of its own: no process can be writing to it
            try:
                self.fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                return
        fcntl.flock(self.fd, self.mode)

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the description releases the lock


class FileLogStore(LogStore):
    """The logs of one namespace below ``{root}/{namespace}/``."""

    type_name = "file"
    OPTIONS = ("path", "segment_size_bytes", "group_commit_interval_ms")

    def __init__(
        self,
        namespace: str,
        path: str | os.PathLike[str] | None = None,
        segment_size_bytes: int = 64 << 20,
        group_commit_interval_ms: float = 10.0,
        **unknown: Any,
    ) -> None:
        super().__init__(namespace)
        if unknown:
            raise ConfigError(
                f"unknown file backend options {sorted(unknown)}; valid: {', '.join(self.OPTIONS)}"
            )
        if path is None:
            raise ConfigError("the file backend needs a path (the log's root folder)")
        self.root = Path(path)
        if self.root.exists() and not self.root.is_dir():
            raise ConfigError(f"path {str(self.root)!r} is a file, not a folder: the file "
                              "backend keeps a folder per namespace below it")
        try:
            self.segment_size_bytes = int(segment_size_bytes)
            self.group_commit_interval_ms = float(group_commit_interval_ms)
        except (TypeError, ValueError):
            raise ConfigError(
                f"segment_size_bytes={segment_size_bytes!r} and group_commit_interval_ms="
                f"{group_commit_interval_ms!r} must be numbers", namespace=namespace) from None
        if self.segment_size_bytes < 1024:
            raise ConfigError(f"segment_size_bytes {segment_size_bytes} is below 1024")
        self.folder = self.root / namespace
        self._logs: dict[str, FileLog] = {}
        self._lock = threading.Lock()

    @classmethod
    def list_namespaces(cls, config: Mapping[str, Any]) -> list[str]:
        root = Path(config.get("path", ""))
        if not root.is_dir():
            raise LogNotFound(f"no WAL folder at {root}")
        return sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))

    def sibling_namespaces(self) -> list[str]:
        return self.list_namespaces({"path": self.root}) if self.root.is_dir() else []

    def location(self) -> str:
        return f"folder {self.root}" + ("" if self.root.is_dir() else " (which does not exist)")

    def list_logs(self) -> list[str]:
        if not self.folder.is_dir():
            return []
        return sorted(
            p.name for p in self.folder.iterdir() if p.is_dir() and p.name != "snapshots"
        )

    def open_log(self, name: str, create: bool = True) -> Log:
        check_name("log", name)
        with self._lock:
            existing = self._logs.get(name)
            if existing is not None:
                return existing
            path = self.folder / name
            if not path.is_dir():
                if not create:
                    raise LogNotFound("log does not exist", namespace=self.namespace, log=name)
            with storage_errors("opening the log", path, namespace=self.namespace, log=name):
                if not path.is_dir():
                    self._mkdirs(path)
                log_ = FileLog(self.namespace, name, path, self.segment_size_bytes,
                               self.group_commit_interval_ms)
            self._logs[name] = log_
            return log_

    def _mkdirs(self, path: Path) -> None:
        """Create folders and fsync each parent, so a crash cannot forget them."""
        missing = []
        p = path
        while not p.exists():
            missing.append(p)
            p = p.parent
        for folder in reversed(missing):
            folder.mkdir(exist_ok=True)
            fsync_dir(folder.parent)

    def _snapshot_path(self, name: str, version: int) -> Path:
        check_name("snapshot", name)
        return self.folder / "snapshots" / f"{name}.{check_version(version):020d}"

    def write_snapshot(self, name: str, version: int, data: bytes) -> None:
        path = self._snapshot_path(name, version)
        with storage_errors("writing a snapshot", path, namespace=self.namespace):
            if not path.parent.is_dir():
                self._mkdirs(path.parent)
            write_atomic(path, data)

    def snapshot_versions(self, name: str) -> list[int]:
        check_name("snapshot", name)
        folder = self.folder / "snapshots"
        if not folder.is_dir():
            return []
        prefix = name + "."
        return sorted(int(p.name[len(prefix):]) for p in folder.iterdir()
                      if p.name.startswith(prefix) and is_decimal(p.name[len(prefix):]))

    def read_snapshot_version(self, name: str, version: int) -> bytes | None:
        try:
            return self._snapshot_path(name, version).read_bytes()
        except FileNotFoundError:
            return None

    def delete_snapshot(self, name: str, version: int) -> None:
        path = self._snapshot_path(name, version)
        with storage_errors("deleting a snapshot", path, namespace=self.namespace):
            if path.exists():
                path.unlink(missing_ok=True)
                fsync_dir(path.parent)

    def close(self) -> None:
        with self._lock:
            logs, self._logs = list(self._logs.values()), {}
        for log_ in logs:
            log_.close()
