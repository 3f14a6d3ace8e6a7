"""Durable file operations of the file log: fsync'd folders, atomic replacement,
vectored writes, flock(2), and OS errors as typed errors."""

from __future__ import annotations

import errno
import fcntl
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pyspark_durable.errors import BackendUnavailable, LogNotFound

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


def make_dirs(path: Path) -> None:
    """Create folders and fsync each parent, so a crash cannot forget them."""
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    for folder in reversed(missing):
        folder.mkdir(exist_ok=True)
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
        raise BackendUnavailable(f"{what} failed at {path}: [Errno {exc.errno}] "
                                 f"{exc.strerror}{hint}", **where) from exc


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

    def __init__(self, path: Path, mode: int, **where: Any) -> None:
        self.path, self.mode, self.where = path, mode, where

    def __enter__(self) -> None:
        self.fd: int | None = None
        try:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
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
                return
        fcntl.flock(self.fd, self.mode)

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the description releases the lock
