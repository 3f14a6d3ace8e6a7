"""Benchmark: KafkaLog vs raw kafka-python, side by side in one run.

    python bench/bench_kafka_log.py [--entries 200] [--per-append 20] [--reps 7]

Starts its own Tansu broker (tests/kafka_broker.py). Rows of ~100 bytes are packed
1,000 to an entry (Arrow IPC via the real codec, ~100 KB values, 26-byte keys).
(a) append: KafkaLog.append in calls of ``--per-append`` entries vs a raw
KafkaProducer(acks='all', same batching options) sending the same bytes to another
topic and waiting for the same acks; (b) read: KafkaLog.read vs a raw KafkaConsumer
assign/seek/poll loop over the same bytes. One warm-up, then medians of ``--reps``.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import pyarrow as pa  # noqa: E402
from kafka import KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402
from kafka_broker import start_broker, stop_broker  # noqa: E402

from pyspark_durable.codec import EntryKey, encode_value  # noqa: E402
from pyspark_durable.codec.payload import ArrowCodec  # noqa: E402
from pyspark_durable.log import Record  # noqa: E402
from pyspark_durable.log.kafka import KafkaLogStore  # noqa: E402

ROWS_PER_ENTRY = 1000
ROW_BYTES = 100


def make_records(n: int) -> list[Record]:
    schema = pa.schema([("payload", pa.binary())])
    codec = ArrowCodec(schema)
    records = []
    for seq in range(n):
        col = pa.array([(b"%08d" % (seq * ROWS_PER_ENTRY + i)) * (ROW_BYTES // 8) + b"xxxx"
                        for i in range(ROWS_PER_ENTRY)], pa.binary())
        value = encode_value(codec.encode(pa.table([col], schema=schema)))
        key = EntryKey(namespace_id=1, region_id=0, table_id=7, sequence_num=seq).encode()
        records.append(Record(key, value, (("step", seq.to_bytes(8, "big")),)))
    return records


def timed(fn: Callable[[], int]) -> tuple[float, int]:
    start = time.perf_counter()
    nbytes = fn()
    return time.perf_counter() - start, nbytes


def median_rate(runs: list[tuple[float, int]], rows: int) -> tuple[float, float]:
    secs = statistics.median(s for s, _ in runs)
    return runs[0][1] / secs / 1e6, rows / secs


def measure(address: str, records: list[Record], per_append: int,
            reps: int) -> dict[str, list[tuple[float, int]]]:
    """One warm-up + ``reps`` rounds of the four runs against the broker at ``address``:
    {"ours_a", "raw_a", "ours_r", "raw_r"} -> [(seconds, bytes)] (warm-up excluded)."""
    nbytes = sum(len(r.key) + len(r.value) for r in records)
    store = KafkaLogStore(f"bench{uuid.uuid4().hex[:8]}", bootstrap_servers=address)
    log = store.open_region(0)
    clients = store.settings.clients
    raw_topic = store.topic("raw_0")
    store.admin.ensure(raw_topic, True, {})
    producer = KafkaProducer(
        bootstrap_servers=address, acks="all",
        **{k: clients["producer"][k] for k in ("linger_ms", "batch_size", "max_request_size")},
    )
    tp = TopicPartition(raw_topic, 0)
    consumer = KafkaConsumer(
        bootstrap_servers=address, enable_auto_commit=False,
        **{k: clients["consumer"][k] for k in ("max_partition_fetch_bytes",
                                                "fetch_max_wait_ms")},
    )
    consumer.assign([tp])

    def ours_append() -> int:
        for i in range(0, len(records), per_append):
            log.append(records[i : i + per_append])
        return nbytes

    def raw_append() -> int:
        for i in range(0, len(records), per_append):
            futures = [producer.send(raw_topic, value=r.value, key=r.key,
                                     headers=list(r.headers), partition=0)
                       for r in records[i : i + per_append]]
            producer.flush()
            for fut in futures:
                fut.get()
        return nbytes

    def ours_read(start: int) -> int:
        total = 0
        for entry in log.read(start, start + len(records)):
            total += len(entry.key) + len(entry.value)
        return total

    def raw_read(start: int) -> int:
        consumer.seek(tp, start)
        total, stop, offset = 0, start + len(records), start
        while offset < stop:
            for r in consumer.poll(timeout_ms=10_000).get(tp, ()):
                if r.offset >= stop:
                    break
                total += len(r.key) + len(r.value)
                offset = r.offset + 1
        return total

    results: dict[str, list[tuple[float, int]]] = {k: [] for k in
                                                   ("ours_a", "raw_a", "ours_r", "raw_r")}
    for rep in range(reps + 1):  # rep 0 is the warm-up
        start = rep * len(records)
        runs = [("ours_a", ours_append), ("raw_a", raw_append),
                ("ours_r", lambda s=start: ours_read(s)),
                ("raw_r", lambda s=start: raw_read(s))]
        if rep % 2:
            runs = [runs[1], runs[0], runs[3], runs[2]]  # alternate who goes first
        for name, fn in runs:
            secs, got = timed(fn)
            assert got == nbytes, (name, got, nbytes)
            if rep:
                results[name].append((secs, got))
    producer.close()
    consumer.close()
    store.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=200, help="entries per repetition")
    parser.add_argument("--per-append", type=int, default=20, help="entries per append call")
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)

    records = make_records(args.entries)
    nbytes = sum(len(r.key) + len(r.value) for r in records)
    rows = args.entries * ROWS_PER_ENTRY
    print(f"{args.entries} entries x {ROWS_PER_ENTRY} rows, {nbytes / 1e6:.1f} MB per "
          f"repetition, {args.per_append} entries per append, 1 warm-up + {args.reps} reps")

    broker = start_broker(Path(tempfile.mkdtemp(prefix="bench-tansu-")))
    try:
        results = measure(broker.address, records, args.per_append, args.reps)
        print(f"{'':8s} {'ours MB/s':>10s} {'raw MB/s':>10s} {'ours rows/s':>12s} "
              f"{'raw rows/s':>12s} {'ours/raw':>9s} {'paired':>7s}")
        for label, ours, raw in (("append", "ours_a", "raw_a"), ("read", "ours_r", "raw_r")):
            o_mb, o_rows = median_rate(results[ours], rows)
            r_mb, r_rows = median_rate(results[raw], rows)
            # each repetition runs ours and raw back to back: the median of their ratios
            # is robust to a machine whose load drifts during the run
            paired = statistics.median(
                r[0] / o[0] for o, r in zip(results[ours], results[raw], strict=True))
            print(f"{label:8s} {o_mb:10.1f} {r_mb:10.1f} {o_rows:12,.0f} {r_rows:12,.0f} "
                  f"{o_mb / r_mb:9.2f} {paired:7.2f}")
        print("ours/raw: ratio of the medians; paired: median of per-repetition ratios "
              "(target >= 0.8)")
    finally:
        stop_broker(broker)


if __name__ == "__main__":
    main()
