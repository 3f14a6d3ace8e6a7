"""The subcommands of ``durablewal`` that look into a WAL (``namespaces``, ``regions``,
``tables``, ``steps``, ``tail``) and ``demo``; those that verify or change it are in
:mod:`pyspark_durable.cli.maintain`. Each reads a WAL and prints a table or JSON.

Every handler takes the parsed arguments and returns the exit code. Handlers open
namespaces through :mod:`pyspark_durable.cli.shared` (never creating one) and close
what they open; they raise :class:`CliError` or the package's own errors for the
top level to print in one line.
"""

from __future__ import annotations

import argparse
import importlib
from collections import deque
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa

import pyspark_durable.cli.layout as layout
from pyspark_durable.endpoint.config import EndpointConfig
from pyspark_durable.endpoint.step_times import first_step_since
from pyspark_durable.errors import DurableWalError, NotAWal
from pyspark_durable.times import timestamp_ms
from pyspark_durable.wal import Namespace, StepCommit, TableInfo
from pyspark_durable.wal.ledger import COMMITS_LOG
from pyspark_durable.wal.metadata import metadata_columns
from pyspark_durable.wal.queries import TableSize

from .follow import cmd_tail_stream
from .render import Part, Progress, TextTable, iso_ms, span
from .shared import (
    CliError,
    endpoint_config,
    namespaces_of,
    open_namespace,
    opened_namespace,
    output,
    table_name,
    where,
)


def _schema_text(info: TableInfo) -> str:
    return ", ".join(f"{f.name}: {f.type}" for f in info.schema)


# -- namespaces ---------------------------------------------------------------------


def _namespace_summary(cfg: EndpointConfig, names: list[str]) -> dict[str, Any]:
    name = cfg.namespace
    try:
        ns = open_namespace(cfg, names)
    except (DurableWalError, CliError) as exc:
        return {"name": name, "error": str(exc)}
    try:
        steps = ns.steps(refresh=False)  # just recovered
        return {"name": name, "id": ns.namespace_id, "regions": ns.store.list_regions(),
                "tables": sorted(t.name for t in ns.tables.by_id(refresh=False).values()),
                "first_step": steps.start, "next_step": steps.stop}
    finally:
        ns.close()


def _not_a_wal_root(cfg: EndpointConfig, names: list[str]) -> DurableWalError | CliError | None:
    """Why ``cfg`` is no folder of namespaces, if the endpoint found none in it
    (``names``): a file WAL's PATH that is one namespace's own folder, or a folder none
    of whose folders is a namespace (Spark checkpoints and output folders are named as
    such, and a WAL root among them is the PATH to give). A table of notes would bury
    the mistake."""
    if cfg.backend != "file" or names:
        return None
    root = Path(cfg.options["path"])
    if layout.wal_namespace(root):
        return CliError(f"PATH {root} is the namespace {root.name!r} itself; give its parent "
                        f"folder {root.parent}")
    hint = layout.one_level_off(root, None)
    if hint:
        return NotAWal(f"no WAL namespace in {where(cfg)}: {hint}")
    folders = layout.folder_names(root)
    inside = f"its folders {', '.join(folders)} have" if folders else "it is empty: it has"
    return CliError(f"no WAL namespace in {where(cfg)} ({inside} no {COMMITS_LOG} log); "
                    "give the WAL root folder, the one a query's .save(path) or "
                    ".start(path) was given")


