"""What a folder is, as the CLI must tell before it opens anything in it.

A WAL is often kept beside a query's other folders (``/jobs/orders/{wal,ckpt,out}``),
and a user points the CLI one folder too high. A Spark checkpoint has a ``commits``
folder, as a namespace has, so taking every folder with one for a namespace would list
checkpoints as empty namespaces, and opening one would write a file log into Spark's
folder. So a folder is recognised by its layout first:

* a **Spark checkpoint**: a ``metadata`` file beside an ``offsets`` or ``commits``
  folder (what Spark's ``checkpointLocation`` holds);
* a **Spark output folder**: a ``_spark_metadata`` folder (a file sink's log);
* a **WAL namespace**: a ``commits`` folder, and not a Spark checkpoint;
* a **WAL root**: a folder holding at least one WAL namespace.

Only the file backend has folders; this module knows nothing of Kafka.
"""

from __future__ import annotations

from pathlib import Path

from pyspark_durable.errors import NotAWal
from pyspark_durable.wal.ledger import COMMITS_LOG

SPARK_CHECKPOINT_FILE = "metadata"
SPARK_CHECKPOINT_LOGS = ("offsets", COMMITS_LOG)
SPARK_SINK_LOG = "_spark_metadata"


def _folders(folder: Path) -> list[Path]:
    try:
        return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError:
        return []


def spark_checkpoint(folder: Path) -> bool:
    """Spark's ``checkpointLocation`` layout: a ``metadata`` file (the query id) beside
    an ``offsets`` or ``commits`` folder. No namespace has a ``metadata`` file (its
    folder holds logs, snapshots and the cleaner's reserve), so a checkpoint that an
    older CLI wrote a file log into is still recognised."""
    return (folder / SPARK_CHECKPOINT_FILE).is_file() and any(
        (folder / name).is_dir() for name in SPARK_CHECKPOINT_LOGS
    )


def spark_output(folder: Path) -> bool:
    """A Spark file sink's output folder (its ``_spark_metadata`` log)."""
    return (folder / SPARK_SINK_LOG).is_dir()


def wal_namespace(folder: Path) -> bool:
    """A namespace of the file log: its commits log, in a folder that is no checkpoint."""
    return (folder / COMMITS_LOG).is_dir() and not spark_checkpoint(folder)


def namespaces_in(folder: Path) -> list[str]:
    """The WAL namespaces directly in ``folder`` (empty: it is no WAL root)."""
    return [p.name for p in _folders(folder) if wal_namespace(p)]


def what_it_is(folder: Path) -> str | None:
    """A short description of a folder that is not a WAL namespace, or None."""
    if spark_checkpoint(folder):
        return "a Spark checkpoint, not a WAL"
    if spark_output(folder):
        return "a Spark output folder, not a WAL"
    names = namespaces_in(folder)
    if names:
        return f"a WAL root (namespaces {', '.join(names)})"
    return None


# what a folder that is neither a namespace nor a WAL root is, said of one or of several
_KINDS = (
    (spark_checkpoint, "is a Spark checkpoint, not a WAL", "are Spark checkpoints, not WALs"),
    (spark_output, "is a Spark output folder", "are Spark output folders"),
    (lambda _: True, f"has no {COMMITS_LOG} log", f"have no {COMMITS_LOG} log"),
)


def others_note(root: Path) -> str:
    """What the folders of ``root`` that are neither namespaces nor WAL roots are:
    "ckpt, ckpt-r are Spark checkpoints, not WALs; out is a Spark output folder"."""
    groups: dict[int, list[str]] = {}
    for sub in _folders(root):
        if wal_namespace(sub) or namespaces_in(sub):
            continue
        kind = next(i for i, (test, _, _) in enumerate(_KINDS) if test(sub))
        groups.setdefault(kind, []).append(sub.name)
    return "; ".join(
        f"{', '.join(names)} {_KINDS[k][1 if len(names) == 1 else 2]}" for k, names in sorted(groups.items())
    )


def _roots(folders: list[Path]) -> str:
    return ", ".join(f"{p} (namespaces {', '.join(namespaces_in(p))})" for p in folders)


def holder_nearby(root: Path, namespace: str) -> Path | None:
    """The WAL root one level off ``root`` that holds ``namespace``: one of its folders
    (``root`` is the WAL root's parent) or of its siblings (``root`` is a checkpoint or
    output folder beside the WAL root)."""
    candidates = [*_folders(root), *(p for p in _folders(root.parent) if p != root)]
    for folder in candidates:
        if wal_namespace(folder / namespace):
            return folder
    return None


def checkpoint_given(root: Path) -> NotAWal | None:
    """Why PATH ``root`` is no WAL, when it is a Spark checkpoint or output folder."""
    if spark_checkpoint(root):
        kind = "a Spark checkpoint (a query's checkpointLocation), not a WAL"
    elif spark_output(root):
        kind = "a Spark output folder (a file sink's path), not a WAL"
    else:
        return None
    msg = (
        f"PATH {root} is {kind}: give the WAL root, the folder format('durablewal') "
        "was given in .load(path), .save(path) or .start(path)"
    )
    beside = [p for p in _folders(root.parent) if namespaces_in(p)]
    if beside:
        msg += f"; the WAL root beside it: {_roots(beside)}"
    return NotAWal(msg)


def one_level_off(root: Path, namespace: str | None) -> str:
    """Where the user should look instead, for a message about ``root`` holding no
    (such) namespace: the folder that holds it or the WAL roots inside ``root``, then
    what ``root``'s other folders are."""
    hints = []
    holder = None if namespace is None else holder_nearby(root, namespace)
    if holder is not None:
        hints.append(f"namespace {namespace!r} is in {holder}: give PATH {holder}")
    else:
        inside = [p for p in _folders(root) if namespaces_in(p)]
        if inside:
            hints.append(f"the WAL root is inside it: give PATH {_roots(inside)}")
    note = others_note(root)
    if note and hints:
        hints.append(note)
    return "; ".join(hints)
