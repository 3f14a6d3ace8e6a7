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

Every Spark session runs in a child process (``--child-writer``; the restarted writer
also reads the WAL back, ``--read-back``, so the demo starts Spark twice, not three
times) that reports to this one over its stdout, one line per event: ``SPARK_READY
<seconds>``, ``QUERY <id>``, ``BATCH <batch id> <rows> <ms> <query id>``, ``WRITTEN``,
``RESULT <json>``, ``DONE``. Its stderr (Spark's JVM) goes to a log file in the work folder,
shown only if the child fails. This process prints a line per phase and per
committed micro-batch; on a terminal it adds a spinner with the time spent in the
current phase (``rich``); piped, it prints the same lines, plain.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from pyspark_durable.demo_support import Child, Ui

TABLES = {0: "orders_eu", 1: "orders_us", 2: "orders_apac"}
PRODUCTS = ["kettle", "lamp", "chair", "desk", "mug", "plant"]
NAMESPACE = "shop"


def generate(in_dir: Path, files: int, rows: int, seed: int = 7) -> int:
    """Write ``files`` JSON files of ``rows`` orders each; return the number of rows."""
    rng = random.Random(seed)
    in_dir.mkdir(parents=True, exist_ok=True)
    order_id = 0
    for f in range(files):
        lines = []
        for _ in range(rows):
            region = rng.randrange(3)
            lines.append(json.dumps({
                "order_id": order_id, "region": region, "table": TABLES[region],
                "customer": f"c{rng.randrange(1000):04d}", "product": rng.choice(PRODUCTS),
                "amount": round(rng.uniform(1, 500), 2),
            }))
            order_id += 1
        tmp = in_dir / f".{f:05d}.tmp"
        tmp.write_text("\n".join(lines))
        tmp.rename(in_dir / f"{f:05d}.json")  # whole files only, as Spark's file source wants
    return order_id


# -- the children: one Spark session each, events on stdout --------------------------


def _say(*parts: object) -> None:
    print(*parts, flush=True)


def _kafka(kafka_json: str | None) -> dict[str, str]:
    """Spark options of the WAL on Kafka (``--kafka-options``), none on the file log."""
    if not kafka_json:
        return {}
    return {"backend": "kafka", **{f"kafka.{k}": v for k, v in json.loads(kafka_json).items()}}


class BatchLines:
    """``BATCH`` lines for the writing query's micro-batches, once each, from its
    progress events; none for the read-back query that may follow in the session."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reported: set[int] = set()
        self.writing = True

    def report(self, p) -> None:
        # A batch without rows commits no step (the WAL only notes the writer's batch
        # id), so it gets no line; every batch with rows is reported exactly once.
        with self.lock:
            if self.writing and p.numInputRows > 0 and p.batchId not in self.reported:
                self.reported.add(p.batchId)
                _say("BATCH", p.batchId, p.numInputRows, p.batchDuration, p.id)

    def listener(self):
        from pyspark.sql.streaming import StreamingQueryListener

        report = self.report

        class Progress(StreamingQueryListener):
            def onQueryStarted(self, event) -> None: ...
            def onQueryIdle(self, event) -> None: ...
            def onQueryTerminated(self, event) -> None: ...

            def onQueryProgress(self, event) -> None:
                report(event.progress)

        return Progress()

    def last(self, progress: list) -> None:
        """The listener is asynchronous: the last batch's event may arrive after the query
        ended (or never, once the process exits). The query's own record of its progress
        is complete when awaitTermination returns; later events are not the writer's."""
        for p in progress:
            self.report(p)
        with self.lock:
            self.writing = False


def run_writer(wal: Path, in_dir: Path, ckpt: Path, kill_inside: int | None = None,
               kafka_json: str | None = None, read_back: list[str] | None = None) -> None:
    """Child: the writing query; prints one ``BATCH`` line per micro-batch with rows.

    ``kill_inside``: SIGKILL this process group (driver, JVM) when the commit of that
    micro-batch is about to be appended, after its tasks wrote their entries (a
    failpoint Spark's Python workers read from the environment they inherit).
    ``read_back`` (out, checkpoint, rows in): once the writing query ended, read the WAL
    back in this session (:func:`read_wal`) rather than start a third Spark.
    """
    started = time.monotonic()
    if kill_inside is not None:
        from pyspark_durable.wal.failpoints import ENV

        os.environ[ENV] = f"commit.checked:kill-group={os.getpgid(0)}:writer_step={kill_inside}"
    from pyspark_durable.session import local_session

    spark = local_session("durablewal-demo-writer")
    _say("SPARK_READY", f"{time.monotonic() - started:.1f}")
    batches = BatchLines()
    spark.streams.addListener(batches.listener())
    schema = ("order_id long, region long, table string, customer string, product string, "
              "amount double")
    orders = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(in_dir))
    kafka = _kafka(kafka_json)
    query = (orders.writeStream.format("durablewal").options(**kafka)
             .option("namespace", NAMESPACE).option("regionColumn", "region")
             .option("tableColumn", "table").option("checkpointLocation", str(ckpt))
             .trigger(availableNow=True).start(*([] if kafka else [str(wal)])))
    _say("QUERY", query.id)
    query.awaitTermination()
    batches.last(query.recentProgress)
    if read_back:
        _say("WRITTEN")
        out, read_ckpt, rows_in = read_back
        read_wal(spark, wal, Path(out), Path(read_ckpt), int(rows_in), kafka_json)
    spark.stop()
    _say("DONE")


