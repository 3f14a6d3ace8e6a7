"""The history pair in Spark: streaming queries restarted on a namespace of N
committed steps vs on a new one.

Goal: "a Spark streaming writer and reader restarted on a 1M-step namespace: first
micro-batch within 1 s of the same on a new namespace." Per size N (``--sizes``), a
namespace of N committed steps of the ``writer`` shape is built with
``bench/history.py``'s generator (``build``: one 10-row entry and its ``step`` record per
step, through the product's encoder, then a cleaner pass, as a writer's driver does),
and beside it a new namespace (``build`` of 1 step: created, one 10-row step, the same
cleaner pass). Both are measured in the same rounds, their order alternating, in one
SparkSession (``local_session()``: local[2]); medians of ``--reps`` after ``--warmups``
rounds. Each round runs, on each namespace, new queries with new checkpoints:

- ``writer``: a JSON file source (schema ``id long, payload string``, the payload cast to
  binary: the shape of the built steps) → ``writeStream.format("durablewal")`` into table
  ``t``, ``trigger(availableNow=True)``. It runs once (one micro-batch of one 10-row
  file: one step), a second 10-row file is added, and it is started again from the same
  checkpoint: the time from ``start()`` to the end of its first micro-batch (the
  progress event's trigger start plus its ``triggerExecution``; the wall time to
  termination is kept too). Twice: with ``cleanIntervalMs=0``, so the restarted batch's
  commit runs a cleaner pass, as the first commit after a restart does when the query
  was down longer than ``cleanIntervalMs`` (60 s by default), and with
  ``cleanIntervalMs=3600000``, so it runs none (checked: the namespace's last cleaner
  pass time moves, or does not).
- ``reader``: ``readStream.format("durablewal")`` with ``startingStep`` = the namespace's
  last committed step → ``noop``, availableNow. It runs once (reads that step), one
  10-row step is appended with ``write_step`` (in this process), and it is started
  again from its checkpoint: the time from ``start()`` to its termination (its one
  micro-batch reads that one step). The DataFrame is made (``load()``, which resolves
  the schema) before the timing.

Spark's Python workers are not reused between tasks (``spark.python.worker.reuse=false``,
unless ``--reuse-workers``): a restarted query's tasks then run in fresh Python
processes, as after a restart of the application, instead of in workers that opened
the namespace in an earlier round (handles are cached per process). A Python data
source's driver side (the stream reader's offsets, the sink's commit) runs in Python
processes Spark starts per query.

    python bench/history_spark.py --sizes 1000,100000 --reps 3
    python bench/history_spark.py --sizes 1000,100000,1000000 --reps 3 \\
        --out bench/RESULTS-history-spark.md
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from history import NAMESPACE, ROWS_PER_STEP, build, config, rows

HERE = Path(__file__).resolve().parent
GOAL_S = 1.0  # the restart on N steps may take this much longer than on a new namespace
QUERY_TIMEOUT_S = 1800
JSON_SCHEMA = "id long, payload string"
NO_PASS_MS = 3_600_000  # cleanIntervalMs of the writer whose restart runs no cleaner pass
# measure key -> (what the table calls it, the sample it is judged on, the other one)
MEASURES = {
    "writer_pass": ("writer restart, a cleaner pass due: start() → end of first micro-batch",
                    "first", "wall"),
    "writer_nopass": ("writer restart, no pass due: start() → end of first micro-batch",
                      "first", "wall"),
    "reader": ("reader restart: start() → terminated (one micro-batch, one step)",
               "wall", "first"),
}
SAMPLE_NAMES = {"first": "to end of first micro-batch", "wall": "to terminated"}
PHASES = ("start", "latestOffset", "getBatch", "queryPlanning", "addBatch", "walCommit",
          "commitOffsets")


@dataclass
class Side:
    """One namespace under test (N steps, or new) and the samples of its queries."""

    label: str
    path: str
    steps: int
    built_s: float
    samples: dict[str, list[float]] = field(default_factory=dict)

    def add(self, key: str, value: float, keep: bool) -> None:
        if keep:
            self.samples.setdefault(key, []).append(value)

    def median(self, key: str) -> float:
        return statistics.median(self.samples[key])

    def last(self, key: str) -> float:
        return self.samples[key][-1]


def spark_options(path: str) -> dict[str, str]:
    return {"backend": "file", "path": path, "namespace": NAMESPACE}


def namespace_now(path: str) -> tuple[int, int]:
    """(the next step, the time of the last cleaner pass in ms) as a fresh open sees them."""
    from pyspark_durable.endpoint import open_namespace

    ns = open_namespace(config(path), create=False)
    try:
        return ns.steps().stop, ns.info.last_clean_ms()
    finally:
        ns.close()


def write_json(folder: Path, name: str, start: int, n: int) -> None:
    """``n`` rows in one JSON-lines file, written aside and renamed in (a file source
    must never see a half-written file)."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder.parent / f".{folder.name}-{name}"
    tmp.write_text("".join(json.dumps({"id": i, "payload": "x" * 92}) + "\n"
                           for i in range(start, start + n)))
    tmp.rename(folder / name)


