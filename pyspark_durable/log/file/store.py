"""The file log store: the logs and snapshots of one namespace below ``{root}/{namespace}/``,
and the namespace's reserve (``cleaner.reserve``, see :mod:`.disk`)."""

from __future__ import annotations

import logging
import os
import stat
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pyspark_durable.errors import ConfigError, DiskFull, LogNotFound
from pyspark_durable.log.base import (
    REGION_PREFIX,
    UNVERSIONED,
    Log,
    LogStore,
    Reserve,
    check_name,
    check_version,
    is_decimal,
)
from pyspark_durable.log.file.copy import StoreCapture, capture_store, write_capture
from pyspark_durable.log.file.disk import (
    PRIVATE,
    SEGMENT_BYTES_MIN,
    Access,
    access_named,
    default_segment_bytes,
    disk_bytes,
    fsync_dir,
    make_dirs,
    preallocate_atomic,
    reserve_bytes,
    storage_errors,
    write_atomic,
)
from pyspark_durable.log.file.log import FileLog
from pyspark_durable.log.locations import backend_of_path

log = logging.getLogger(__package__)

SNAPSHOTS = "snapshots"
NAMED_SEGMENT_BYTES = 512 << 10  # segments of logs that are not regions: an open scans the
# last one, so at most about as many records as a 1,000-step namespace holds
RESERVE_FILE = "cleaner.reserve"  # the "." keeps it apart from every log name