def cmd_namespaces(args: argparse.Namespace) -> int:
    """List namespaces, with a summary of each unless ``--names-only``."""
    cfg = endpoint_config(args)
    names = namespaces_of(cfg)
    mistake = _not_a_wal_root(cfg, names)
    if mistake is not None:
        raise mistake
    found: list[dict[str, Any]] = [{"name": name} for name in names]
    if not args.names_only:
        with Progress(not args.json) as progress:
            task = progress.task("namespaces", len(names), "namespaces")
            for i, name in enumerate(names):
                progress.update(task, description=f"namespace {name}")
                found[i] = _namespace_summary(replace(cfg, namespace=name), names)
                progress.advance(task)
    doc = {"backend": cfg.backend, "where": where(cfg), "namespaces": found}
    if args.names_only:
        shown: Part = "\n".join(n["name"] for n in found) or f"no namespaces in {where(cfg)}"
    elif not found:
        shown = f"no namespaces in {where(cfg)}"
    else:
        rows = [[n["name"], "-", "-", "-", "-", n["error"]] if "error" in n else
                [n["name"], n["id"], len(n["regions"]), len(n["tables"]),
                 span(n["first_step"], n["next_step"]), ""] for n in found]
        shown = TextTable(["namespace", "id", "regions", "tables", "steps", "note"], rows,
                          whole={"note"})
    output(args, doc, shown)
    return 0


# -- regions ------------------------------------------------------------------------


def _regions_notes(expired_before: int, base_step: int,
                   found: list[dict[str, Any]]) -> list[str]:
    """Footnotes for the columns that need one, only when they are not all zero."""
    notes = []
    if any(r["expired"] for r in found):
        notes.append(f"expired: entries of steps below {expired_before}, which readers no "
                     "longer see; the cleaner deletes them once older than its grace")
    if any(r["uncommitted"] for r in found):
        notes.append("uncommitted: entries no committed step refers to (killed, failed or "
                     "aborted task attempts, duplicates of a committed batch, attempts in "
                     "flight); readers never see them. A cleaner pass frees them once they "
                     "are older than its grace (--grace-ms, cleanGraceMs) on a backend that "
                     "frees single entries (file); on Kafka once a retention policy expired "
                     "the steps written before them in their region")
        if base_step > 0:
            notes.append(f"  (steps below {base_step} are no longer indexed: entries of "
                         "them the cleaner has not deleted yet count as uncommitted too)")
    return notes


def cmd_regions(args: argparse.Namespace) -> int:
    """Regions with their watermarks, the tables living in each, and how many of their
    entries belong to retained steps, to expired steps, or to no committed step."""
    with opened_namespace(args) as ns:
        steps, base_step = ns.steps(), ns.info.first_indexed_step()
        regions = ns.info.region_entries()
        infos, keys = ns.tables.by_id(refresh=False), sorted(ns.tables.region_pairs())
    found = []
    for r in regions:
        tables = sorted(table_name(infos, t) for region, t in keys if region == r.region_id)
        found.append({"region": r.region_id, "low_watermark": r.low, "high_watermark": r.high,
                      "entries": r.high - r.low, "tables": tables, "committed": r.retained,
                      "expired": r.expired, "uncommitted": r.uncommitted, "freed": r.freed})
    doc = {"namespace": args.namespace, "regions": found,
           "steps": [steps.start, steps.stop], "first_indexed_step": base_step}
    if not found:
        output(args, doc, f"namespace {args.namespace!r} has no regions")
        return 0
    rows = [[r["region"], r["low_watermark"], r["high_watermark"], r["entries"],
             r["committed"], r["expired"], r["uncommitted"], r["freed"],
             ", ".join(r["tables"]) or "-"] for r in found]
    headers = ["region", "low", "high", "entries", "committed", "expired", "uncommitted",
               "freed", "tables"]
    output(args, doc, TextTable(headers, rows), *_regions_notes(steps.start, base_step, found))
    return 0


# -- tables -------------------------------------------------------------------------