def run(start: Callable[[], object]) -> tuple[float, float, list, dict[str, float]]:
    """Start a query (availableNow) and wait for its end: (seconds from ``start()`` to the
    end of its first micro-batch, seconds to termination, its progress events with rows,
    where the time to the end of that batch went: ``start``, from ``start()`` to the
    trigger's start, then the trigger's ``durationMs`` phases, in seconds)."""
    t_wall = time.time()
    t0 = time.perf_counter()
    q = start()
    if not q.awaitTermination(QUERY_TIMEOUT_S):  # type: ignore[attr-defined]
        q.stop()  # type: ignore[attr-defined]
        raise TimeoutError(f"query did not finish in {QUERY_TIMEOUT_S}s")
    wall = time.perf_counter() - t0
    if q.exception():  # type: ignore[attr-defined]
        raise RuntimeError(str(q.exception()))  # type: ignore[attr-defined]
    progress = [p for p in q.recentProgress if p.numInputRows > 0]  # type: ignore[attr-defined]
    if not progress:
        raise RuntimeError("the query ran no micro-batch with rows")
    first = progress[0]
    began = datetime.fromisoformat(first.timestamp.replace("Z", "+00:00")).timestamp()
    first_end = began + first.durationMs["triggerExecution"] / 1000 - t_wall
    phases = {"start": began - t_wall} | {k: v / 1000 for k, v in first.durationMs.items()}
    return first_end, wall, progress, phases


def input_rows(progress: list) -> int:
    return sum(p.numInputRows for p in progress)


def keep_run(side: Side, measure: str, keep: bool, first: float, wall: float,
             phases: dict[str, float]) -> None:
    side.add(f"{measure}:first", first, keep)
    side.add(f"{measure}:wall", wall, keep)
    for k, v in phases.items():
        side.add(f"{measure}:phase:{k}", v, keep)


def writer_restart(spark, side: Side, scratch: Path, keep: bool, pass_due: bool) -> None:
    """Run the writing query, add a file, restart it (its first commit runs a cleaner
    pass when ``pass_due``, else none)."""
    measure = "writer_pass" if pass_due else "writer_nopass"
    inp = scratch / f"in-{uuid.uuid4().hex[:8]}"
    ckpt = scratch / f"ckpt-w-{uuid.uuid4().hex[:8]}"
    base = 1_000_000_000 + side.steps * 10 * ROWS_PER_STEP  # ids no built step has
    write_json(inp, "part-0.json", base, ROWS_PER_STEP)
    df = spark.readStream.schema(JSON_SCHEMA).json(str(inp)) \
        .selectExpr("id", "cast(payload as binary) as payload")

    def start():
        return (df.writeStream.format("durablewal").options(**spark_options(side.path))
                .option("table", "t").option("cleanIntervalMs", 0 if pass_due else NO_PASS_MS)
                .option("checkpointLocation", str(ckpt)).queryName(f"{measure}_{side.label}")
                .trigger(availableNow=True).start())

    before, _ = namespace_now(side.path)
    _, _, progress, _ = run(start)
    assert input_rows(progress) == ROWS_PER_STEP, progress
    write_json(inp, "part-1.json", base + ROWS_PER_STEP, ROWS_PER_STEP)
    _, cleaned_before = namespace_now(side.path)
    began_ms = time.time() * 1000
    first, wall, progress, phases = run(start)
    assert input_rows(progress) == ROWS_PER_STEP and len(progress) == 1, progress
    after, cleaned = namespace_now(side.path)
    assert after == before + 2, (side.label, before, after)  # a step per run, no more
    if pass_due:  # the restarted batch's commit ran a cleaner pass
        assert cleaned >= began_ms, (side.label, cleaned, began_ms)
    else:
        assert cleaned == cleaned_before, (side.label, cleaned, cleaned_before)
    keep_run(side, measure, keep, first, wall, phases)
    shutil.rmtree(inp, ignore_errors=True)
    shutil.rmtree(ckpt, ignore_errors=True)


