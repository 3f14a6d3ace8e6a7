"""Exactly-once across real crashes: streaming queries SIGKILLed mid-batch and restarted.

The child (``spark_child.py``) runs a sink query (JSON files -> durablewal) and a
source query (durablewal -> parquet) at once, in its own process group (Python
driver, JVM, Python workers); the test kills the whole group with SIGKILL, like a
machine dying, at a random moment after a micro-batch of either, then restarts both
from their checkpoints. One Spark start per kill serves both queries. At the end every
input row must be in each output exactly once, checked by content.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest
from helpers import CHILDREN, wal_config

from pyspark_durable.endpoint import open_namespace, read_steps, write_step

pytestmark = [pytest.mark.spark, pytest.mark.crash, pytest.mark.backends("file", "kafka-confluent")]
HERE = Path(__file__).parent
KILLS = 2  # each restart costs a Spark start (~15-40 s): 2 random kills prove the point
FILES = 8  # 16 micro-batches in all: the kills (after 1-5 batches) land in the first half
ROWS_PER_FILE = 40


def payload(i: int) -> str:
    return f"row-{i}-" + "p" * (i % 17)


def run_child(sink_wal: dict, source_wal: dict, folder: Path,
              kill_after_batches: int | None, rng: random.Random) -> tuple[bool, str]:
    """Run the child; kill its process group after N batches. Return (finished, stderr)."""
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent.parent)])}
    proc = subprocess.Popen(
        [sys.executable, str(CHILDREN / "spark_child.py"), json.dumps(sink_wal),
         json.dumps(source_wal), str(folder)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=env, start_new_session=True)
    batches = 0
    killed = False
    try:
        for line in proc.stdout:
            if line.startswith("BATCH"):
                batches += 1
                if kill_after_batches is not None and batches >= kill_after_batches:
                    time.sleep(rng.uniform(0.0, 0.6))  # land somewhere inside the next batch
                    os.killpg(proc.pid, signal.SIGKILL)
                    killed = True
                    break
            if line.strip() == "DONE":
                break
    finally:
        _, err = proc.communicate(timeout=300)
    if killed:
        return False, err
    assert proc.returncode == 0, err[-3000:]
    return True, err


@pytest.fixture
def crash_wal(wal: dict) -> tuple[dict, dict]:
    """(Spark options, endpoint config) of a fresh namespace on the test's backend."""
    return wal, wal_config(wal)


def crash_loop(sink_wal: dict, source_wal: dict, folder: Path) -> int:
    rng = random.Random(zlib.crc32(b"sink and source"))
    kills = 0
    for _ in range(KILLS * 3):
        done, _ = run_child(sink_wal, source_wal, folder, rng.randint(1, 5), rng)
        if done:
            break
        kills += 1
        if kills >= KILLS:
            break
    done, err = run_child(sink_wal, source_wal, folder, None, rng)
    assert done, err[-3000:]
    return kills


def test_sink_and_source_exactly_once_across_kills(spark, crash_wal, tmp_path):
    """This tests that JSON files -> durablewal and durablewal -> parquet, running at once
    and killed mid-batch ≥3 times, each hold every row once: the sink's WAL has each
    batch committed once, in order; the source's output has each row once, and every
    row's key (_region, _table, _sequence, _row) is unique and the one a fresh batch read
    of the WAL gives that row (stable across kills and replays); on the file log and on
    Kafka."""
    spark_opts, config = crash_wal
    source_opts = {**spark_opts, "namespace": spark_opts["namespace"] + "src"}
    source_ns = open_namespace({**config, "namespace": source_opts["namespace"]})
    for step in range(FILES):
        write_step(source_ns, "loader", step, {"default": [
            {"id": step * ROWS_PER_FILE + i, "payload": payload(step * ROWS_PER_FILE + i)}
            for i in range(ROWS_PER_FILE)]})
    in_dir = tmp_path / "in"
    in_dir.mkdir()
    for f in range(FILES):
        rows = [{"id": f * ROWS_PER_FILE + i, "payload": payload(f * ROWS_PER_FILE + i)}
                for i in range(ROWS_PER_FILE)]
        (in_dir / f"{f:04d}.json").write_text("\n".join(json.dumps(r) for r in rows))
    kills = crash_loop(spark_opts, source_opts, tmp_path)
    assert kills >= KILLS
    check_sink(open_namespace(config))
    check_source(spark, source_opts, tmp_path / "out")


def check_sink(ns) -> None:
    got = read_steps(ns, "default")
    ids = got.column("id").to_pylist()
    assert sorted(ids) == list(range(FILES * ROWS_PER_FILE)), "sink: lost or duplicated rows"
    assert all(p == payload(i) for i, p in zip(ids, got.column("payload").to_pylist(), strict=False))
    writer_steps = [ns.step_commit(s).writer_step for s in ns.steps()]
    assert len(writer_steps) == len(set(writer_steps)), "a batch committed twice"
    assert writer_steps == sorted(writer_steps)


def check_source(spark, source_opts: dict, out: Path) -> None:
    rows = spark.read.parquet(str(out)).collect()  # honours _spark_metadata
    ids = sorted(r.id for r in rows)
    assert ids == list(range(FILES * ROWS_PER_FILE)), "source: lost or duplicated rows"
    assert all(r.payload == payload(r.id) and r._step == r.id // ROWS_PER_FILE for r in rows)
    key = ("_region", "_table", "_sequence", "_row")
    keys = {r.id: tuple(r[k] for k in key) for r in rows}
    assert len(set(keys.values())) == len(rows), "a row key names two rows"
    again = spark.read.format("durablewal").options(**source_opts).load().select("id", *key)
    assert {r.id: tuple(r[k] for k in key) for r in again.collect()} == keys
