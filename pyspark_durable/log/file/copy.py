"""A consistent copy of a file log store's files while its writers, readers and cleaners
run: a *capture* (a short read of every log's metadata under its lock, every file it
needs opened), then the copy of the captured bytes with no lock held against writers.

What can change under a copy, and what keeps each change out of it:

* **Appends** add bytes past a log's acknowledged end (``acked``), under the log's
  exclusive lock, and a writer cuts off a torn tail only past that end. A log is
  captured under its shared lock, so no append is half done: its ``acked`` mark, its
  ``low_watermark``, its ``freed`` records and the sizes of its segments are read as one
  state, and the bytes below those sizes never change afterwards (but for punching).
* **Deletion** (``delete_before``) replaces ``low_watermark`` and unlinks whole segments.
  The capture opens every segment (and snapshot) it lists; an unlinked file's bytes stay
  readable through its descriptor, so a copy is of the files as they were at the
  capture, however long it takes.
* **Freeing** (``free``) punches holes in place: the one change to bytes below a log's
  end. A copy holds each log's copy lock (:data:`COPY_LOCK`, shared) from before its
  capture until its bytes are written, and :meth:`.FileLog.free` punches only when it
  gets that lock exclusively without waiting; otherwise it records the frames as freed
  (they read as freed from then on) and leaves their holes to a later free. So a copy
  holds the cleaners' holes back, never a cleaner, a writer or a reader.
* **Snapshots** are written whole (a rename) and deleted whole (an unlink): listed and
  opened during the capture.

**The anchor.** The captures of a store's logs are not one instant: each log is captured
under its own lock, one after the other. The anchor log's shared lock is held from
before its own capture until every other log is captured, so nothing is appended to the
anchor in between: every record below the anchor's captured end was appended before any
other log was captured. Which log is the anchor, and why that order makes the copy
consistent, is the caller's (the WAL's commits log: wal/upkeep/backup.py); this module
knows logs and files, not steps.

The copy is written with the store's access (0700/0600 by default), sparse where the
source has holes, and every file and folder is fsync'd before :func:`write_capture`
returns. The ``lock`` files are made empty: the writers' state in them is of the
source's live writers (:mod:`.log`), and an empty one reads as nothing waiting past
the mark. Frames past a log's mark are copied as they lie and stay past the copy's mark
(readers of the copy never see them; its first writer cuts them off).
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from pyspark_durable.errors import LogNotFound
from pyspark_durable.log.base import is_decimal
from pyspark_durable.log.file.disk import (
    Access,
    FileLock,
    create_empty,
    create_file,
    fsync_dir,
    storage_errors,
    write_all,
)
from pyspark_durable.log.file.freed import FREED_FILE
from pyspark_durable.log.file.marks import ACK_FILE, LOW_FILE
from pyspark_durable.log.file.segments import SEGMENT_SUFFIX

COPY_LOCK = "copying"  # per log: shared by copies, taken exclusively (never waited for) to punch
LOG_LOCK = "lock"
SMALL_FILES = (ACK_FILE, LOW_FILE, FREED_FILE)  # read whole under the log's lock
COPY_CHUNK_BYTES = 1 << 20


@dataclass
class OpenFile:
    """A file of the source, opened at the capture: its name and the size it had then."""

    name: str
    fd: int
    size: int


@dataclass
class LogCapture:
    """One log as its shared lock saw it: the small files' bytes and its segments."""

    name: str
    small: dict[str, bytes] = field(default_factory=dict)
    segments: list[OpenFile] = field(default_factory=list)
    held: ExitStack = field(default_factory=ExitStack)  # its copy lock, its descriptors


@dataclass
class StoreCapture:
    """Every log of a namespace's folder, its snapshots and its reserve's size."""

    logs: list[LogCapture]  # the anchor's first
    snapshots: list[OpenFile]
    snapshot_folder: str | None
    reserve: tuple[str, int] | None  # (file name, size) of the preallocated reserve
    held: ExitStack = field(default_factory=ExitStack)

    def close(self) -> None:
        """Release every lock and descriptor the capture still holds."""
        for log_ in self.logs:
            log_.held.close()
        self.held.close()