class FileLogStore(LogStore):
    """The logs of one namespace below ``{root}/{namespace}/``."""

    type_name = "file"
    OPTIONS = ("path", "segment_size_bytes", "group_commit_interval_ms", "access")
    # a flipped byte on a local disk is the fault a frame meets (its CRC tells); a second
    # copy in the same append goes out in the same write and fdatasync: bytes, not syncs
    record_copies = 2

    def __init__(
        self,
        namespace: str,
        path: str | os.PathLike[str] | None = None,
        segment_size_bytes: int | None = None,
        group_commit_interval_ms: float = 10.0,
        access: str | Access = PRIVATE,
        **unknown: Any,
    ) -> None:
        super().__init__(namespace)
        if unknown:
            raise ConfigError(
                f"unknown file backend options {sorted(unknown)}; valid: {', '.join(self.OPTIONS)}"
            )
        if path is None:
            raise ConfigError("the file backend needs a path (the log's root folder)")
        if backend_of_path(str(path)) is not None:
            raise ConfigError(f"path {str(path)!r} is an S3 location, not a folder: open it "
                              "with the s3 backend", namespace=namespace)
        self.root = Path(path)
        self.access = access_named(access)  # the mode of every folder and file made
        if self.root.exists() and not self.root.is_dir():
            raise ConfigError(f"path {str(self.root)!r} is a file, not a folder: the file "
                              "backend keeps a folder per namespace below it")
        try:
            self.group_commit_interval_ms = float(group_commit_interval_ms)
            given = None if segment_size_bytes is None else int(segment_size_bytes)
        except (TypeError, ValueError):
            raise ConfigError(
                f"segment_size_bytes={segment_size_bytes!r} and group_commit_interval_ms="
                f"{group_commit_interval_ms!r} must be numbers", namespace=namespace) from None
        if given is not None and given < SEGMENT_BYTES_MIN:
            raise ConfigError(f"segment_size_bytes {segment_size_bytes} is below "
                              f"{SEGMENT_BYTES_MIN}")
        # measured once per store: the disk, not a constant, bounds what a clean can free
        disk = disk_bytes(self.root)
        self.segment_size_bytes = default_segment_bytes(disk) if given is None else given
        self.reserve_bytes = reserve_bytes(disk)
        self.folder = self.root / namespace
        self._logs: dict[str, FileLog] = {}
        self._lock = threading.Lock()

    @classmethod
    def list_namespaces(cls, config: Mapping[str, Any]) -> list[str]:
        root = Path(config.get("path", ""))
        if not root.is_dir():
            raise LogNotFound(f"no WAL folder at {root}")
        return sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))

    @classmethod
    def namespaces_holding(cls, config: Mapping[str, Any], log: str) -> list[str]:
        """A log is a folder of its namespace's folder: one look each, nothing opened."""
        root = Path(config.get("path", ""))
        return [n for n in cls.list_namespaces(config) if (root / n / log).is_dir()]

    def sibling_namespaces(self) -> list[str]:
        return self.list_namespaces({"path": self.root}) if self.root.is_dir() else []

    def location(self) -> str:
        return f"folder {self.root}" + ("" if self.root.is_dir() else " (which does not exist)")

    def list_logs(self) -> list[str]:
        if not self.folder.is_dir():
            return []
        return sorted(
            p.name for p in self.folder.iterdir() if p.is_dir() and p.name != SNAPSHOTS
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
                    new_namespace = not self.folder.is_dir()
                    make_dirs(path, self.access)
                    if new_namespace:  # before its first record: a full disk fails here
                        self._make_reserve()
                # a log that is not a region holds small records that an open scans
                # (the tail segment): its segments stay small whatever regions use
                size = self.segment_size_bytes if name.startswith(REGION_PREFIX) else \
                    min(self.segment_size_bytes, NAMED_SEGMENT_BYTES)
                log_ = FileLog(self.namespace, name, path, size, self.group_commit_interval_ms,
                               self.access)
            self._logs[name] = log_
            return log_

    def _snapshot_path(self, name: str, version: int) -> Path:
        check_name("snapshot", name)
        return self.folder / SNAPSHOTS / f"{name}.{check_version(version):020d}"

    def write_snapshot(self, name: str, version: int, data: bytes) -> None:
        path = self._snapshot_path(name, version)
        with storage_errors("writing a snapshot", path, namespace=self.namespace):
            if not path.parent.is_dir():
                make_dirs(path.parent, self.access)
            write_atomic(path, data, self.access)

    def snapshot_versions(self, name: str) -> list[int]:
        """The stored versions; a release before commit ee5e358 kept one unversioned file,
        ``snapshots/{name}``, listed as version 0 so that any versioned one is newer."""
        check_name("snapshot", name)
        folder = self.folder / SNAPSHOTS
        if not folder.is_dir():
            return []
        prefix = name + "."
        versions = {int(p.name[len(prefix):]) for p in folder.iterdir()
                    if p.name.startswith(prefix) and is_decimal(p.name[len(prefix):])}
        if (folder / name).is_file():
            versions.add(UNVERSIONED)
        return sorted(versions)

    def read_snapshot_version(self, name: str, version: int) -> bytes | None:
        for path in self._snapshot_paths(name, version):
            try:
                return path.read_bytes()
            except FileNotFoundError:
                continue
        return None

    def delete_snapshot(self, name: str, version: int) -> None:
        for path in self._snapshot_paths(name, version):
            with storage_errors("deleting a snapshot", path, namespace=self.namespace):
                if path.exists():
                    path.unlink(missing_ok=True)
                    fsync_dir(path.parent)

    def _snapshot_paths(self, name: str, version: int) -> list[Path]:
        """The files of one version: version 0 may be an older release's unversioned one."""
        path = self._snapshot_path(name, version)
        return [path, path.parent / name] if version == UNVERSIONED else [path]

    def access_warnings(self) -> list[str]:
        """The folders and files below the namespace's folder with a permission bit its
        access does not give (others', or the group's of a private WAL), in one warning
        naming the first few with their modes and the ``chmod`` that tightens them all."""
        wide: list[tuple[Path, int]] = []
        for folder, dirs, files in os.walk(self.folder):
            dirs.sort()
            for path in [Path(folder)] + [Path(folder) / f for f in sorted(files)]:
                try:
                    mode = path.lstat().st_mode
                except FileNotFoundError:
                    continue  # deleted by a cleaner meanwhile
                if not stat.S_ISLNK(mode) and stat.S_IMODE(mode) & 0o077 & ~self.access.allowed:
                    wide.append((path, stat.S_IMODE(mode)))
        if not wide:
            return []
        who = "other users" if any(m & 0o007 for _, m in wide) else "its group"
        shown = ", ".join(f"{p} (mode {m:04o})" for p, m in wide[:5])
        more = f" and {len(wide) - 5} more" if len(wide) > 5 else ""
        keep = (" (or open it with access=group if its group is meant to read it)"
                if self.access is PRIVATE else "")
        return [f"{who} can read this WAL's rows: {len(wide)} folder(s) and file(s) are "
                f"wider than access={self.access.name} ({self.access.folder:04o} folders, "
                f"{self.access.file:04o} files) allows: {shown}{more}; tighten them with "
                f"`{self.access.tighten_command(self.folder)}`{keep}"]

    def _make_reserve(self) -> None:
        path = self.folder / RESERVE_FILE
        with storage_errors("creating the reserve", path, namespace=self.namespace):
            preallocate_atomic(path, self.reserve_bytes, self.access)

    def release_reserve(self) -> bool:
        path = self.folder / RESERVE_FILE
        with storage_errors("releasing the reserve", self.folder, namespace=self.namespace):
            try:
                size = path.stat().st_size
                path.unlink()
            except FileNotFoundError:
                return False
            fsync_dir(self.folder)
        log.warning("namespace=%s: the disk is full; released the %d bytes of %s kept for "
                    "the records that free space", self.namespace, size, path)
        return True

    def restore_reserve(self) -> Reserve:
        path = self.folder / RESERVE_FILE
        if path.exists():
            return Reserve.KEPT
        try:
            self._make_reserve()
        except DiskFull as exc:
            log.warning("%s; the next cleaner pass tries again", exc)
            return Reserve.MISSING
        return Reserve.RECREATED

    def capture(self, anchor: str) -> StoreCapture:
        """Every file of the namespace a copy needs, captured while its writers, readers
        and cleaners run, with ``anchor``'s lock held while the other logs are captured
        (:mod:`.copy`); :meth:`write_copy` writes it. Close it when done."""
        return capture_store(self.folder, anchor, self.list_logs, SNAPSHOTS, RESERVE_FILE,
                             self.access, self.namespace)

    def write_copy(self, capture: StoreCapture, root: Path,
                   copied: Callable[[str, int], None] | None = None) -> int:
        """Write ``capture`` as this namespace's folder below the new WAL root ``root``
        (which exists, and holds no folder of this name), everything fsync'd; the bytes
        written. ``copied`` is told of each log and of the snapshots with its bytes."""
        return write_capture(capture, Path(root) / self.namespace, self.access,
                             self.namespace, copied)

    def close(self) -> None:
        with self._lock:
            logs, self._logs = list(self._logs.values()), {}
        for log_ in logs:
            log_.close()
