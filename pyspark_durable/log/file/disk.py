"""Durable file operations of the file log: fsync'd folders, atomic replacement,
vectored writes, flock(2), OS errors as typed errors, and sizes that follow the disk.

Implementation notes (why):

* **Sizes follow the disk.** The cleaner frees whole segments only, so what it cannot
  free is about a segment per region: on a disk smaller than a few segments, retention
  would free nothing. The default segment is therefore 1/:data:`DISK_SHARE` of the
  file system, at most :data:`SEGMENT_BYTES_MAX` (so from 4 GiB up, 64 MiB as before).
* **A reserve for the records that free space.** A pass of the cleaner appends an
  ``expire`` and a ``clean`` record, replaces low watermarks and writes a snapshot
  before and while it frees anything: on a full disk each of those fails. Each
  namespace keeps a preallocated file (1/:data:`DISK_SHARE` of the disk, at most
  :data:`RESERVE_BYTES_MAX`) that those writers release on ``ENOSPC``; the cleaner
  re-creates it once it freed space (:mod:`pyspark_durable.wal.reserve`).
* **Private by default.** Every row of a WAL is in its files, so its folders are made
  0700 and its files 0600 (:data:`PRIVATE`; :data:`GROUP`: 0750 and 0640), as etcd does
  with its WAL. The mode is set on the new descriptor or folder, never left to the
  umask: a umask of 000 would widen it, one of 077 would take the group's access away.
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark_durable.errors import BackendUnavailable, ConfigError, DiskFull, LogNotFound

IOV_MAX = 1024  # buffers per writev(2) (Linux' UIO_MAXIOV)
DISK_SHARE = 64  # a default segment, and the reserve, are this fraction of the disk
SEGMENT_BYTES_MIN = 1024
SEGMENT_BYTES_MAX = 64 << 20
RESERVE_BYTES_MAX = 1 << 20  # a few records, low watermarks and a snapshot fit
FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


@dataclass(frozen=True)
class Access:
    """Who besides the owner may read a WAL: the mode of the folders and files it makes."""

    name: str
    folder: int
    file: int

    @property
    def allowed(self) -> int:
        """The permission bits a folder or file of this access may have (the folders')."""
        return self.folder

    def tighten_command(self, path: Path) -> str:
        """The shell command that takes every wider bit away below ``path``."""
        bits = "go-rwx" if self is PRIVATE else "g-w,o-rwx"
        return f"chmod -R {bits} {path}"


PRIVATE = Access("private", 0o700, 0o600)  # the owner only (the default)
GROUP = Access("group", 0o750, 0o640)  # and the file's group may read
ACCESSES = {a.name: a for a in (PRIVATE, GROUP)}


def access_named(name: str | Access) -> Access:
    """The :class:`Access` named ``name`` (``private`` or ``group``, any case)."""
    if isinstance(name, Access):
        return name
    found = ACCESSES.get(str(name).strip().lower())
    if found is None:
        raise ConfigError(f"access={name!r} is not one of {', '.join(ACCESSES)}: `private` "
                          "makes the WAL's folders 0700 and files 0600, `group` 0750 and 0640")
    return found


def open_or_create(path: Path | str, access: Access,
                   flags: int = os.O_WRONLY) -> tuple[int, bool]:
    """Open ``path`` with ``flags``, creating it with the mode of ``access`` (exactly: the
    umask neither widens nor narrows it); an existing file keeps its mode. Also whether
    it was missing when looked for: then this call or another process made it just now,
    and a caller that relies on it fsyncs its folder.

    The file is opened as it is first: the lock and the marks are opened at every append
    and almost always exist, and a create tried first would fail each time."""
    try:
        return os.open(path, flags), False
    except FileNotFoundError:
        pass
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, access.file)
    except FileExistsError:
        return os.open(path, flags), True  # another process made it meanwhile
    try:
        os.fchmod(fd, access.file)
    except BaseException:
        os.close(fd)
        raise
    return fd, True


def create_file(path: Path | str, access: Access, flags: int = os.O_WRONLY) -> int:
    """:func:`open_or_create`'s descriptor alone."""
    return open_or_create(path, access, flags)[0]


def size_of(fd: int) -> int:
    """The size of the open file ``fd``, without a stat.

    A file the log writes and syncs at every append is never stat'd on that path: a
    stat asks for the file's times, after which Linux (6.13 on) gives the next write a
    fine-grained time, and the fdatasync after it commits that to ext4's journal. That
    cost 30 us of CPU per sync here (Linux 6.18, ext4), 4 syncs a commit. Seeking to
    the end reads the size and no time."""
    return os.lseek(fd, 0, os.SEEK_END)


