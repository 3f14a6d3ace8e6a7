"""The project benchmark: durablewal vs its peers, side by side in one process.

    python bench/run.py [--scale small|full]
                        [--backends file,kafka,kafka-python,kafka-cluster]
                        [--reps 3] [--pairs 1,2,3,4,5,6,7] [--warmups 1] [--tag NAME]

One SparkSession (``local_session()``) for the whole run; an Apache Kafka broker
(KRaft, one node) is started for the single-node Kafka runs and a 3-node cluster
(replication 3, ``min.insync.replicas=2``) for ``kafka-cluster``
(tests/kafka_broker.py), each when its first run starts, stopped by PID after its
last. ``kafka`` is the Kafka backend on the confluent-kafka client, ``kafka-python``
the same backend on kafka-python, ``kafka-cluster`` the confluent client on the
cluster; the file backend always runs first, so the parquet peers are measured in
its run and the Kafka runs compare with its rates. Pair 7, Spark's own Kafka
connector with Avro, raw and JSON values (jars resolved by jars/spark-kafka/pom.xml,
put on the session with spark.jars), runs inside each Kafka run's rounds of pairs 1
and 2.
Each measurement has one warm-up and ``--reps`` repetitions; medians and ratios go
to bench/RESULTS.md and bench/results.png. See bench/README.md.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

import report  # noqa: E402
import spark_kafka  # noqa: E402
from common import BROKER_PIDS, OUT, SCRATCH, WARMUPS, Result, Target  # noqa: E402
from log_pairs import file_append_pair, kafka_log_pairs  # noqa: E402
from memory import memory_pair, recovery_pair  # noqa: E402
from spark_pairs import backend_goal_rows, latency_pairs, restart_pair, source_sink_pairs  # noqa: E402
from spark_queries import ProgressWaiter, SharedRates  # noqa: E402

from tests.kafka_broker import KafkaCluster, start_cluster  # noqa: E402

SCALES = {
    "small": {"rows": 100_000, "latency_batches": 8, "memory_mb": (100, 400),
              "log_entries": 100, "log_threads": 4, "kafka_entries": 100},
    "full": {"rows": 1_000_000, "latency_batches": 20, "memory_mb": (1000, 4000),
             "log_entries": 500, "log_threads": 4, "kafka_entries": 200},
}


# --backends name -> (backend, Kafka client, brokers): the client and the cluster's size
# are run dimensions of their own
BACKENDS: dict[str, tuple[str, str | None, int]] = {
    "file": ("file", None, 1),
    "kafka": ("kafka", "confluent", 1),
    "kafka-python": ("kafka", "kafka-python", 1),
    "kafka-cluster": ("kafka", "confluent", 3),
    "kafka-uncompressed": ("kafka", "confluent", 1),
}
# --backends name -> Kafka store options of that run (named in its rows' label):
# confluent's batches without its default lz4 compression, for what compression gives
BACKEND_OPTIONS: dict[str, tuple[tuple[str, str], ...]] = {
    "kafka-uncompressed": (("compression.type", "none"),),
}


class Brokers:
    """The Kafka clusters of a run by size, each started for its first run and stopped
    by PID after its last (an idle cluster beside a measured one is noise)."""

    def __init__(self, work: Path, backends: list[str]) -> None:
        self.work = work
        self.last = {BACKENDS[b][2]: i for i, b in enumerate(backends)
                     if BACKENDS[b][0] == "kafka"}
        self.running: dict[int, KafkaCluster] = {}

    def for_run(self, size: int) -> KafkaCluster:
        if size not in self.running:
            cluster = self.running[size] = start_cluster(self.work / f"kafka{size}", size)
            say(f"Apache Kafka, {size} node(s), on {cluster.bootstrap} (pids {cluster.pids()})")
        BROKER_PIDS[:] = self.running[size].pids()
        return self.running[size]

    def done_with(self, index: int) -> None:
        for size, last in self.last.items():
            if last == index and size in self.running:
                self.running.pop(size).stop()
        BROKER_PIDS.clear()

    def stop(self) -> None:
        for cluster in self.running.values():
            cluster.stop()
        self.running.clear()


def say(msg: str) -> None:
    print(msg, flush=True)


LOADS: list[tuple[str, tuple[float, float, float]]] = []  # (when, os.getloadavg())


def note_load(when: str) -> None:
    LOADS.append((when, os.getloadavg()))


def load_line() -> str:
    """The machine's load averages during the run (other jobs share this machine)."""
    seen = "; ".join(f"{when} {a:.2f} / {b:.2f} / {c:.2f}" for when, (a, b, c) in LOADS)
    return (f"Machine load (1 / 5 / 15-minute load averages, {os.cpu_count()} cores, other "
            f"users' jobs included): {seen}.")


