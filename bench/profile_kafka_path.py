"""Where the Kafka sink's time goes, stage by stage, without Spark.

A Python worker's write task runs ``spark.sink.write_batches`` over the Arrow batches
Spark hands it, and the driver runs ``commit_receipts``; this runs both in one process
on the rows the bench's sink pair writes (``bench/run.py`` pair 2: an int64 ``id`` and
the rate peer's 92-byte payload, 10,000-row batches as
``spark.sql.execution.arrow.maxRecordsPerBatch``), one task, on one Apache Kafka broker
(KRaft, one node) started as the bench starts it (``tests/kafka_broker.py``), with the
confluent (librdkafka) client, and measures each stage alone:

    python bench/profile_kafka_path.py --rows 1000000 --reps 5

CPU time is the primary number (the machine is shared, wall time is noisy): the
process's CPU (``time.process_time``: the calling thread and librdkafka's threads),
the calling thread's alone (``time.thread_time``) and the broker JVM's
(``/proc/PID/stat``); wall time is given too. Every number is per 1M rows, median of
``--reps``. ``--cprofile`` also prints the top functions of one whole write. Spark's
share (JVM <-> Arrow <-> Python) is not here: ``bench/run.py``'s Python floor measures it.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import pyarrow as pa  # noqa: E402
from common import PAYLOAD_BYTES  # noqa: E402

_TICK = os.sysconf("SC_CLK_TCK")


def rate_rows(n: int, batch: int) -> list[pa.RecordBatch]:
    """The sink pair's rows (``spark_queries.rate_df``): ``id`` and ``lpad(id, 20, '0')``
    followed by 72 ``x``, as Spark hands them to a Python sink, ``batch`` rows a batch."""
    import numpy as np

    ids = np.arange(n, dtype=np.int64)
    digits = np.char.zfill(ids.astype(str), 20).astype("S20").view(np.uint8).reshape(n, 20)
    raw = np.empty((n, PAYLOAD_BYTES), np.uint8)
    raw[:, :20] = digits
    raw[:, 20:] = ord("x")
    offsets = np.arange(0, (n + 1) * PAYLOAD_BYTES, PAYLOAD_BYTES, dtype=np.int32)
    payload = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets),
                                                     pa.py_buffer(raw.tobytes())])
    table = pa.table({"id": pa.array(ids), "payload": payload})
    return table.to_batches(max_chunksize=batch)


def broker_cpu(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / _TICK
    return total


@dataclass
class Stage:
    """One stage's samples, each scaled to 1M rows."""

    name: str
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    thread: list[float] = field(default_factory=list)
    broker: list[float] = field(default_factory=list)


class Meter:
    """Times stages: wall, process CPU, this thread's CPU, the broker's CPU."""

    def __init__(self, rows: int, broker_pids: list[int]) -> None:
        self.scale = 1e6 / rows
        self.pids = broker_pids
        self.stages: dict[str, Stage] = {}

    def measure(self, name: str, fn: Callable[..., object], *args: object) -> object:
        b0, w0, c0, t0 = broker_cpu(self.pids), time.perf_counter(), time.process_time(), \
            time.thread_time()
        out = fn(*args)
        t1, c1, w1, b1 = time.thread_time(), time.process_time(), time.perf_counter(), \
            broker_cpu(self.pids)
        stage = self.stages.setdefault(name, Stage(name))
        stage.wall.append((w1 - w0) * self.scale)
        stage.cpu.append((c1 - c0) * self.scale)
        stage.thread.append((t1 - t0) * self.scale)
        stage.broker.append((b1 - b0) * self.scale)
        return out

    def table(self) -> str:
        med = statistics.median
        lines = ["| stage (per 1M rows, one task) | CPU s (process) | CPU s (this thread) "
                 "| broker CPU s | wall s |", "|---|---:|---:|---:|---:|"]
        for s in self.stages.values():
            lines.append(f"| {s.name} | {med(s.cpu):.3f} | {med(s.thread):.3f} | "
                         f"{med(s.broker):.2f} | {med(s.wall):.3f} |")
        return "\n".join(lines)


def entries_of(batches: list[pa.RecordBatch], most: int) -> list[list[pa.RecordBatch]]:
    """Each Spark batch's rows as ``Attempt._write_rows`` splits them into entries."""
    out = []
    for b in batches:
        rows = max(1, int(b.num_rows * most / max(b.nbytes, 1)))
        out.append([b.slice(s, rows) for s in range(0, b.num_rows, rows)])
    return out


def log_stages(meter: Meter, ns: object, batches: list[pa.RecordBatch], reps: int) -> None:
    """The log path of the sink's entries, stage by stage: encode, keys, produce, acks;
    and the source's read of them."""
    from pyspark_durable.codec import EntryKey, codec_for
    from pyspark_durable.log import Record
    from pyspark_durable.wal.format.runs import entry_digest

    schema = batches[0].schema
    codec = codec_for("arrow", schema)
    parts = entries_of(batches, ns.entry_max_bytes)
    count = sum(map(len, parts))
    headers = (("a", b"p0-a0-t1-0123abcd"), ("w", b"query-profile"), ("s", b"0"))
    region = ns.store.open_region(0)
    for _ in range(reps):
        meter.measure("floor: iterate the batches (what the discarding sink does)",
                      lambda: [b.num_rows for b in batches])
        values = meter.measure(f"encode {count} entries (Arrow IPC into one buffer each)",
                               lambda: [[codec.encode_value(p) for p in ps] for ps in parts])

        def framed(values: list) -> list[list[Record]]:
            out, seq = [], 0
            for vs in values:
                group = []
                for v in vs:
                    key = EntryKey(ns.namespace_id, 0, 1, seq).encode()
                    entry_digest(key, v)
                    group.append(Record(key, v, headers))
                    seq += 1
                out.append(group)
            return out
        groups = meter.measure("keys, content digests, records", framed, values)
        futures = meter.measure(f"produce: {len(groups)} append_async calls "
                                "(librdkafka copies each value)",
                                lambda gs: [region.append_async(g) for g in gs], groups)
        offsets = meter.measure("acks=all wait: every entry acknowledged after the last "
                                "produce", lambda fs: [f.result() for f in fs], futures)
        meter.measure("source: read those entries back (the log's read, CRCs checked)",
                      lambda a, b: sum(len(e.value) for e in region.read(a, b)),
                      offsets[0][0], offsets[-1][-1] + 1)