def _open(path: Path, held: ExitStack) -> OpenFile:
    fd = os.open(path, os.O_RDONLY)
    held.callback(os.close, fd)
    return OpenFile(path.name, fd, os.fstat(fd).st_size)


def _read_log(folder: Path, capture: LogCapture) -> None:
    """Fill ``capture`` from ``folder``; the caller holds the log's shared lock (no
    append, deletion or free of the log runs meanwhile, and none is half done)."""
    for name in SMALL_FILES:
        try:
            capture.small[name] = (folder / name).read_bytes()
        except FileNotFoundError:
            continue  # a log from before the mark, nothing deleted or freed yet
    with os.scandir(folder) as it:
        names = sorted(e.name for e in it if e.name.endswith(SEGMENT_SUFFIX)
                       and is_decimal(e.name[: -len(SEGMENT_SUFFIX)]))
    # under the lock no deletion runs: every segment listed can be opened
    capture.segments = [_open(folder / name, capture.held) for name in names]


def _log_lock(folder: Path, capture: LogCapture, access: Access, namespace: str) -> FileLock:
    return FileLock(folder / LOG_LOCK, fcntl.LOCK_SH, access, namespace=namespace,
                    log=capture.name)


def _hold_copy_lock(folder: Path, capture: LogCapture, access: Access,
                    namespace: str) -> None:
    """Take the log's copy lock shared until the capture's ``held`` closes: a free that
    runs meanwhile records its frames but leaves their holes to a later free
    (:meth:`.FileLog.free`). A free punching now finishes first (it never waits)."""
    lock = FileLock(folder / COPY_LOCK, fcntl.LOCK_SH, access, namespace=namespace,
                    log=capture.name)
    lock.__enter__()
    capture.held.callback(lock.__exit__)


def capture_store(folder: Path, anchor: str, list_logs: Callable[[], list[str]],
                  snapshot_folder: str, reserve_file: str, access: Access,
                  namespace: str) -> StoreCapture:
    """Capture the logs of the namespace folder ``folder``: ``anchor`` first, its lock
    held while the logs are listed and each other one is captured, and the snapshots
    and the reserve's size meanwhile (the module docstring says why).

    The copy locks are taken before the anchor's lock: one waits for a free that is
    punching (a free that starts later punches nothing), and the anchor's lock holds
    the anchor's writers off for the metadata reads alone, never for a punch."""
    first = LogCapture(anchor)
    whole = StoreCapture([first], [], None, None)
    held: dict[str, LogCapture] = {anchor: first}  # every log whose copy lock is taken
    try:
        with storage_errors("capturing the files to copy", folder, namespace=namespace):
            if not (folder / anchor).is_dir():
                raise LogNotFound(f"no {anchor} log in {folder}", namespace=namespace,
                                  log=anchor)
            for name in [anchor, *sorted(set(list_logs()) - {anchor})]:
                capture = held.setdefault(name, LogCapture(name))
                _hold_copy_lock(folder / name, capture, access, namespace)
            with _log_lock(folder / anchor, first, access, namespace):
                _read_log(folder / anchor, first)
                snapshots = folder / snapshot_folder
                if snapshots.is_dir():
                    whole.snapshot_folder = snapshot_folder
                    for name in sorted(os.listdir(snapshots)):
                        if name.startswith("."):
                            continue  # a snapshot being written (renamed into place whole)
                        try:
                            whole.snapshots.append(_open(snapshots / name, whole.held))
                        except FileNotFoundError:
                            continue  # pruned since it was listed: a newer one replaced it
                # listed again under the anchor's lock: a log that anything below the
                # anchor's end refers to exists now (one made since the first listing
                # takes its copy lock here)
                for name in sorted(set(list_logs()) - {anchor}):
                    capture = held.get(name)
                    if capture is None:
                        capture = held[name] = LogCapture(name)
                        _hold_copy_lock(folder / name, capture, access, namespace)
                    whole.logs.append(capture)
                    with _log_lock(folder / name, capture, access, namespace):
                        _read_log(folder / name, capture)
            for name in set(held) - {c.name for c in whole.logs}:
                held[name].held.close()  # listed once, gone since: nothing to copy
            try:
                whole.reserve = (reserve_file, (folder / reserve_file).stat().st_size)
            except FileNotFoundError:
                whole.reserve = None  # released on a full disk; the copy's first pass makes it
    except BaseException:
        for capture in held.values():
            capture.held.close()
        whole.close()
        raise
    return whole