def backend_order(names: list[str]) -> list[str]:
    """The file backend first (the parquet peers and the Kafka goal rows use its run),
    the others in the order given, each once."""
    unique = list(dict.fromkeys(names))
    return sorted(unique, key=lambda b: b != "file")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="small")
    parser.add_argument("--backends", default="file,kafka,kafka-python,kafka-cluster",
                        help="file, kafka (confluent-kafka client), kafka-python, "
                        "kafka-cluster (confluent-kafka on 3 brokers), kafka-uncompressed "
                        "(confluent-kafka, compression.type=none)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--pairs", default="1,2,3,4,5,6,7", help="which pairs to run")
    parser.add_argument("--warmups", type=int, default=1,
                        help="warm-up rounds of the Spark pairs 1-3 (the JIT keeps improving)")
    parser.add_argument("--tag", default="", help="write RESULTS-TAG.md / results-TAG.png")
    args = parser.parse_args()
    if args.reps < 1:
        parser.error("--reps must be >= 1")
    WARMUPS[0] = max(0, args.warmups)
    backends = backend_order([b.strip() for b in args.backends.split(",") if b.strip()])
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown or not backends:
        parser.error(f"--backends: unknown {unknown}; choose from {', '.join(BACKENDS)}")
    pairs = {p.strip() for p in args.pairs.split(",")}
    scale = SCALES[args.scale]
    logging.basicConfig(level=logging.ERROR)
    OUT.mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"run-{args.scale}-", dir=OUT))
    SCRATCH[0] = work  # checkpoints and parquet folders: deleted with the run
    began = time.perf_counter()
    note_load("start")
    results: list[Result] = []
    brokers = Brokers(work, backends)
    spark = None
    try:
        from pyspark_durable.showcase.session import local_session

        # Spark's Python workers import bench/python_floor.py (the pyfloor source/sink)
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)
        shared = SharedRates()
        kafka_runs = [b for b in backends if BACKENDS[b][0] == "kafka"]
        if "7" in pairs and kafka_runs:
            if pairs & {"1", "2"}:
                peer = shared.kafka_peer = spark_kafka.resolve()
                say(f"pair 7: {peer.label() if peer.jars else 'not available: ' + peer.why_not}")
            else:
                results.append(Result("7 Spark's Kafka connector", None, None, "rows/s",
                                      "report", note="not run: pair 7 runs in the rounds of "
                                      "pairs 1 and 2 (add 1,2 to --pairs)"))
        elif "7" in pairs:
            results.append(Result("7 Spark's Kafka connector", None, None, "rows/s", "report",
                                  note="not run: no Kafka backend in --backends"))
        # a bench-only setting: the connector's jars on this session (see jars/README.md)
        jars = shared.kafka_peer.jars if shared.kafka_peer else []
        spark = local_session("durablewal-bench", **({"spark.jars": ",".join(jars)}
                                                     if jars else {}))
        from python_floor import PythonFloor

        spark.dataSource.register(PythonFloor)
        waiter = ProgressWaiter()
        spark.streams.addListener(waiter)
        for index, name in enumerate(backends):
            backend, client, size = BACKENDS[name]
            broker = brokers.for_run(size) if backend == "kafka" else None
            base = Target(backend, "x", path=str(work / "wal") if backend == "file" else None,
                          bootstrap=broker.bootstrap if broker else None, client=client,
                          brokers=size, options=BACKEND_OPTIONS.get(name, ()))
            label = base.label
            n = scale["rows"]
            if pairs & {"1", "2"}:
                say(f"[{label}] pairs 1, 2: source / sink, {n:,} rows")
                note_load(f"[{label}] pairs 1, 2")
                results += source_sink_pairs(spark, base, n, args.reps, say, shared,
                                             frozenset(pairs))
                if backend == "kafka":
                    results += backend_goal_rows(shared, label, n)
            if "3" in pairs:
                say(f"[{label}] pair 3: per-batch latency")
                note_load(f"[{label}] pair 3")
                results += latency_pairs(spark, base, scale["latency_batches"], args.reps,
                                         waiter, say)
            if "4" in pairs:
                say(f"[{label}] pair 4: log layer")
                note_load(f"[{label}] pair 4")
                if backend == "file":
                    for threads in (1, scale["log_threads"]):  # a lone appender, and many
                        results.append(file_append_pair(scale["log_entries"], threads,
                                                        args.reps, say))
                else:
                    results += kafka_log_pairs(broker.bootstrap, str(client),
                                               scale["kafka_entries"], 20, args.reps, say)
            if "5" in pairs and backend == "file":
                say(f"[{label}] pair 5: memory over {scale['memory_mb']} MB namespaces")
                mem, small_ns = memory_pair(spark, base, scale["memory_mb"], args.reps, say)
                results.append(mem)
                if "6" in pairs:
                    results.append(recovery_pair(small_ns, args.reps, say))
            if "6" in pairs:
                say(f"[{label}] pair 6: restart from checkpoint")
                results.extend(restart_pair(spark, base, n, args.reps, say))
            brokers.done_with(index)
    finally:
        if spark is not None:
            for q in spark.streams.active:
                q.stop()
            spark.stop()
        brokers.stop()
        shutil.rmtree(work, ignore_errors=True)
    elapsed = time.perf_counter() - began
    argv = " ".join(sys.argv[1:]) or "(defaults)"
    note_load("end")
    md = report.write(results, argv, elapsed, args.tag)
    title, header, rest = md.read_text().split("\n\n", 2)
    md.write_text("\n\n".join([title, header, load_line(), rest]))
    say("")
    say(report.table(results))
    say(f"\nwrote {md} and its chart in {elapsed / 60:.1f} min")


if __name__ == "__main__":
    main()
