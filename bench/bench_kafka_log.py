"""Benchmark: KafkaLog vs the raw Kafka client it runs on, side by side in one run.

    python bench/bench_kafka_log.py [--entries 200] [--per-append 20] [--reps 7]
                                    [--clients confluent,kafka-python]

Starts its own Apache Kafka broker (tests/kafka_broker.py). Rows of ~100 bytes are packed
1,000 to an entry (Arrow IPC via the real codec, ~100 KB values, 26-byte keys).
For each client (the store option ``client``): (a) append: KafkaLog.append in calls
of ``--per-append`` entries vs the raw producer of the same client (acks=all,
idempotence, the log's batching options) sending the same bytes to partition 0 of
another 1-partition topic and waiting for every acknowledgement; (b) read:
KafkaLog.read vs the raw consumer (assign at an offset, then poll / consume) over
the same bytes. One warm-up, then medians of ``--reps``.
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
sys.path[:0] = [str(ROOT)]

import pyarrow as pa  # noqa: E402
from kafka import KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402

from pyspark_durable.codec import EntryKey, encode_value  # noqa: E402
from pyspark_durable.codec.payload import ArrowCodec  # noqa: E402
from pyspark_durable.log import Record  # noqa: E402
from pyspark_durable.log.kafka.store import KafkaLogStore  # noqa: E402
from pyspark_durable.log.kafka.topics import LOG_TOPIC_CONFIG  # noqa: E402
from tests.kafka_broker import start_broker, stop_broker  # noqa: E402

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


RawPair = tuple[Callable[[], int], Callable[[int], int], Callable[[], None]]


def raw_kafka_python(address: str, store: KafkaLogStore, topic: str, records: list[Record],
                     per_append: int) -> RawPair:
    """Raw kafka-python with the log's settings: a KafkaProducer (acks=all, idempotence,
    the same batching) and an assign/seek/poll KafkaConsumer. (append, read, close)."""
    clients = store.settings.clients
    producer = KafkaProducer(
        bootstrap_servers=address, acks="all", enable_idempotence=True,
        **{k: clients["producer"][k] for k in ("linger_ms", "batch_size", "max_request_size")},
    )
    tp = TopicPartition(topic, 0)
    consumer = KafkaConsumer(
        bootstrap_servers=address, enable_auto_commit=False,
        **{k: clients["consumer"][k] for k in ("max_partition_fetch_bytes",
                                                "fetch_max_wait_ms")},
    )
    consumer.assign([tp])
    nbytes = sum(len(r.key) + len(r.value) for r in records)

    def append() -> int:
        for i in range(0, len(records), per_append):
            futures = [producer.send(topic, value=r.value, key=r.key,
                                     headers=list(r.headers), partition=0)
                       for r in records[i : i + per_append]]
            producer.flush()
            for fut in futures:
                fut.get()
        return nbytes

    def read(start: int) -> int:
        consumer.seek(tp, start)
        total, stop, offset = 0, start + len(records), start
        while offset < stop:
            for r in consumer.poll(timeout_ms=10_000).get(tp, ()):
                if r.offset >= stop:
                    break
                total += len(r.key) + len(r.value)
                offset = r.offset + 1
        return total

    def close() -> None:
        producer.close()
        consumer.close()

    return append, read, close


def raw_confluent(address: str, store: KafkaLogStore, topic: str, records: list[Record],
                  per_append: int) -> RawPair:
    """Raw confluent-kafka with the log's settings: a Producer (acks=all, idempotence,
    linger.ms, batch.size, message.max.bytes and compression as the log's) that waits for
    every delivery report, and a Consumer reading with assign() at an offset + consume()."""
    from confluent_kafka import Consumer, KafkaError, Producer
    from confluent_kafka import TopicPartition as RdPartition

    prod_cfg, cons_cfg = store.settings.clients["producer"], store.settings.clients["consumer"]
    producer = Producer({
        "bootstrap.servers": address, "acks": "all", "enable.idempotence": "true",
        **{k: prod_cfg[k] for k in ("linger.ms", "batch.size", "message.max.bytes",
                                    "compression.type")},
    })
    consumer = Consumer({
        "bootstrap.servers": address, "group.id": "bench-raw-assign-only",
        "enable.auto.commit": "false", "auto.offset.reset": "error",
        **{k: cons_cfg[k] for k in ("fetch.wait.max.ms", "max.partition.fetch.bytes")},
    })
    nbytes = sum(len(r.key) + len(r.value) for r in records)
    errors: list[KafkaError] = []

    def delivered(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    def append() -> int:
        for i in range(0, len(records), per_append):
            for r in records[i : i + per_append]:
                while True:
                    try:
                        producer.produce(topic, r.value, r.key, partition=0,
                                         headers=list(r.headers), on_delivery=delivered)
                        break
                    except BufferError:  # local queue full: serve deliveries first
                        producer.poll(0.05)
            left = producer.flush(60)  # serves every delivery report of this call
            assert left == 0 and not errors, (left, errors[:1])
        return nbytes

    def read(start: int) -> int:
        consumer.assign([RdPartition(topic, 0, start)])
        total, stop, offset = 0, start + len(records), start
        while offset < stop:
            # consume() returns when it has this many messages (or at the timeout):
            # ask for exactly what is left, as KafkaLog.read does
            for msg in consumer.consume(min(stop - offset, 10_000), 10.0):
                if msg.error() is not None:
                    raise RuntimeError(msg.error())
                if msg.offset() >= stop:
                    break
                total += len(msg.key()) + len(msg.value())
                offset = msg.offset() + 1
        consumer.unassign()  # no background fetching while the other side runs
        return total

    def close() -> None:
        producer.flush(10)
        consumer.close()

    return append, read, close


RAW = {"confluent": raw_confluent, "kafka-python": raw_kafka_python}
RAW_NAMES = {"confluent": "raw confluent-kafka", "kafka-python": "raw kafka-python"}
TARGETS = {"confluent": 0.9, "kafka-python": 0.8}  # log layer / raw client


def measure(address: str, records: list[Record], per_append: int, reps: int,
            client: str = "confluent") -> dict[str, list[tuple[float, int]]]:
    """One warm-up + ``reps`` rounds of the four runs against the broker at ``address``,
    with the log and its raw peer on the same ``client``:
    {"ours_a", "raw_a", "ours_r", "raw_r"} -> [(seconds, bytes)] (warm-up excluded)."""
    nbytes = sum(len(r.key) + len(r.value) for r in records)
    store = KafkaLogStore(f"bench{uuid.uuid4().hex[:8]}", bootstrap_servers=address,
                          client=client)
    log = store.open_region(0)
    raw_topic = store.topic("raw_0")
    store.admin.ensure(raw_topic, True, LOG_TOPIC_CONFIG)  # the log topics' settings
    raw_append, raw_read, raw_close = RAW[client](address, store, raw_topic, records,
                                                  per_append)

    def ours_append() -> int:
        for i in range(0, len(records), per_append):
            log.append(records[i : i + per_append])
        return nbytes

    def ours_read(start: int) -> int:
        total = 0
        for entry in log.read(start, start + len(records)):
            total += len(entry.key) + len(entry.value)
        return total

    results: dict[str, list[tuple[float, int]]] = {k: [] for k in
                                                   ("ours_a", "raw_a", "ours_r", "raw_r")}
    try:
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
    finally:
        raw_close()
        store.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=200, help="entries per repetition")
    parser.add_argument("--per-append", type=int, default=20, help="entries per append call")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--clients", default="confluent,kafka-python",
                        help="Kafka clients to measure, each against its own raw client")
    args = parser.parse_args()
    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    if not clients or set(clients) - set(RAW):
        parser.error(f"--clients: choose from {', '.join(RAW)}")
    logging.basicConfig(level=logging.ERROR)

    records = make_records(args.entries)
    nbytes = sum(len(r.key) + len(r.value) for r in records)
    rows = args.entries * ROWS_PER_ENTRY
    print(f"{args.entries} entries x {ROWS_PER_ENTRY} rows, {nbytes / 1e6:.1f} MB per "
          f"repetition, {args.per_append} entries per append, 1 warm-up + {args.reps} reps")

    broker = start_broker(Path(tempfile.mkdtemp(prefix="bench-kafka-")))
    try:
        print(f"{'':22s} {'ours MB/s':>10s} {'raw MB/s':>10s} {'ours rows/s':>12s} "
              f"{'raw rows/s':>12s} {'ours/raw':>9s} {'paired':>7s}")
        for client in clients:
            results = measure(broker.bootstrap, records, args.per_append, args.reps, client)
            for label, ours, raw in (("append", "ours_a", "raw_a"), ("read", "ours_r", "raw_r")):
                o_mb, o_rows = median_rate(results[ours], rows)
                r_mb, r_rows = median_rate(results[raw], rows)
                # each repetition runs ours and raw back to back: the median of their
                # ratios is robust to a machine whose load drifts during the run
                paired = statistics.median(
                    r[0] / o[0] for o, r in zip(results[ours], results[raw], strict=True))
                name = f"{label} [{client}]"
                print(f"{name:22s} {o_mb:10.1f} {r_mb:10.1f} {o_rows:12,.0f} {r_rows:12,.0f} "
                      f"{o_mb / r_mb:9.2f} {paired:7.2f}")
        print("ours/raw: ratio of the medians; paired: median of per-repetition ratios "
              f"(target >= {TARGETS['confluent']} for confluent, "
              f">= {TARGETS['kafka-python']} for kafka-python)")
    finally:
        stop_broker(broker)


if __name__ == "__main__":
    main()