def reader_restart(spark, side: Side, scratch: Path, keep: bool) -> None:
    """Run the reading query from the last step, append a step, restart it."""
    from pyspark_durable.endpoint import open_namespace, write_step

    ckpt = scratch / f"ckpt-r-{uuid.uuid4().hex[:8]}"
    last = namespace_now(side.path)[0] - 1
    df = spark.readStream.format("durablewal").options(**spark_options(side.path)) \
        .option("startingStep", str(last)).load()  # resolves the schema: not timed

    def start():
        return (df.writeStream.format("noop").option("checkpointLocation", str(ckpt))
                .queryName(f"reader_{side.label}").trigger(availableNow=True).start())

    _, _, progress, _ = run(start)
    assert input_rows(progress) == ROWS_PER_STEP, progress
    ns = open_namespace(config(side.path), create=False)
    try:
        step = write_step(ns, f"history-spark-{uuid.uuid4().hex[:8]}", 0,
                          {"t": rows(ROWS_PER_STEP)})
    finally:
        ns.close()
    assert step == last + 1, (side.label, step, last)
    first, wall, progress, phases = run(start)
    assert input_rows(progress) == ROWS_PER_STEP and len(progress) == 1, progress
    keep_run(side, "reader", keep, first, wall, phases)
    shutil.rmtree(ckpt, ignore_errors=True)


def measure_size(spark, root: Path, steps: int, reps: int, warmups: int,
                 say: Callable[[str], None]) -> list[Side]:
    """Build the N-step and the new namespace, then ``warmups + reps`` rounds."""
    sides = []
    for label, n in ((f"{steps}", steps), ("new", 1)):
        path = root / f"ns-{label}"
        built = build(str(path), "writer", n, real=False)
        say(f"  built {label}: {n:,} steps in {built:.1f} s")
        sides.append(Side(label, str(path), n, built))
    scratch = root / "scratch"
    for rnd in range(warmups + reps):
        keep = rnd >= warmups
        for side in (sides if rnd % 2 == 0 else sides[::-1]):
            writer_restart(spark, side, scratch, keep, pass_due=True)
            writer_restart(spark, side, scratch, keep, pass_due=False)
            reader_restart(spark, side, scratch, keep)
        say(f"  round {rnd + 1}/{warmups + reps}{'' if keep else ' (warm-up)'}" + (": " + "; ".join(
            f"{s.label}: writer (pass) {s.last('writer_pass:first'):.2f} s (addBatch "
            f"{s.last('writer_pass:phase:addBatch'):.2f}), writer (no pass) "
            f"{s.last('writer_nopass:first'):.2f} s, reader {s.last('reader:wall'):.2f} s "
            f"(start {s.last('reader:phase:start'):.2f}, addBatch "
            f"{s.last('reader:phase:addBatch'):.2f})" for s in sides) if keep else ""))
    for side in sides:
        shutil.rmtree(side.path, ignore_errors=True)
    shutil.rmtree(scratch, ignore_errors=True)
    return sides