def cmd_tables(args: argparse.Namespace) -> int:
    """Tables with their schema, and per region the rows and sequence range of the
    retained steps (sequences count per (region, table))."""
    with opened_namespace(args) as ns:
        steps = ns.steps()
        sizes = ns.info.table_sizes(steps.start)  # expired steps are no longer readable
        found = []
        for info in sorted(ns.tables.by_id(refresh=False).values(), key=lambda t: t.name):
            regions = []
            for region_id, nxt in ns.tables.regions(info.table_id).items():
                key = (region_id, info.table_id)
                size = sizes.get(key) or TableSize(0, 0, nxt)  # no retained step there
                regions.append({"region": region_id, "rows": size.rows,
                                "bytes": size.size_bytes,
                                "first_sequence": size.first_sequence, "next_sequence": nxt,
                                "marked_deleted_before": ns.tables.marked_before(*key)})
            found.append({
                # a string: named tables have ids >= 2**63, which a JSON number (a double
                # in JavaScript) cannot hold exactly
                "name": info.name, "id": str(info.table_id), "format": info.payload_format,
                "rows": sum(r["rows"] for r in regions),
                "bytes": sum(r["bytes"] for r in regions), "regions": regions,
                "schema_version": info.version,
                "schema": [{"name": f.name, "type": str(f.type), "nullable": f.nullable}
                           for f in info.schema],
                "schema_text": _schema_text(info),
            })
    doc = {"namespace": args.namespace, "steps": [steps.start, steps.stop], "tables": found}
    rows = []
    for t in found:  # ids only in --json: a 20-digit number no one types (--table takes names)
        schema = t["schema_text"] + (f" (v{t['schema_version']})" if t["schema_version"] else "")
        for r in t["regions"] or [{"region": "-", "rows": 0, "first_sequence": 0,
                                   "next_sequence": 0}]:
            # every row whole, schema included: grep finds a table's regions with its schema
            rows.append([t["name"], r["region"], t["format"], r["rows"],
                         span(r["first_sequence"], r["next_sequence"]), schema])
    shown = TextTable(["table", "region", "format", "rows", "sequences", "schema"], rows,
                      whole={"schema"}) if found else f"namespace {args.namespace!r} has no tables"
    output(args, doc, shown)
    return 0


# -- steps --------------------------------------------------------------------------


STEPS_SHOWN = 20  # `steps` without a range: the newest ones, like `tail`


def _step_range(args: argparse.Namespace, retained: range) -> range:
    """Steps to list: ``--from``/``--to`` clamped to what is retained, then ``--limit``.

    With ``--from`` the limit keeps the first steps; without it, the latest ones. With
    no range and no limit, the newest :data:`STEPS_SHOWN` (``--all``: every step): a
    namespace may hold millions, and a listing is read from its end.
    """
    start = max(retained.start, args.start if args.start is not None else retained.start)
    stop = min(retained.stop, args.stop if args.stop is not None else retained.stop)
    chosen = range(start, max(start, stop))
    limit = args.limit
    if limit is None and not getattr(args, "all", False) and args.start is None \
            and args.stop is None:
        limit = STEPS_SHOWN
    if limit is not None and len(chosen) > limit:
        chosen = chosen[:limit] if args.start is not None else chosen[len(chosen) - limit:]
    return chosen