def read_wal(spark, wal: Path, out: Path, ckpt: Path, rows_in: int,
             kafka_json: str | None = None) -> None:
    """A streaming query copies the WAL to parquet; prints what it read (``RESULT``).

    It runs in the restarted writer's session, after its query ended: a query of its
    own, with its own checkpoint, that sees only what the WAL committed."""
    started = time.monotonic()
    kafka = _kafka(kafka_json)
    query = (spark.readStream.format("durablewal").options(**kafka)
             .option("namespace", NAMESPACE).load(*([] if kafka else [str(wal)]))
             .writeStream.format("parquet").option("checkpointLocation", str(ckpt))
             .trigger(availableNow=True).start(str(out)))
    query.awaitTermination()
    got = spark.read.parquet(str(out)).select("order_id", "_region", "_step").collect()
    counts = Counter(r.order_id for r in got)
    _say("RESULT", json.dumps({
        "rows_out": len(got),
        "duplicates": sum(c - 1 for c in counts.values() if c > 1),
        "lost": sum(1 for i in range(rows_in) if i not in counts),
        "steps": sorted({r._step for r in got}),
        "per_region": sorted(Counter(r._region for r in got).items()),
        "seconds": round(time.monotonic() - started, 1),
    }))


# -- the parent: what the user sees ---------------------------------------------------