def file_size(path: Path | str) -> int:
    """The size of the file at ``path``, without a stat (:func:`size_of` says why)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return size_of(fd)
    finally:
        os.close(fd)


def read_small(path: Path | str) -> bytes:
    """A small file's bytes, read without a buffered file object: an open, reads until
    the end, a close (the marks and the segment heads are read at every append)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def create_empty(path: Path, access: Access) -> None:
    """Create the empty file ``path`` (or keep it, as ``touch`` does) with ``access``."""
    os.close(create_file(path, access))


def fsync_dir(path: Path) -> None:
    """Make a created, renamed or deleted directory entry durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _replace_atomic(path: Path, fill: Callable[[int], None], access: Access) -> None:
    """Replace ``path`` with a file ``fill`` writes to a descriptor, so that a crash
    leaves the old or the new file; a failure (disk full, read-only) leaves no
    temporary file behind."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, access.file)
        try:
            os.fchmod(fd, access.file)  # the umask's part, and a stale file's mode
            fill(fd)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def write_atomic(path: Path, data: bytes, access: Access) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new file."""
    _replace_atomic(path, lambda fd: write_all(fd, [data]), access)


def preallocate_atomic(path: Path, size_bytes: int, access: Access) -> None:
    """Create ``path`` holding ``size_bytes`` allocated (not written) bytes, whole or not
    at all: a reserve that fits only in part would promise room it does not hold.

    On a file system that cannot allocate without writing (ZFS) it may hold no room.
    """
    _replace_atomic(path, lambda fd: os.posix_fallocate(fd, 0, size_bytes), access)


def disk_bytes(path: Path) -> int:
    """Size of the file system ``path`` is on (or will be: its nearest existing parent)."""
    existing = path.absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    with storage_errors("measuring the file system", existing):
        st = os.statvfs(existing)
    return st.f_blocks * st.f_frsize


def _disk_share(disk: int, cap: int) -> int:
    """1/:data:`DISK_SHARE` of the disk, at most ``cap``; ``cap`` if the file system does
    not say its size (some FUSE mounts report 0 blocks)."""
    return min(cap, disk // DISK_SHARE) if disk > 0 else cap


def default_segment_bytes(disk: int) -> int:
    """A region's segment size when none is given: 1/64 of the disk, at most 64 MiB."""
    return max(SEGMENT_BYTES_MIN, _disk_share(disk, SEGMENT_BYTES_MAX))


def reserve_bytes(disk: int) -> int:
    """Room a namespace keeps for the records that free space: 1/64 of the disk, at most
    1 MiB, and never less than a few blocks (a record, a low watermark, a snapshot)."""
    return max(16 << 10, _disk_share(disk, RESERVE_BYTES_MAX))


def make_dirs(path: Path, access: Access) -> None:
    """Create folders with the mode of ``access`` and fsync each parent, so a crash
    cannot forget them; folders that exist keep their mode."""
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=access.folder)
        except FileExistsError:
            pass  # another process made it: its mode is that process's
        else:
            os.chmod(folder, access.folder)  # mkdir's mode passes through the umask
        fsync_dir(folder.parent)


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
        kind = DiskFull if exc.errno in FULL_ERRNOS else BackendUnavailable
        raise kind(f"{what} failed at {path}: [Errno {exc.errno}] {exc.strerror}{hint}",
                   **where) from exc


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


class FileLock:
    """``with`` wrapper over flock(2) on a fresh open file description."""

    def __init__(self, path: Path, mode: int, access: Access, **where: Any) -> None:
        self.path, self.mode, self.access, self.where = path, mode, access, where

    def __enter__(self) -> FileLock:
        self.fd: int | None = None
        self.contended = False
        try:
            self.fd = create_file(self.path, self.access, os.O_RDWR)
        except FileNotFoundError:
            raise LogNotFound("log folder is gone", **self.where) from None
        except OSError as exc:
            if self.mode != fcntl.LOCK_SH or exc.errno not in (errno.EROFS, errno.EACCES,
                                                               errno.EPERM):
                with storage_errors("locking the log for writing", self.path, **self.where):
                    raise
            # a read-only WAL (a read-only mount, a snapshot copy) is read without a
            # lock file of its own: no process can be writing to it
            try:
                self.fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                return self
        try:
            fcntl.flock(self.fd, self.mode | fcntl.LOCK_NB)
        except BlockingIOError:
            self.contended = True  # another holds it: a writer then shares its sync
            fcntl.flock(self.fd, self.mode)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the description releases the lock