def _step_doc(tables: Mapping[int, TableInfo], c: StepCommit) -> dict[str, Any]:
    return {"step": c.step, "writer_id": c.writer_id, "writer_step": c.writer_step,
            "rows": c.rows, "bytes": c.size_bytes, "entries": sum(r.entries for r in c.runs),
            "regions": c.regions, "tables": [table_name(tables, t) for t in c.tables],
            "attempts": list(c.attempts), "commit_timestamp_ms": c.timestamp_ms,
            "committed_at": iso_ms(c.timestamp_ms),
            "event_time": None if c.event_time is None else
            [iso_ms(c.event_time[0] // 1000), iso_ms(c.event_time[1] // 1000)]}


def cmd_steps(args: argparse.Namespace) -> int:
    """Committed steps: writer id and step, rows, bytes, commit time."""
    with opened_namespace(args) as ns:
        retained = ns.steps()
        chosen = _step_range(args, retained)
        tables = ns.tables.by_id(refresh=False)
        found = [_step_doc(tables, ns.step_commit(s)) for s in chosen]
    doc = {"namespace": args.namespace, "retained": [retained.start, retained.stop],
           "steps": found}
    rows = [[s["step"], s["writer_id"], s["writer_step"], s["rows"], s["bytes"],
             ", ".join(s["tables"]), s["committed_at"],
             " .. ".join(s["event_time"]) if s["event_time"] else ""] for s in found]
    head = (f"namespace {args.namespace!r}: retained steps {span(retained.start, retained.stop)}"
            f", showing {len(found)}")
    if len(found) < len(retained) and args.limit is None and not args.all \
            and args.start is None and args.stop is None:
        head += " (the newest; --all for every step)"
    headers = ["step", "writer", "writer_step", "rows", "bytes", "tables", "committed",
               "event time"]
    listing = [TextTable(headers, rows)] if found else []
    output(args, doc, head, *listing)
    return 0


# -- tail ---------------------------------------------------------------------------


TAIL_METADATA = ("_step", "_region", "_sequence")  # of METADATA_NAMES, what tail shows first


def _tail_rows(ns: Namespace, info: TableInfo, n: int, progress: Progress,
               since_step: int = 0) -> pa.Table | None:
    """The last ``n`` rows of a table from ``since_step`` on: read only the steps holding them."""
    chosen, missing = [], n
    steps = ns.steps()
    for step in reversed(range(max(steps.start, since_step), steps.stop)):
        if missing <= 0:
            break
        rows = sum(r.rows for r in ns.step_commit(step).runs if r.table_id == info.table_id)
        if rows:
            chosen.append(step)
            missing -= rows
    parts: deque[pa.Table] = deque()  # the newest batches holding the last n rows, no more
    held = 0
    task = progress.task(f"tail: reading {len(chosen)} steps", len(chosen), "steps")
    for step in reversed(chosen):
        for sb in ns.read_step(step, tables={info.table_id}):
            for batch in sb.batches:
                t = pa.Table.from_batches([batch])
                meta = metadata_columns(sb, info.name, t.num_rows, names=TAIL_METADATA)
                for name, column in reversed(list(zip(TAIL_METADATA, meta, strict=True))):
                    t = t.add_column(0, name, column)
                parts.append(t)
                held += t.num_rows
                while len(parts) > 1 and held - parts[0].num_rows >= n:  # read, not held
                    held -= parts.popleft().num_rows
        progress.advance(task)
    if not parts:
        return None
    table = pa.concat_tables(parts)
    return table.slice(max(0, table.num_rows - n))


def cmd_tail(args: argparse.Namespace) -> int:
    """The last rows of one table, with the step and sequence each came from; a machine
    format or ``--follow`` streams them (:mod:`pyspark_durable.cli.follow`)."""
    if getattr(args, "follow", False) or getattr(args, "format", "text") != "text":
        return cmd_tail_stream(args)
    time_arg = getattr(args, "from_time", None)
    if time_arg is not None and args.since is not None:
        raise CliError("give --since or --from-time, not both")
    with opened_namespace(args) as ns, Progress(not args.json) as progress:
        info = ns.tables.lookup(args.table if args.table_id is None else args.table_id)
        since = getattr(args, "from_step", None) or 0
        if args.since is not None or time_arg is not None:
            name = "--since" if args.since is not None else "--from-time"
            since = first_step_since(ns, timestamp_ms(name, args.since or time_arg), name)
        rows = _tail_rows(ns, info, args.n, progress, since) if args.n else None
    columns = [*TAIL_METADATA, *info.schema.names]
    records = rows.to_pylist() if rows is not None else []
    doc = {"namespace": args.namespace, "table": info.name, "columns": columns,
           "rows": records}
    shown = TextTable(columns, [[r[c] for c in columns] for r in records]) if records \
        else f"table {info.name!r} has no rows in the retained steps"
    output(args, doc, shown)
    return 0


# -- check and clean ------------------------------------------------------------------


def cmd_demo(args: argparse.Namespace) -> int:
    """Run :func:`pyspark_durable.showcase.demo.main` with every argument after ``demo``."""
    try:
        demo = importlib.import_module("pyspark_durable.showcase.demo")
    except ModuleNotFoundError as exc:
        if exc.name not in ("pyspark_durable.showcase", "pyspark_durable.showcase.demo"):
            raise
        raise CliError("the demo is not available in this installation "
                       "(no module pyspark_durable.showcase.demo)") from None
    result = demo.main(list(args.demo_args))
    return result if isinstance(result, int) else 0