def table_rows(steps: int, big: Side, new: Side) -> list[str]:
    out = []
    for measure, (what, key, other) in MEASURES.items():
        a, b = big.median(f"{measure}:{key}"), new.median(f"{measure}:{key}")
        out.append(f"| {steps:,} | {what} | {a:.2f} s | {b:.2f} s | {a - b:+.2f} s "
                   f"| {'yes' if a - b <= GOAL_S else 'no'} | {SAMPLE_NAMES[other]}: "
                   f"{big.median(f'{measure}:{other}'):.2f} s vs "
                   f"{new.median(f'{measure}:{other}'):.2f} s |")
    return out


def phase_rows(steps: int, big: Side, new: Side) -> list[str]:
    """Where each restarted query's time to the end of its first micro-batch went: the
    median of each phase, on N / on new."""
    out = []
    for measure in MEASURES:
        cells = []
        for phase in PHASES:
            key = f"{measure}:phase:{phase}"
            ok = key in big.samples and key in new.samples
            cells.append(f"{big.median(key):.2f} / {new.median(key):.2f}" if ok else "")
        out.append(f"| {steps:,} | {measure.replace('_', ', ').replace('nopass', 'no pass')} | "
                   + " | ".join(cells) + " |")
    return out


HEAD = ("| committed steps (N) | measure | ours on N | ours on new | difference "
        f"| within +{GOAL_S:.0f} s | also |\n|---:|---|---:|---:|---:|:-:|---|\n")
PHASE_HEAD = ("| committed steps (N) | restarted query | start() → trigger | latestOffset "
              "| getBatch | queryPlanning | addBatch | walCommit | commitOffsets |\n"
              "|---:|---|---:|---:|---:|---:|---:|---:|---:|\n")
PHASE_NOTE = ("Where the time to the end of the first micro-batch goes, medians in seconds, "
              "on N / on new (`start() → trigger`: from `start()` to the trigger's start; "
              "the others are the progress event's `durationMs`; a sink's commit, and the "
              "cleaner pass it runs, is in `addBatch`):\n\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1000,100000")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--warmups", type=int, default=1)
    p.add_argument("--reuse-workers", action="store_true",
                   help="let Spark reuse its Python workers between tasks (its default)")
    p.add_argument("--out", help="also write the tables to this markdown file")
    args = p.parse_args()

    def say(msg: str) -> None:
        print(msg, flush=True)

    from pyspark_durable.showcase.session import local_session

    (HERE / "out").mkdir(exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="history-spark-", dir=HERE / "out"))
    t0 = time.perf_counter()
    spark = local_session("durablewal-history-spark", **{
        "spark.python.worker.reuse": "true" if args.reuse_workers else "false"})
    lines: list[str] = []
    phases: list[str] = []
    try:
        for size in (int(s) for s in args.sizes.split(",")):
            say(f"N = {size:,}")
            big, new = measure_size(spark, root, size, args.reps, args.warmups, say)
            lines += table_rows(size, big, new)
            phases += phase_rows(size, big, new)
            say(HEAD + "\n".join(lines[-len(MEASURES):]) + "\n\n" + PHASE_HEAD
                + "\n".join(phases[-len(MEASURES):]))
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)
    text = HEAD + "\n".join(lines) + "\n\n" + PHASE_NOTE + PHASE_HEAD + "\n".join(phases) + "\n"
    print(text)
    if args.out:
        cmd = (f"python bench/history_spark.py --sizes {args.sizes} --reps {args.reps}"
               f"{f' --warmups {args.warmups}' if args.warmups != 1 else ''}"
               f"{' --reuse-workers' if args.reuse_workers else ''}")
        Path(args.out).write_text(
            f"# History pair in Spark\n\n`{cmd}`, file backend, local[2], {os.cpu_count()} "
            f"cores, Python workers {'reused' if args.reuse_workers else 'not reused'}, "
            f"{(time.perf_counter() - t0) / 60:.0f} min. Medians of {args.reps} after "
            f"{args.warmups} warm-up round(s); the N-step and the new namespace alternate "
            f"in each round.\n\n{text}")


if __name__ == "__main__":
    main()
