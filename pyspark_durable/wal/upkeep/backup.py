"""``durablewal backup``: a consistent copy of a file-log namespace, taken while its
writers, readers and cleaners run, that opens as a WAL of its own.

**The rule** (docs/protocol.md, "Backups: a consistent copy while writers run"). The
copy's commits log is the source's up to an end ``N`` read under the commits log's
shared lock, and that lock stays held while every region is captured
(:meth:`.FileLogStore.capture` with the commits log as anchor). Then:

1. *Every step the copy's commits log holds has its entries in the copy.* A step record
   is appended only after its entries were acknowledged in their regions, so the
   entries of every record below ``N`` were acknowledged before ``N`` was read, and
   each region is captured after that (appends only add past a region's mark).
2. *Nothing the copy's steps need was deleted or freed in the copy.* A cleaner deletes
   or frees only below a bound recorded in the commits log, and only what its replay
   past that record shows no needed step refers to (the rule that makes cleaning safe).
   No record is appended while the commits log's lock is held, so every deletion or
   free a region's capture shows was decided by records below ``N``: it removed
   nothing the copy's replay of those same records needs. Deletions and frees after a
   region's capture do not reach the copy: the capture holds the segments open (an
   unlinked file stays readable through its descriptor), and a free punches no hole
   while a copy holds the log's copy lock (it records the frames and leaves the holes
   to a later free).
3. *The copy recovers.* Its snapshots are those listed under the same lock: none is
   past ``N`` (a snapshot describes a replay of acknowledged records), and the commits
   log is trimmed only under its exclusive lock, below two good snapshots, so the
   copied log starts where one of them can be replayed from.
4. *Torn tails and marks.* Each log's ``acked`` mark is read under its lock with its
   segments' sizes, so no copied mark is newer than the copied bytes; a torn tail past a
   mark is copied as it lies and stays past the copy's mark, unread.

Writers wait only while the logs' metadata is read (a commit waits for the commits log's
lock during the capture of every region, an append to a region for that region's);
cleaners never wait. The copy goes to ``DEST.partial``, is fsync'd, opened and checked
as ``durablewal check`` checks, and only then renamed to ``DEST``: a killed backup leaves
``DEST.partial`` (never a ``DEST`` that looks whole), which the next backup refuses.

S3 and Kafka keep their own copies: a backup of them is refused, naming what to use
(:func:`refusal`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyspark_durable.wal.failpoints as failpoints  # the module: tests swap its hooks
from pyspark_durable.errors import BackupCheckFailed, BackupRefused
from pyspark_durable.log import LogStore
from pyspark_durable.log.file import FileLogStore
from pyspark_durable.log.file.disk import fsync_dir, storage_errors
from pyspark_durable.wal.ledger import COMMITS_LOG
from pyspark_durable.wal.namespace import Namespace
from pyspark_durable.wal.progress import Progress, Silent
from pyspark_durable.wal.upkeep.check import run_check
from pyspark_durable.wal.upkeep.check_report import CheckReport

PARTIAL_SUFFIX = ".partial"

# what keeps a copy of a WAL on the backends a backup refuses: each keeps its own
INSTEAD = {
    "s3": "a bucket keeps its own copies: turn on S3 Versioning for the bucket and S3 "
          "Replication (same- or cross-region) of the WAL's prefix, or AWS Backup for S3; "
          "a copy with `aws s3 sync` while writers run is not consistent (it lists objects "
          "at different moments). See docs/operations.md, \"Back up and restore\"",
    "kafka": "Kafka keeps its own copies: replicate the WAL's topics inside the cluster "
             "(replication.factor 3, min.insync.replicas 2), and to another cluster with a "
             "mirror that keeps offsets (Confluent Cluster Linking's mirror topics, "
             "promoted on failover); not MirrorMaker 2, which renumbers offsets, while the "
             "WAL's steps name their entries by offset (a MirrorMaker copy's steps point at "
             "the wrong entries). See docs/operations.md, \"Back up and restore\"",
    "memory": "a memory WAL lives and dies with its process: there is nothing to back up",
}


def refusal(backend: str) -> BackupRefused | None:
    """Why ``backend`` is not backed up by ``durablewal backup``, naming what to use
    instead; None for the file backend."""
    if backend == FileLogStore.type_name:
        return None
    instead = INSTEAD.get(backend, "use the storage's own backups")
    return BackupRefused(f"durablewal backup copies a file-log WAL only, not the {backend} "
                         f"backend: {instead}")


@dataclass
class BackupReport:
    """What a backup copied, and the check its copy passed."""

    dest: Path
    steps: range  # the copy's retained steps
    bytes: int  # written (holes of freed entries not counted)
    logs: dict[str, int] = field(default_factory=dict)  # log (or "snapshots") -> bytes
    check: CheckReport | None = None


def partial_path(dest: Path) -> Path:
    """Where a backup to ``dest`` writes until its copy is whole and checked."""
    return dest.with_name(dest.name + PARTIAL_SUFFIX)


def _refuse_destination(store: FileLogStore, dest: Path, partial: Path) -> None:
    """Refuse a destination that is not new and empty, before anything is written."""
    where = {"namespace": store.namespace}
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise BackupRefused(f"destination {dest} exists and is not empty: give a new or "
                            "empty folder (a backup never writes over files)", **where)
    if partial.exists():
        raise BackupRefused(f"{partial} exists: a backup to {dest} was interrupted or "
                            "failed (or is running now); it is incomplete, never a backup: "
                            "once no backup "
                            f"to {dest} runs, remove it (rm -rf {partial}) and run the backup "
                            "again", **where)
    source = store.root.resolve()
    if dest.resolve().is_relative_to(source):
        raise BackupRefused(f"destination {dest} is inside the WAL root {store.root}: it would "
                            "become a namespace folder of the WAL it copies; give a folder "
                            "outside it", **where)


def backup_namespace(store: LogStore, dest: str | os.PathLike[str],
                     progress: Progress | None = None) -> BackupReport:
    """Copy the namespace of ``store`` to the new WAL root ``dest`` (the module docstring
    says why the copy is consistent): through ``DEST.partial``, checked, then renamed."""
    if not isinstance(store, FileLogStore):
        raise refusal(store.type_name) or BackupRefused(
            f"a {type(store).__name__} is no file log store: nothing to copy files of")
    progress = progress or Silent()
    dest = Path(dest)
    partial = partial_path(dest)
    _refuse_destination(store, dest, partial)
    with storage_errors("creating the backup's folder", partial, namespace=store.namespace):
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            partial.mkdir(mode=store.access.folder)
        except FileExistsError:  # a backup to the same place started meanwhile
            raise BackupRefused(f"{partial} exists: another backup to {dest} is running",
                                namespace=store.namespace) from None
        os.chmod(partial, store.access.folder)
        fsync_dir(partial.parent)
    report = BackupReport(dest, range(0), 0)
    capture = store.capture(COMMITS_LOG)
    try:
        failpoints.reached("backup.captured")
        task = progress.task("backup", len(capture.logs) + 1, "logs")
        report.bytes = store.write_copy(capture, partial, _counting(report, progress, task))
    finally:
        capture.close()
    fsync_dir(partial)
    failpoints.reached("backup.copied")
    report.check, report.steps = _verify(store, partial)
    with storage_errors("renaming the backup into place", dest, namespace=store.namespace):
        os.rename(partial, dest)  # replaces an empty folder, never a full one
        fsync_dir(dest.parent)
    return report


def _counting(report: BackupReport, progress: Progress,
              task: object) -> Callable[[str, int], None]:
    def copied(name: str, size: int) -> None:
        report.logs[name] = size
        progress.update(task, description=f"backup: {name}")
        progress.advance(task)
    return copied


def _verify(store: FileLogStore, partial: Path) -> tuple[CheckReport, range]:
    """The copy checked as ``durablewal check`` checks it, and its retained steps; a copy
    that fails stays at ``partial`` and the backup fails naming its problems."""
    copy = FileLogStore(store.namespace, path=partial, access=store.access)
    try:
        checked = run_check(copy)
        if not checked.ok:
            problems = "; ".join(p.text() for p in checked.problems[:5])
            more = f" and {len(checked.problems) - 5} more" if len(checked.problems) > 5 else ""
            raise BackupCheckFailed(
                f"the copy in {partial} fails its check ({problems}{more}); it stays there "
                "for inspection and is no backup. Run durablewal check on the source: the "
                "same problems there are damage the copy took along", namespace=store.namespace)
        ns = Namespace(copy, None, create=False)
        steps = ns.steps(refresh=False)
    finally:
        copy.close()
    return checked, steps
