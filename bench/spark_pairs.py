"""Spark pairs: source and sink throughput (vs rate, the Python floor, Spark's parquet
file source / sink and, on Kafka, Spark's Kafka connector), per-batch latency floor,
restart.

Every query runs with its own fresh checkpoint. Throughput is rows divided by the
sum of ``durationMs.triggerExecution`` of the query's progress events (query start
and stop excluded, the same for both sides of a pair); the wall time from
``start()`` to termination is kept as well.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import spark_kafka
from common import (
    WARMUPS,
    CpuMeter,
    Result,
    Target,
    higher_is_better,
    median,
    prefill,
    repeat,
    reported,
    scratch_dir,
    uid,
    write_parquet,
)
from pyspark.sql import DataFrame, SparkSession
from spark_queries import (
    LAST_DURATIONS,
    PAYLOAD_EXPR,
    QUERY_TIMEOUT_S,
    ProgressWaiter,
    SharedRates,
    batch_times,
    beside_file,
    checkpoint,
    durations,
    floor_df,
    kafka_source_peers,
    parquet_sink_fn,
    rate_df,
    rate_fn,
    rows_of,
    run_available_now,
    wal_df,
    with_peer_meters,
)

ROOT = Path(__file__).resolve().parents[1]
CORES = os.cpu_count() or 1  # the Python floor's batch partitions (pair 1d)
CEILING_WARMUPS = 5  # the JVM ceiling's extra warm-ups: its JVM starts cold


def jvm_ceiling(parquet_dir: Path, n: int, reps: int, log: Callable[[str], None]
                ) -> list[float]:
    """Rows/s of Spark's vectorized parquet reader on ``local[1]`` over pair 1's parquet
    files, one per repetition: ``parquet_ceiling.py`` in a process of its own (a second
    SparkSession cannot share this one). Its JVM is fresh while the bench's has run every
    query of the pair before, so it gets ``CEILING_WARMUPS`` more warm-ups than the pairs
    (its rate still rose 2x over its first three queries)."""
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "parquet_ceiling.py"), str(parquet_dir), str(n),
         str(reps), str(WARMUPS[0] + CEILING_WARMUPS)], capture_output=True, text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    if done.returncode != 0:
        raise RuntimeError(f"the local[1] parquet ceiling failed (exit {done.returncode}): "
                           f"{done.stderr[-2000:]}")
    rates = json.loads(done.stdout.strip().splitlines()[-1])["rows_per_s"]
    log(f"  JVM ceiling (parquet, local[1]): {[round(r) for r in rates]} rows/s, "
        f"{time.perf_counter() - t0:.0f} s with its JVM's start")
    return rates


def source_sink_pairs(spark: SparkSession, base: Target, n: int, reps: int,
                      log: Callable[[str], None], shared: SharedRates,
                      pairs: frozenset[str] = frozenset({"1", "2"})) -> list[Result]:
    """Pairs 1 and 2, each also against the Python Data Source floor and Spark's parquet
    file source / sink (the peers a user would pick instead); durablewal → durablewal.
    Without pair 1 in ``pairs`` (``--pairs 2``), the sink's queries alone, and no
    durablewal → durablewal (it reads pair 1's prefilled namespace)."""
    b = base.label
    measure_parquet = not shared.parquet_run
    peer = shared.kafka_peer if base.backend == "kafka" else None
    peer_cpu: dict[str, dict[str, CpuMeter]] = {}
    note = f"{n:,} rows"
    kafka_rows: dict[str, list[Result]] = {}
    out: list[Result] = []
    src = None
    if "1" in pairs:
        src = base.with_namespace(uid("src"))
        t0 = time.perf_counter()
        prefill(src, n, rows_per_step=min(n, 50_000))
        log(f"  prefilled {n:,} rows in {time.perf_counter() - t0:.1f}s")
        one = base.with_namespace(uid("one"))  # pair 1c: one step in one region, split over tasks
        prefill(one, n, rows_per_step=n, regions=1)
        parquet_dir = Path(scratch_dir("parquet-src-")) \
            if measure_parquet else None
        if parquet_dir is not None:
            t0 = time.perf_counter()
            write_parquet(parquet_dir, n, rows_per_step=min(n, 50_000))
            log(f"  wrote the same {n:,} rows as parquet in {time.perf_counter() - t0:.1f}s")

        def read_into_noop(key: str, make: Callable[[], DataFrame]) -> Callable[[], float]:
            def run() -> float:
                secs, _, progress = run_available_now(make(), "noop")
                assert rows_of(progress) == n, (key, rows_of(progress), n)
                LAST_DURATIONS[key] = durations(progress)
                return n / secs
            return run

        def batch_into_noop(make: Callable[[], DataFrame]) -> Callable[[], float]:
            """Pair 1d: a batch ``spark.read`` written to ``noop``, wall clock (planning
            included, the same for both sides: a batch query has no progress events)."""
            def run() -> float:
                start = time.perf_counter()
                make().write.format("noop").mode("overwrite").save()
                return n / (time.perf_counter() - start)
            return run

        def wal_batch() -> DataFrame:
            return spark.read.format("durablewal").options(**one.spark_options()).load()

        def floor_batch() -> DataFrame:
            return spark.read.format("pyfloor").option("rows", n).load()

        for make in (wal_batch, floor_batch):  # the same rows on both sides, checked once
            assert make().count() == n, (make.__name__, n)
        payload_only = "id long, payload binary"
        fns = {
            "ours": read_into_noop("durablewal→noop", lambda: wal_df(spark, src)),
            "meta": read_into_noop("durablewal(metadataColumns=all)→noop",
                                   lambda: wal_df(spark, src, metadataColumns="all")),
            "onestep": read_into_noop("durablewal(one step, one region)→noop",
                                      lambda: wal_df(spark, one)),
            "onestep meta": read_into_noop(
                "durablewal(one step, one region, metadataColumns=all)→noop",
                lambda: wal_df(spark, one, metadataColumns="all")),
            "pyfloor": read_into_noop("pyfloor→noop", lambda: floor_df(spark, n)),
            "pyfloor payload": read_into_noop(
                "pyfloor(payload columns)→noop",
                lambda: floor_df(spark, n, columns="payload", partitions=str(CORES))),
            "batch": batch_into_noop(wal_batch),
            "pyfloor batch": batch_into_noop(floor_batch),
            "peer": rate_fn(spark, n, "noop")}
        if measure_parquet:
            fns["parquet"] = read_into_noop(
                "parquet→noop",
                lambda: spark.readStream.format("parquet").schema(payload_only).load(str(parquet_dir)))
        beside_file(shared, base, "1", fns)
        if peer is not None and peer.jars:
            for values, make in kafka_source_peers(spark, base, n, shared, log).items():
                fns[f"sparkkafka-{values}"] = read_into_noop(spark_kafka.VALUES[values][1], make)
            peer_cpu["1"] = with_peer_meters(fns)
        try:
            runs = repeat(fns, reps)
            if parquet_dir is not None:  # after the rounds: its one core is then its own
                ceiling = jvm_ceiling(parquet_dir, n, reps, log)
        finally:
            if parquet_dir is not None:
                shutil.rmtree(parquet_dir, ignore_errors=True)
        log(f"  source: {runs}")
        if measure_parquet:
            shared.parquet_run, shared.parquet_source = b, runs["parquet"]
        shared.source[b] = runs["ours"]
        if "file" in runs:
            shared.file_beside.setdefault(b, {})["1"] = runs["file"]
        if "1" in peer_cpu:
            kafka_rows["1"] = spark_kafka_rows(
                "1", b, runs, peer_cpu["1"], f"{note}; {peer.label()}" if peer else note,
                extra=(("durablewal, metadataColumns=all→noop", "meta",
                        "8 more columns on durablewal's side"),))
        pq_note = f"{note}; parquet measured in the [{shared.parquet_run}] run"
        out += [
            higher_is_better(f"1 source [{b}]: durablewal→noop vs rate→noop", runs["ours"],
                             runs["peer"], "rows/s", 0.7, note),
            reported(f"1 source [{b}]: durablewal→noop vs Python floor (in-memory "
                     "Python source, same columns)→noop", runs["ours"], runs["pyfloor payload"],
                     "rows/s", f"{note}; the share of the Python ceiling reached (the default "
                     "read: the table's columns, no metadata column)"),
            reported(f"1 source floor [{b} run]: in-memory Python source→noop vs "
                     "rate→noop", runs["pyfloor"], runs["peer"], "rows/s",
                     f"{note}; no I/O at all: the most any Python source reaches"),
            higher_is_better(f"1b source [{b}]: durablewal with metadataColumns=all→noop vs "
                             "rate→noop", runs["meta"], runs["peer"], "rows/s",
                             0.7, f"{note}; the 8 metadata columns asked for"),
            reported(f"1b source [{b}]: durablewal with metadataColumns=all→noop vs Python "
                     "floor with the same 8 metadata columns→noop", runs["meta"],
                     runs["pyfloor"], "rows/s", f"{note}; the same 10 columns on both sides"),
            higher_is_better(f"1c source [{b}]: one step in one region→noop vs Python floor "
                             "(2 partitions)→noop", runs["onestep meta"], runs["pyfloor"],
                             "rows/s", 0.9, f"{note} in one step of one region, split over tasks "
                             "(minPartitions default: the driver's cores), with "
                             "metadataColumns=all on both sides"),
            higher_is_better(f"1d source [{b}]: batch read of one step in one region→noop vs "
                             f"Python floor batch read ({CORES} partitions)→noop", runs["batch"],
                             runs["pyfloor batch"], "rows/s", 0.9,
                             f"{note} in one step of one region, spark.read→write.format(noop), "
                             "wall clock per repetition, planning included on both sides "
                             "(minPartitions default: the driver's cores)"),
            higher_is_better(f"1e source [{b}]: one step in one region, the default read→noop "
                             f"vs Python floor of the payload columns ({CORES} partitions)"
                             "→noop", runs["onestep"], runs["pyfloor payload"], "rows/s", 0.9,
                             f"{note} in one step of one region; both sides yield id and payload "
                             "alone (metadataColumns: none by default)"),
            reported(f"1e floor [{b} run]: Python floor with the 8 metadata columns→noop vs "
                     "the same of the payload columns only→noop", runs["pyfloor"],
                     runs["pyfloor payload"], "rows/s",
                     f"{note}; both prebuilt in memory: what PySpark alone charges for carrying "
                     "8 more columns (Arrow IPC to the JVM, its row conversion): what asking for "
                     "them costs any Python source"),
            reported(f"1 source peer [{b}]: durablewal→noop vs parquet file source→noop",
                     runs["ours"], shared.parquet_source, "rows/s", pq_note),
            reported(f"1b source peer [{b}]: durablewal with metadataColumns=all→noop vs "
                     "parquet file source→noop", runs["meta"], shared.parquet_source, "rows/s",
                     f"{pq_note}; 8 more columns on durablewal's side"),
        ]
        if measure_parquet:
            out += [reported(
                f"1 source floor vs parquet [{b} run]: in-memory Python source→noop vs "
                "parquet file source→noop", runs["pyfloor"], runs["parquet"], "rows/s",
                f"{note}; PySpark's limit: the most any Python source reaches, as a share "
                "of Spark's parquet source"),
                reported(
                f"1 ceiling [{b} run]: Python floor of the payload columns (local[2])→noop vs "
                "Spark's vectorized parquet reader on one core (local[1])→noop",
                runs["pyfloor payload"], ceiling, "rows/s",
                f"{note}; the JVM alone, one core, the same parquet files as the peer: how far "
                "below the JVM the Python floor sits, on twice the cores"),
                reported(
                f"1 source vs the ceiling [{b}]: durablewal→noop (local[2]) vs Spark's "
                "vectorized parquet reader on one core (local[1])→noop", runs["ours"],
                ceiling, "rows/s", f"{note}; the default read against the JVM's one core")]

    sink_ns = base.with_namespace(uid("sink"))
    fns = {"ours": rate_fn(spark, n, "durablewal", sink_ns.spark_options),
           "pyfloor": rate_fn(spark, n, "pyfloor"),
           "peer": rate_fn(spark, n, "noop")}
    if measure_parquet:
        fns["parquet"] = parquet_sink_fn(spark, n)
    beside_file(shared, base, "2", fns)
    if peer is not None and peer.jars:
        def into(key: str) -> Callable[[DataFrame, str, dict[str, str]], float]:
            def run(df: DataFrame, fmt: str, opts: dict[str, str]) -> float:
                secs, _, progress = run_available_now(df, fmt, opts)
                assert rows_of(progress) == n, (key, rows_of(progress), n)
                LAST_DURATIONS[key] = durations(progress)
                return n / secs
            return run
        for values in spark_kafka.SINK_VALUES:
            fns[f"sparkkafka-{values}"] = spark_kafka.sink_fn(
                spark, str(base.bootstrap), n, values, into(spark_kafka.VALUES[values][2]),
                base.replication)
        peer_cpu["2"] = with_peer_meters(fns)
    runs = repeat(fns, reps)
    pq_note = f"{note}; parquet measured in the [{shared.parquet_run or b}] run"
    if measure_parquet:
        shared.parquet_run, shared.parquet_sink = b, runs["parquet"]
    shared.sink[b] = runs["ours"]
    if "file" in runs:
        shared.file_beside.setdefault(b, {})["2"] = runs["file"]
    out += [
        higher_is_better(f"2 sink [{b}]: rate→durablewal vs rate→noop", runs["ours"],
                         runs["peer"], "rows/s", 0.5, note),
        reported(f"2 sink [{b}]: rate→durablewal vs rate→Python floor (Arrow "
                 "sink that discards)", runs["ours"], runs["pyfloor"], "rows/s",
                 f"{note}; the share of the Python ceiling reached"),
        reported(f"2 sink floor [{b} run]: rate→Python discarding sink vs "
                 "rate→noop", runs["pyfloor"], runs["peer"], "rows/s",
                 f"{note}; no I/O at all: the most any Python sink reaches"),
        reported(f"2 sink peer [{b}]: rate→durablewal vs rate→parquet file sink",
                 runs["ours"], shared.parquet_sink, "rows/s", pq_note),
    ]
    if measure_parquet:
        out.append(reported(
            f"2 sink floor vs parquet [{b} run]: rate→Python discarding sink vs "
            "rate→parquet file sink", runs["pyfloor"], runs["parquet"], "rows/s",
            f"{note}; PySpark's limit: the most any Python sink reaches, as a share of "
            "Spark's parquet sink"))
    if "2" in peer_cpu:
        kafka_rows["2"] = spark_kafka_rows(
            "2", b, runs, peer_cpu["2"], f"{note}; {peer.label()}" if peer else note)
    elif peer is not None:
        kafka_rows["1"] = [Result(f"7 Spark's Kafka connector [{b}]", None, None, "rows/s",
                                  "report", note=f"not available: {peer.why_not}")]
    out += [r for rows in kafka_rows.values() for r in rows]
    log(f"  sink: {runs}")
    for k, v in LAST_DURATIONS.items():
        log(f"  durationMs of the last {k}: {v}")

    if src is None:
        return out

    def wal_to_wal() -> float:
        dst = base.with_namespace(uid("w2w"))
        secs, _, progress = run_available_now(wal_df(spark, src), "durablewal",
                                              dst.spark_options())
        assert rows_of(progress) == n
        return n / secs

    w2w = repeat({"ours": wal_to_wal}, reps)["ours"]
    out.append(Result(f"2b end to end [{b}]: durablewal→durablewal", median(w2w), None,
                      "rows/s", note=f"{n:,} rows; no peer", samples={"ours": w2w}))
    log(f"  wal→wal: {w2w}")
    return out


TREE = ("the bench's process tree: this driver, the Spark JVM, its Python workers and the "
        "brokers (/proc, other users' processes left out)")
SPARK_KAFKA_QUERY = {"1": "Spark's Kafka source", "2": "Spark's Kafka sink"}
OURS_QUERY = {"1": "durablewal→noop", "2": "rate→durablewal"}
VALUE_NAMES = {"avro": "Avro", "json": "JSON", "raw": "raw value bytes"}


def spark_kafka_rows(pair: str, b: str, runs: dict[str, list[float]],
                     cpu: dict[str, CpuMeter], note: str,
                     extra: tuple[tuple[str, str, str], ...] = ()) -> list[Result]:
    """Pair 7: durablewal on this Kafka client vs Spark's own Kafka connector with each
    value form (Avro first, the headline), on the same brokers, with the same rows,
    measured in the same rounds; and the CPU of each query."""
    what = "source" if pair == "1" else "sink"
    out = []
    for key in [k for k in runs if k.startswith("sparkkafka-")]:
        values = key.split("-", 1)[1]
        carried, source_q, sink_q = spark_kafka.VALUES[values]
        peer = (f"{SPARK_KAFKA_QUERY[pair]}, {VALUE_NAMES[values]} "
                f"({source_q if pair == '1' else sink_q})")
        side = f"{note}; same brokers and rounds, topic of 2 partitions, {carried}"
        out.append(reported(f"7 {what} [{b}]: {OURS_QUERY[pair]} vs {peer}", runs["ours"],
                            runs[key], "rows/s", side))
        for label, ours_key, why in extra:
            out.append(reported(f"7 {what} [{b}]: {label} vs {peer}", runs[ours_key],
                                runs[key], "rows/s", f"{side}; {why}"))
        ours, theirs = cpu["ours"], cpu[key]
        out += [
            reported(f"7 {what} CPU [{b}]: CPU-s of the bench's processes and the brokers "
                     f"per query, {OURS_QUERY[pair]} vs {peer}", ours.tree, theirs.tree,
                     "CPU-s", f"start to stop, every round; {TREE}; whole machine, other "
                     f"users included: {median(ours.machine):.2f} vs "
                     f"{median(theirs.machine):.2f} s"),
            reported(f"7 {what} broker CPU [{b}]: the brokers' CPU-s per query, "
                     f"{OURS_QUERY[pair]} vs {peer}", ours.broker, theirs.broker, "CPU-s",
                     "the Kafka brokers' JVMs on this machine (/proc/PID/stat), start to "
                     "stop, every round"),
        ]
    return out


KAFKA_VS_FILE = 0.8  # goal: a Kafka client's source / sink rate over the file backend's


def backend_goal_rows(shared: SharedRates, label: str, n: int) -> list[Result]:
    """Goal rows of one Kafka client: its source and sink rates (pairs 1, 2) as a share
    of the file backend's, both measured side by side in the Kafka client's rounds (the
    same rows, alternating order), so the client's cost shows in one number."""
    out = []
    for pair, what, rates in (("1", "durablewal→noop", shared.source),
                              ("2", "rate→durablewal", shared.sink)):
        name = f"{pair} goal [{label}]: {what} on {label} vs on file"
        beside = shared.file_beside.get(label, {}).get(pair)
        if label not in rates or beside is None:
            out.append(Result(name, None, None, "rows/s", f">= {KAFKA_VS_FILE}",
                              note="not available: needs the file backend in the same run"))
            continue
        out.append(higher_is_better(name, rates[label], beside, "rows/s",
                                    KAFKA_VS_FILE, f"{n:,} rows; pair {pair} on file "
                                    f"rerun side by side in the [{label}] rounds"))
        meters = shared.cpu.get(label, {}).get(pair)
        if meters is not None:
            kafka, file = meters
            out.append(reported(
                f"{pair} goal CPU [{label}]: CPU-s of the bench's processes and the brokers "
                f"per {what} query, on {label} vs on file", kafka.tree, file.tree, "CPU-s",
                f"same queries as the goal row, start to stop, every round; {TREE}; of the "
                f"Kafka side's, the brokers used {median(kafka.broker):.2f} s (a production "
                f"cluster's brokers run elsewhere); whole machine, other users included: "
                f"{median(kafka.machine):.2f} vs {median(file.machine):.2f} s"))
    return out


def latency_pairs(spark: SparkSession, base: Target, batches: int, reps: int,
                  waiter: ProgressWaiter, log: Callable[[str], None]) -> list[Result]:
    """Pair 3: median seconds per 10-row micro-batch, ours vs the JVM floor rate→noop."""
    b = base.label
    src = base.with_namespace(uid("lat"))
    prefill(src, 10 * batches, rows_per_step=10, regions=1)

    def wal_source() -> float:
        _, _, progress = run_available_now(wal_df(spark, src, maxStepsPerTrigger="1"), "noop")
        times = batch_times(progress)
        assert len(times) == batches, (len(times), batches)
        return median(times)

    def rate_into(fmt: str, opts: Callable[[], dict[str, str]] | None = None) -> Callable:
        def run() -> float:
            # a 1 s trigger interval leaves the query idle between batches, so stop()
            # never interrupts a running batch; triggerExecution excludes the idle time
            q = (rate_df(spark, 10).writeStream.format(fmt).options(**(opts() if opts else {}))
                 .option("checkpointLocation", checkpoint())
                 .trigger(processingTime="1 second").start())
            ok = waiter.wait_batches(q, batches, QUERY_TIMEOUT_S)
            q.stop()
            if not ok:
                raise TimeoutError(f"rate→{fmt} made fewer than {batches} batches")
            return median(batch_times(q.recentProgress)[:batches])
        return run

    sink_ns = base.with_namespace(uid("latsink"))
    runs = repeat({"src": wal_source, "sink": rate_into("durablewal", sink_ns.spark_options),
                   "floor": rate_into("noop")}, reps)
    log(f"  latency: {runs}")
    floor = median(runs["floor"])
    out = []
    for key, label in (("src", "durablewal→noop"), ("sink", "rate→durablewal")):
        ours = median(runs[key])
        out.append(Result(f"3 batch latency [{b}]: {label} vs rate→noop", ours, floor,
                          "s/batch", "<= +0.5 s", ours - floor, ours - floor <= 0.5,
                          f"10-row batches x {batches}; ratio column = difference in s",
                          {"ours": runs[key], "peer": runs["floor"]}))
    return out


# the most a restart may add to a do-nothing Python source's restart: the goal per backend
RESTART_OVER_FLOOR_S = {"file": 0.5, "kafka": 1.0}


def restart_pair(spark: SparkSession, base: Target, n: int, reps: int,
                 log: Callable[[str], None]) -> list[Result]:
    """Pair 6b: restart an availableNow query over a fully processed source, vs the same
    with Spark's (JVM) parquet file source over the same rows, and with the do-nothing
    Python source (Spark starts a Python process for any Python streaming source: the
    difference to that floor is what durablewal itself costs)."""
    src = base.with_namespace(uid("rst"))
    prefill(src, n, rows_per_step=min(n, 50_000))
    folder = scratch_dir("parquet-")
    spark.range(n, numPartitions=2).selectExpr("id", PAYLOAD_EXPR.replace("value", "id")) \
        .write.mode("overwrite").parquet(folder)
    schema = spark.read.parquet(folder).schema
    sources = {"ours": lambda: wal_df(spark, src),
               "peer": lambda: spark.readStream.schema(schema).parquet(folder),
               "pyfloor": lambda: floor_df(spark, n)}
    walls: dict[str, dict[str, list[float]]] = {k: {"first": [], "restart": []}
                                                for k in sources}
    for rep in range(reps + 1):
        for key, make in sources.items():
            ckpt = checkpoint()
            _, first, progress = run_available_now(make(), "noop", ckpt=ckpt)
            assert rows_of(progress) == n
            _, again, progress = run_available_now(make(), "noop", ckpt=ckpt)
            assert rows_of(progress) == 0
            if rep:
                walls[key]["first"].append(first)
                walls[key]["restart"].append(again)
    log(f"  restart wall s: {walls}")
    ours, peer, floor = (walls[k]["restart"] for k in ("ours", "peer", "pyfloor"))
    limit = RESTART_OVER_FLOOR_S[base.backend]
    over = median(ours) - median(floor)
    return [
        Result(f"6b restart [{base.label}]: restarted durablewal query vs restarted "
               "parquet file-source query", median(ours), median(peer), "s (wall)",
               "report", median(ours) / median(peer), None,
               f"start()→terminated, all {n:,} rows already processed; first starts: "
               f"ours {median(walls['ours']['first']):.2f}s, "
               f"parquet {median(walls['peer']['first']):.2f}s",
               {"ours": ours, "peer": peer}),
        Result(f"6c restart [{base.label}]: restarted durablewal query vs restarted "
               "do-nothing Python source", median(ours), median(floor), "s (wall)",
               f"<= +{limit} s", over, over <= limit,
               "ratio column = difference in s: what durablewal adds to the Python process "
               "Spark starts (and the pyspark it imports) for any Python streaming source",
               {"ours": ours, "peer": floor}),
    ]