def raw_producer_stage(meter: Meter, store: object, topic: str, values: list,
                       reps: int) -> None:
    """The same values through a bare confluent Producer with the log's settings, one
    flush: the most the client gives these bytes."""
    from confluent_kafka import Producer

    conf = {k: v for k, v in store.settings.clients["producer"].items() if k != "logger"}
    producer = Producer(conf)
    for _ in range(reps):
        def send() -> None:
            for v in values:
                while True:
                    try:
                        producer.produce(topic, v, b"k" * 26, partition=0)
                        break
                    except BufferError:
                        producer.poll(0.05)
            producer.flush(60)
        meter.measure("peer: bare Producer, same values, produce all + one flush", send)


def sink_stages(meter: Meter, opts: object, batches: list[pa.RecordBatch], reps: int,
                first_step: int, profile: cProfile.Profile | None) -> None:
    """What a Spark task runs (``write_batches``) and then the driver (``commit_receipts``),
    as one writer's consecutive steps."""
    from pyspark_durable.spark.sink import WalCommitMessage, commit_receipts, write_batches

    schema = batches[0].schema
    for rep in range(reps):
        step = first_step + rep

        def write(step: int) -> object:
            return write_batches(opts, iter(batches), "query-profile", step, f"a{step}", schema)
        if profile is not None and rep == reps - 1:
            profile.enable()
        receipt = meter.measure("a task's whole write (write_batches: cast, check, encode, "
                                "produce, acks)", write, step)
        if profile is not None and rep == reps - 1:
            profile.disable()
        meter.measure("the driver's step commit (commit_receipts)",
                      lambda r, s: commit_receipts(opts, [WalCommitMessage(r)],
                                                   "query-profile", s, consecutive=True),
                      receipt, step)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--batch", type=int, default=10_000)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--cprofile", action="store_true", help="top functions of one whole write")
    p.add_argument("--out", help="also write the table to this markdown file")
    p.add_argument("--payload", choices=("rate", "random"), default="rate",
                   help="the sink pair's rate rows, or bench/common.make_rows' random letters")
    p.add_argument("--kafka", action="append", default=[], metavar="NAME=VALUE",
                   help="a Kafka store option for the sink (repeatable), e.g. "
                   "compression.type=lz4")
    args = p.parse_args()

    from pyspark_durable.spark.options import WalOptions
    from pyspark_durable.spark.session_cache import namespace_for
    from tests.kafka_broker import start_cluster

    if args.payload == "rate":
        batches = rate_rows(args.rows, args.batch)
    else:
        from common import make_rows

        batches = make_rows(0, args.rows).to_batches(max_chunksize=args.batch)
    extra = dict(o.split("=", 1) for o in args.kafka)
    with tempfile.TemporaryDirectory(prefix="profile-kafka-",
                                     dir=os.environ.get("TMPDIR")) as root:
        cluster = start_cluster(Path(root) / "kafka", 1)
        try:
            meter = Meter(args.rows, cluster.pids())
            opts = WalOptions.parse({"backend": "kafka", "namespace": "profile",
                                     "kafka.bootstrap.servers": cluster.bootstrap,
                                     "kafka.client": "confluent",
                                     **{f"kafka.{k}": v for k, v in extra.items()}})
            profile = cProfile.Profile() if args.cprofile else None
            sink_stages(Meter(args.rows, []), opts, batches, 1, 0, None)  # warm-up
            ns = namespace_for(opts)
            log_stages(meter, ns, batches, args.reps)
            region = ns.store.open_region(0)
            values = [v for b in entries_of(batches, ns.entry_max_bytes)
                      for v in (ns_codec(b[0].schema).encode_value(x) for x in b)]
            raw_producer_stage(meter, ns.store, region.topic, values, args.reps)
            sink_stages(meter, opts, batches, args.reps, 1, profile)
        finally:
            cluster.stop()
    report(meter, args, batches, profile)


def ns_codec(schema: pa.Schema) -> object:
    from pyspark_durable.codec import codec_for

    return codec_for("arrow", schema)


def report(meter: Meter, args: argparse.Namespace, batches: list[pa.RecordBatch],
           profile: cProfile.Profile | None) -> None:
    nbytes = sum(b.nbytes for b in batches)
    head = (f"{args.rows:,} rows ({args.payload} payload), {nbytes / 1e6:.0f} MB, "
            f"{len(batches)} batches; one task, one broker, confluent client"
            f"{''.join(f', {o}' for o in args.kafka)}; median of {args.reps}; load averages "
            f"{' / '.join(f'{x:.2f}' for x in os.getloadavg())} at the end")
    print(head + "\n\n" + meter.table())
    if args.out:
        Path(args.out).write_text(head + "\n\n" + meter.table() + "\n")
    if profile is not None:
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