class Demo:
    def __init__(self, ui: Ui, wal: Path, work: Path, rows_per_file: int,
                 kafka: dict[str, str] | None = None) -> None:
        self.ui = ui
        self.kafka = kafka  # the local broker's client settings, or None: the file log
        self.rows_per_file = rows_per_file
        self.wal = wal
        self.work = work
        self.ns = None  # the WAL, opened (never created) by this process once it exists
        self.seen: dict[int, int] = {}  # WAL step -> the micro-batch that committed it
        self.runs = 0
        self.in_flight: int | None = None  # the micro-batch the kill interrupted, if any
        self.kill_note = "none"  # the report's crash line
        self.last_before_kill: int | None = None  # the WAL's last committed micro-batch then
        self.left_at_kill = 0  # uncommitted entries the WAL held right after the kill
        self.replayed: list[int] = []  # micro-batches a run committed again (a no-op)

    def namespace(self):
        if self.ns is None:
            from pyspark_durable.endpoint import open_namespace

            self.ns = open_namespace(wal_config(self.wal, self.kafka), create=False)
        return self.ns

    def batch_line(self, event: list[str], note: str = "") -> None:
        """``BATCH <batch id> <rows> <ms> <query id>``: the step it committed, from the WAL."""
        batch, rows, ms = (int(x) for x in event[1:4])
        step = self.namespace().committed_step(f"query-{event[4]}", batch)
        if step is None:  # cannot happen: a batch with rows commits before it reports
            self.ui.line(f"micro-batch {batch:>2}: {rows} rows, but no step in the WAL", "red")
        elif step in self.seen:
            self.replayed.append(batch)
            self.ui.line(f"micro-batch {batch:>2} replayed -> step {step:>2} was already "
                         f"committed: a no-op, its {rows} rows are not written twice", "magenta")
        else:
            self.seen[step] = batch
            again = ""
            if batch == self.in_flight:
                again = (": the batch the kill interrupted, run again from Spark's offset "
                         "log; this attempt committed it, the killed one's entries stay "
                         "uncommitted")
            if rows > self.rows_per_file:
                note += (f": {rows // self.rows_per_file} input files in one micro-batch, as "
                         "Spark's file source does after a kill that came between its logging "
                         "a file and planning a batch for it")
            self.ui.line(f"micro-batch {batch:>2} -> step {step:>2}, {rows} rows "
                         f"({ms / 1000:.1f} s){again}{note}", "green")

    def missed_before_kill(self) -> None:
        """Steps committed whose progress event died with the driver: from the WAL."""
        from pyspark_durable.errors import LogNotFound

        try:
            ns = self.namespace()
        except LogNotFound:  # nothing committed yet: the namespace does not exist
            return
        for step in ns.steps():
            if step not in self.seen:
                c = ns.step_commit(step)
                self.seen[step] = c.writer_step
                self.ui.line(f"micro-batch {c.writer_step:>2} -> step {step:>2}, {c.rows} rows "
                             "(committed just before the kill; read from the WAL)", "green")

    def uncommitted(self) -> int:
        """Entries in the regions that no committed step refers to (the WAL's own record:
        what ``durablewal regions`` counts as uncommitted, counted by the same query)."""
        from pyspark_durable.errors import LogNotFound

        try:
            ns = self.namespace()
        except LogNotFound:
            return 0
        ns.refresh()
        return sum(r.uncommitted for r in ns.info.region_entries())

    def after_kill(self, how: str) -> None:
        """Say where the kill landed, from the WAL: the last committed micro-batch, and
        whether a batch after it had written entries no step refers to."""
        from pyspark_durable.errors import LogNotFound

        self.missed_before_kill()
        try:
            steps = self.namespace().steps()
        except LogNotFound:
            steps = range(0)
        last = self.namespace().step_commit(steps[-1]).writer_step if steps else None
        done = f"micro-batch {last} (step {steps[-1]})" if steps else "no micro-batch"
        self.ui.line(f"{how}; the WAL's last commit is {done}", "red")
        left = self.left_at_kill = self.uncommitted()
        self.last_before_kill = last
        following = 0 if last is None else last + 1
        if left:
            self.in_flight = following
            self.ui.line(f"the kill landed inside micro-batch {following}: its tasks had "
                         f"written {left} entries that no step refers to (uncommitted: "
                         "readers never see them)", "red")
            self.kill_note = f"writer killed with SIGKILL inside micro-batch {following}"
        else:
            after = f"after micro-batch {last} " if last is not None else ""
            self.ui.line(f"the WAL holds no uncommitted entry: no micro-batch {after}had "
                         "written anything yet", "red")
            self.kill_note = ("writer killed with SIGKILL after the WAL's commit of "
                              f"micro-batch {last}" if last is not None else
                              "writer killed with SIGKILL before its first commit")

    def after_restart(self) -> None:
        """Say what the restart added to the kill's story, from the run and the WAL: a
        micro-batch it ran again because Spark's checkpoint had not recorded it (the kill
        came between the WAL's commit and Spark's), whose entries stay uncommitted."""
        replays = [b for b in self.replayed if b == self.last_before_kill]
        if not replays:
            return
        added = self.uncommitted() - self.left_at_kill
        self.ui.line(f"so the kill came after the WAL committed micro-batch {replays[0]} and "
                     "before Spark's checkpoint recorded it: the restart ran it again, its "
                     f"commit was a no-op, and the {added} entries its tasks wrote stay "
                     "uncommitted", "magenta")
        self.kill_note = (f"writer killed with SIGKILL inside micro-batch {replays[0]}, after "
                          "its commit to the WAL, before Spark's checkpoint recorded it")

    def uncommitted_note(self, left: int) -> str:
        """Where the uncommitted entries came from: the killed attempt, the restart's replay."""
        parts = []
        if self.left_at_kill:
            parts.append(f"{self.left_at_kill} written by the killed attempt of micro-batch "
                         f"{self.in_flight}")
        if left > self.left_at_kill:
            by = (f"the restart's replay of micro-batch {self.replayed[0]}, already committed"
                  if self.replayed else "attempts after the kill")
            parts.append(f"{left - self.left_at_kill} by {by}")
        where = "; ".join(parts) + ": " if parts else ""
        return f"{left} entries ({where}referred to by no step: never read)"

    def writer(self, kill_after: int | None, inside: bool = False,
               read_back: int | None = None) -> dict:
        """Run the writing query; SIGKILL it ``kill_after`` batches into this run: at a
        random moment, or (``inside``) inside the next micro-batch, between its tasks'
        writes and its commit. ``read_back`` (the rows in): then read the WAL back in the
        same child, and return what the reader found."""
        self.runs += 1
        args = self.writer_args(kill_after if inside else None, read_back)
        batches, written, result = 0, False, {}
        last, died_after = -1, 0.0  # the batch whose line triggered the kill, how long after
        with Child("writing query", args, self.work / f"writer-{self.runs}.log") as child:
            self.ui.phase("starting Spark (local[2]) for the writer")
            for event in child.events():
                kind = event[0]
                if kind == "SPARK_READY":
                    self.ui.line(f"Spark is up ({event[1]} s)")
                elif kind == "QUERY":
                    self.ui.phase("query started; its first micro-batch also starts Spark's "
                                  "Python workers", "first micro-batch running")
                elif kind == "BATCH" and not child.killed:
                    batches += 1
                    batch = int(event[1])
                    self.batch_line(event)
                    self.ui.activity(f"micro-batch {batch + 1} running")
                    if kill_after is not None and batches >= kill_after and not inside:
                        # the listener reports a batch about one batch late: a delay of up to
                        # one batch lands the kill inside a batch or between two, by chance
                        delay = random.uniform(0.2, 1.2)
                        time.sleep(delay)
                        self.ui.phase("killing the writer with SIGKILL "
                                      "(driver, JVM and Python workers)", "killing the writer")
                        child.kill()
                        # what it managed to print before it died is read below
                        last, died_after = batch, delay
                elif kind == "BATCH":  # printed by the child just before the kill landed
                    self.batch_line(event, " (committed before the kill landed)")
                elif kind in ("WRITTEN", "RESULT"):
                    written = True
                    result = self.reading(event, batches) or result
                elif kind == "DONE":
                    self.ui.activity("stopping Spark")
            if inside and kill_after is not None and child.proc.wait() == -signal.SIGKILL:
                self.ui.phase("killing the writer with SIGKILL "
                              "(driver, JVM and Python workers)", "killing the writer")
                child.killed = True  # by its own failpoint, at the commit of the batch
                how = (f"killed the writer at the commit of micro-batch {kill_after}, after "
                       "its tasks wrote their entries")
            else:
                how = f"killed the writer {died_after:.2f} s after micro-batch {last} reported"
            child.finish()
        if child.killed:
            self.after_kill(how)
        elif kill_after is not None:
            self.ui.line("the writer finished before the kill")
        elif not written:
            self.finished(batches)
        if read_back is not None and not result:
            raise SystemExit(f"the reading query reported nothing; see {child.log_path}")
        return result

    def writer_args(self, kill_inside: int | None, read_back: int | None) -> list[str]:
        args = ["--child-writer", str(self.wal), str(self.work / "in"), str(self.work / "ckpt")]
        if kill_inside is not None:
            args += ["--kill-inside", str(kill_inside)]
        if self.kafka:
            args += ["--kafka-options", json.dumps(self.kafka)]
        if read_back is not None:
            args += ["--read-back", str(self.work / "out"), str(self.work / "ckpt-r"),
                     str(read_back)]
        return args

    def reading(self, event: list[str], batches: int) -> dict | None:
        """The read-back's events (``WRITTEN``, then ``RESULT``: what the reader found)."""
        if event[0] == "WRITTEN":
            self.finished(batches)
            self.ui.header("[4/4] reading the WAL back with a streaming query "
                           "(durablewal -> parquet), in the same Spark")
            self.ui.phase("reading the WAL back")
            return None
        result = json.loads(event[1])
        self.ui.line(f"read {result['rows_out']} rows from {len(result['steps'])} steps "
                     f"({result['seconds']} s)")
        self.ui.activity("stopping Spark")
        return result

    def finished(self, batches: int) -> None:
        self.ui.line(f"the writer finished: {batches} micro-batches in this run")
        self.after_restart()

    def close(self) -> None:
        if self.ns is not None:
            self.ns.close()


def wal_config(wal: Path, kafka: dict[str, str] | None) -> dict:
    """The demo's namespace as an endpoint config: in the folder, or on the broker."""
    if kafka:
        return {"backend": "kafka", "namespace": NAMESPACE, "options": kafka}
    return {"backend": "file", "namespace": NAMESPACE, "options": {"path": str(wal)}}


def _local_kafka() -> tuple[dict[str, str], str]:
    """The local broker's client settings and where they are, refused unless it runs
    and holds no namespace 'shop' yet (a second demo would read the first one's rows)."""
    from pyspark_durable.endpoint import open_namespace
    from pyspark_durable.errors import LogNotFound
    from pyspark_durable.localkafka.service import (
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


if __name__ == "__main__":
    sys.exit(main())
