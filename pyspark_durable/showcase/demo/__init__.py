"""The main job: an orders pipeline on the embedded file log, crashed on purpose.

1. Generates order files (one file = one micro-batch) for several regions and tables.
2. A writing query (JSON files -> ``format("durablewal")``) runs in a child process,
   which is killed with SIGKILL inside a micro-batch (``--kill-at inside``, the
   default: by a failpoint when its commit is about to be appended, after its tasks
   wrote their entries) or at a random moment (``--kill-at random``), then restarted
   from its checkpoint. What the kill left is told from the WAL's own record.
3. A streaming query reads the WAL back (``readStream.format("durablewal")``), in the
   restarted writer's Spark session once its query ended.
4. Prints a report: rows in, rows out, duplicates, lost, steps, time.

``--backend kafka`` runs the same job on the local broker of ``durablewal kafka start``
(its client settings, SASL included, from that broker's folder).

Run it with ``durablewal demo`` or ``python -m pyspark_durable demo``.

Every Spark session runs in a child process (``python -m pyspark_durable.showcase.demo
--child-writer ...``) that reports to this one over its stdout, one line per event; its
stderr (Spark's JVM) goes to a log file in the work folder, shown only if the child
fails. This process prints a line per phase and per committed micro-batch; on a
terminal it adds a spinner with the time spent in the current phase (``rich``); piped,
it prints the same lines, plain.

=================  ===============================================================
module             what it holds
=================  ===============================================================
``__init__``       the command: its arguments, the four stages, the report
``orders``         the job's data: generated order files, the namespace's config
``writer``         the child: the writing query, then the read-back, as events
``narrator``       the parent: runs and kills the child, tells it from the WAL
``processes``      a child process: started in its own group, killed whole
``terminal``       what the user sees: lines, and a spinner on a terminal
=================  ===============================================================
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from pyspark_durable.showcase.demo.narrator import Demo
from pyspark_durable.showcase.demo.orders import NAMESPACE, TABLES, generate, wal_config
from pyspark_durable.showcase.demo.terminal import Ui
from pyspark_durable.showcase.demo.writer import run_writer


def _local_kafka() -> tuple[dict[str, str], str]:
    """The local broker's client settings and where they are, refused unless it runs
    and holds no namespace 'shop' yet (a second demo would read the first one's rows)."""
    from pyspark_durable.endpoint import open_namespace
    from pyspark_durable.errors import LogNotFound
    from pyspark_durable.showcase.localkafka.service import (
        CLIENT_FILE,
        client_settings,
        default_folder,
        find_running,
    )

    folder = default_folder()
    if find_running(folder) is None:
        raise SystemExit(f"--backend kafka runs on the local broker, and none runs from "
                         f"{folder}: start one with 'durablewal kafka start'")
    settings = client_settings(folder)
    try:
        open_namespace(wal_config(Path(), settings), create=False).close()
    except LogNotFound:
        return settings, str(folder / CLIENT_FILE)
    raise SystemExit(f"the local broker already holds namespace '{NAMESPACE}' from an earlier "
                     "demo: durablewal kafka stop, then durablewal kafka start (a new, empty "
                     "broker)")



def spans(numbers: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2, 5"``."""
    runs: list[list[int]] = []
    for n in sorted(numbers):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)



def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="durablewal demo", description=__doc__.splitlines()[0])
    parser.add_argument("--path", help="WAL root folder (default: a fresh temp folder)")
    parser.add_argument("--files", type=int, default=8, help="input files = micro-batches")
    parser.add_argument("--rows", type=int, default=500, help="orders per file")
    parser.add_argument("--kill-after", type=int, default=3, help="kill the writer after N batches")
    parser.add_argument("--kill-at", choices=["inside", "random"], default="inside",
                        help="inside: inside the next micro-batch, after its tasks wrote "
                             "their entries and before its commit (default); random: at a "
                             "random moment, inside a batch or between two")
    parser.add_argument("--backend", choices=["file", "kafka"], default="file",
                        help="file: the embedded file log (default); kafka: the local broker "
                             "'durablewal kafka start' runs")
    parser.add_argument("--child-writer", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--kafka-options", help=argparse.SUPPRESS)
    parser.add_argument("--kill-inside", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--read-back", nargs=3, help=argparse.SUPPRESS)
    return parser


def _run(args: argparse.Namespace, ui: Ui, demo: Demo) -> tuple[int, dict, int]:
    """The four stages, narrated: (rows in, the reader's result, entries left uncommitted)."""
    rows_in = generate(demo.work / "in", args.files, args.rows)
    ui.header(f"[1/4] generated {rows_in} orders in {args.files} files "
              f"(3 regions, tables {', '.join(TABLES.values())})")
    ui.header(f"[2/4] writing query (JSON files -> durablewal, one file per "
              f"micro-batch); SIGKILL after {args.kill_after} micro-batches"
              + (", inside the next one" if args.kill_at == "inside" else ""))
    demo.writer(args.kill_after, inside=args.kill_at == "inside")
    ui.header("[3/4] restarting the writing query from its checkpoint" + ui.dots)
    result = demo.writer(None, read_back=rows_in)
    return rows_in, result, demo.uncommitted()


def _report(ui: Ui, demo: Demo, rows_in: int, result: dict, left: int,
            elapsed: float) -> bool:
    """The exactly-once report; whether every row arrived once."""
    steps = result["steps"]
    ok = result["duplicates"] == 0 and result["lost"] == 0 and result["rows_out"] == rows_in
    ui.print()
    ui.header("exactly-once report")
    ui.line(f"rows in      {rows_in}")
    ui.line(f"rows out     {result['rows_out']}")
    ui.line(f"duplicates   {result['duplicates']}", None if result["duplicates"] == 0 else "red")
    ui.line(f"lost         {result['lost']}", None if result["lost"] == 0 else "red")
    ui.line(f"steps        {len(steps)}  (steps {spans(steps)}: one per micro-batch, "
            "across 3 regions)")
    ui.line("per region   " + ", ".join(f"{r}: {n}" for r, n in result["per_region"]))
    ui.line(f"crash        {demo.kill_note}")
    ui.line(f"uncommitted  {demo.uncommitted_note(left)}")
    ui.line(f"time         {elapsed:.1f} s")
    ui.line("verdict      " + ("EXACTLY ONCE" if ok else "FAILED"),
            "bold green" if ok else "bold red")
    return ok


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.child_writer:
        run_writer(*(Path(p) for p in args.child_writer), kill_inside=args.kill_inside,
                   kafka_json=args.kafka_options, read_back=args.read_back)
        return 0

    started = time.monotonic()
    kafka, kafka_config = _local_kafka() if args.backend == "kafka" else (None, "")
    wal = Path(args.path) if args.path else None
    if wal is not None and (wal / NAMESPACE).exists():
        raise SystemExit(f"{wal}/{NAMESPACE} already exists; give a fresh --path")
    work = Path(tempfile.mkdtemp(prefix="durablewal-demo-"))
    wal = wal or work / "wal"
    where = f"on Kafka {kafka['bootstrap.servers']}" if kafka else f"at {wal}"
    with Ui() as ui:
        demo = Demo(ui, wal, work, args.rows, kafka)
        try:
            ui.header(f"durablewal demo: orders -> WAL {where} "
                      f"({args.backend} backend, namespace '{NAMESPACE}')")
            rows_in, result, left = _run(args, ui, demo)
        finally:
            ui.idle()
            demo.close()
    ok = _report(ui, demo, rows_in, result, left, time.monotonic() - started)
    if not args.path:
        cli = f"{sys.executable} -m pyspark_durable"  # works without an activated venv
        there = f"--kafka-config {kafka_config}" if kafka else str(wal)
        ui.line(f"(WAL kept {where}; explore it with: {cli} steps {there} "
                f"--namespace {NAMESPACE})")
    elif ok:
        shutil.rmtree(work, ignore_errors=True)  # inputs, checkpoints, copy, logs
    return 0 if ok else 1
