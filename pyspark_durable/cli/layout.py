"""What a folder is, as the CLI tells the user when a path or a name is no namespace.

A WAL is often kept beside a query's other folders (``/jobs/orders/{wal,ckpt,out}``),
and a user points the CLI one folder too high. Whether a folder is a namespace is the
endpoint's to say (:mod:`pyspark_durable.endpoint.namespaces`: a commits log, and no
Spark checkpoint); this module only names the rest for messages:

* a **Spark checkpoint**: a ``metadata`` file beside an ``offsets`` or ``commits``
  folder (what Spark's ``checkpointLocation`` holds);
* a **Spark output folder**: a ``_spark_metadata`` folder (a file sink's log);
* a **WAL root**: a folder holding at least one WAL namespace.

Only the file backend has folders; this module knows nothing of Kafka.
"""

from __future__ import annotations

from pathlib import Path

from pyspark_durable.endpoint.namespaces import (
    folder_namespaces,
    namespace_folder,
    spark_checkpoint,
    spark_output,
)
from pyspark_durable.errors import NotAWal
from pyspark_durable.wal.ledger import COMMITS_LOG


def _folders(folder: Path) -> list[Path]:
    try:
        return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError:
        return []


def folder_names(folder: Path) -> list[str]:
    """The names of the folders directly in ``folder`` (hidden ones aside)."""
    return [p.name for p in _folders(folder)]


def wal_namespace(folder: Path) -> bool:
    """Whether ``folder`` is a namespace of a file WAL, as the endpoint judges it."""
    return namespace_folder(folder)


def namespaces_in(folder: Path) -> list[str]:
    """The WAL namespaces directly in ``folder``, as the endpoint lists them (empty: it
    is no WAL root)."""
    return folder_namespaces(folder)


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
    held = set(namespaces_in(root))
    for sub in _folders(root):
        if sub.name in held or namespaces_in(sub):
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