def _copy_file(source: OpenFile, dest: Path, access: Access) -> int:
    """Copy ``source``'s first ``size`` bytes to the new file ``dest``, leaving holes where
    the source has them (punched frames stay holes); fsync'd. The bytes written."""
    out = create_file(dest, access, os.O_WRONLY | os.O_EXCL)
    written = 0
    try:
        pos = 0
        while pos < source.size:
            try:
                start = os.lseek(source.fd, pos, os.SEEK_DATA)
                stop = min(source.size, os.lseek(source.fd, start, os.SEEK_HOLE))
            except OSError as exc:
                if exc.errno == errno.ENXIO:
                    break  # a hole up to the end (or the file is shorter now)
                if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
                    raise
                start, stop = pos, source.size  # no SEEK_DATA here: all of it is data
            at = start
            while at < stop:
                chunk = os.pread(source.fd, min(COPY_CHUNK_BYTES, stop - at), at)
                if not chunk:
                    break
                _pwrite_all(out, chunk, at)
                at += len(chunk)
                written += len(chunk)
            if at < stop:
                # shorter than captured: a torn tail past the mark was cut off since the
                # capture (nothing below a log's mark is ever cut); the rest stays a hole
                break
            pos = stop
        os.ftruncate(out, source.size)
        os.fsync(out)
    finally:
        os.close(out)
    return written


def _pwrite_all(fd: int, data: bytes, at: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, at)
        view, at = view[n:], at + n


def _write_small(dest: Path, data: bytes, access: Access) -> None:
    fd = create_file(dest, access, os.O_WRONLY | os.O_EXCL)
    try:
        write_all(fd, [data])
        os.fsync(fd)
    finally:
        os.close(fd)


def _make_folder(path: Path, access: Access) -> None:
    path.mkdir(mode=access.folder)
    os.chmod(path, access.folder)  # mkdir's mode passes through the umask


def write_capture(capture: StoreCapture, dest: Path, access: Access, namespace: str,
                  copied: Callable[[str, int], None] | None = None) -> int:
    """Write ``capture`` into the new folder ``dest`` (the namespace's folder of the copy)
    and fsync every file and folder; each log's copy lock and descriptors are released
    as soon as its bytes are written. Returns the bytes written; ``copied`` is told of
    each log (and ``snapshots``) with its bytes as it is done."""
    total = 0
    with storage_errors("writing the copy", dest, namespace=namespace):
        _make_folder(dest, access)
        for log_ in capture.logs:
            folder = dest / log_.name
            _make_folder(folder, access)
            done = 0
            for segment in log_.segments:
                done += _copy_file(segment, folder / segment.name, access)
            for name, data in log_.small.items():
                _write_small(folder / name, data, access)
                done += len(data)
            create_empty(folder / LOG_LOCK, access)
            fsync_dir(folder)
            log_.held.close()  # its holes may be punched again
            total += done
            if copied is not None:
                copied(log_.name, done)
        if capture.snapshot_folder is not None:
            folder = dest / capture.snapshot_folder
            _make_folder(folder, access)
            done = sum(_copy_file(s, folder / s.name, access) for s in capture.snapshots)
            fsync_dir(folder)
            total += done
            if copied is not None:
                copied(capture.snapshot_folder, done)
        if capture.reserve is not None:
            name, size = capture.reserve
            fd = create_file(dest / name, access, os.O_WRONLY | os.O_EXCL)
            try:
                os.posix_fallocate(fd, 0, size)
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(dest)
    return total
