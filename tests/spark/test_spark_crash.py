"""Exactly-once across real crashes: streaming queries SIGKILLed mid-batch and restarted.

The child (``spark_child.py``) runs, for the file log and for Kafka, a sink query
(JSON files -> durablewal) and a source query (durablewal -> parquet), all at once, in
its own process group (Python driver, JVM, Python workers); the test kills the whole
group with SIGKILL, like a machine dying, at a random moment after a micro-batch of
any, then restarts all from their checkpoints. One Spark start per kill serves every
query of both backends. At the end every input row must be in each output exactly
once, checked by content.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
import zlib
from pathlib import Path

import pytest

from pyspark_durable.endpoint import open_namespace, read_steps, write_step
from pyspark_durable.spark.restarts import missed_connect_back
from tests.helpers import CHILDREN, ROOT, wal_config

pytestmark = [pytest.mark.spark, pytest.mark.crash, pytest.mark.kafka]
KILLS = 2  # each restart costs a Spark start (~15-40 s): 2 random kills prove the point
FILES = 8  # 8 micro-batches per query: the kills (after 1-5 batches of any) land early
ROWS_PER_FILE = 40
CONNECT_BACK_RESTARTS = 2


def payload(i: int) -> str:
    return f"row-{i}-" + "p" * (i % 17)


def run_child(pairs: list[dict], folder: Path, kill_after_batches: int | None,
              rng: random.Random) -> tuple[str, str]:
    """Run the child; kill its process group after N batches. Return its end ("done",
    "killed" or "failed") and its stderr."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, str(CHILDREN / "spark_child.py"), json.dumps(pairs), str(folder)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True)
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
        return "killed", err
    return ("done" if proc.returncode == 0 else "failed"), err


def why(err: str) -> str:
    """The child's error lines (a JVM trace buries the cause under frames), then its end."""
    causes = [ln for ln in err.splitlines() if "Error" in ln or "Exception" in ln
              or "query failed" in ln][:12]
    return "\n".join(causes) + "\n...\n" + err[-1500:]


def crash_loop(pairs: list[dict], folder: Path) -> int:
    """Kill the child KILLS times, then run it to the end; return the kills. A child whose
    query failed because one of Spark's Python processes missed its fixed 10 s to connect
    back (a loaded machine) is started again from its checkpoints, as docs/operations.md
    tells a user to, at most CONNECT_BACK_RESTARTS times; any other failure fails."""
    rng = random.Random(zlib.crc32(b"sink and source"))
    kills = 0
    restarts = 0

    def run(kill_after_batches: int | None) -> str:
        nonlocal restarts
        while True:
            end, err = run_child(pairs, folder, kill_after_batches, rng)
            if end != "failed":
                return end
            assert missed_connect_back(err) and restarts < CONNECT_BACK_RESTARTS, why(err)
            restarts += 1

    for _ in range(KILLS * 3):
        if run(rng.randint(1, 5)) == "done":
            break
        kills += 1
        if kills >= KILLS:
            break
    run(None)
    return kills


def test_sink_and_source_exactly_once_across_kills(spark, kafka_broker, tmp_path):
    """This tests that JSON files -> durablewal and durablewal -> parquet, on the file log
    and on Kafka (confluent), all running at once and killed mid-batch, each hold every
    row once: each sink's WAL has each batch committed once, in order; each source's
    output has each row once, and every row's key (_region, _table, _sequence, _row) is
    unique and the one a fresh batch read of the WAL gives that row (stable across kills
    and replays)."""
    ns = f"s{uuid.uuid4().hex[:10]}"
    backends = {"file": {"namespace": ns, "path": str(tmp_path / "wal")},
                "kafka": {"namespace": ns, "backend": "kafka",
                          "kafka.bootstrap.servers": kafka_broker, "kafka.client": "confluent"}}
    pairs = [{"name": name, "sink": opts, "source": {**opts, "namespace": ns + "src"}}
             for name, opts in backends.items()]
    for pair in pairs:
        source_ns = open_namespace(wal_config(pair["source"]))
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
    kills = crash_loop(pairs, tmp_path)
    assert kills >= KILLS
    for pair in pairs:
        check_sink(open_namespace(wal_config(pair["sink"])), pair["name"])
        check_source(spark, pair["source"], tmp_path / pair["name"] / "out", pair["name"])


def check_sink(ns, name: str) -> None:
    got = read_steps(ns, "default")
    ids = got.column("id").to_pylist()
    assert sorted(ids) == list(range(FILES * ROWS_PER_FILE)), f"{name} sink: lost or duplicated rows"
    assert all(p == payload(i) for i, p in zip(ids, got.column("payload").to_pylist(), strict=True))
    writer_steps = [ns.step_commit(s).writer_step for s in ns.steps()]
    assert len(writer_steps) == len(set(writer_steps)), f"{name}: a batch committed twice"
    assert writer_steps == sorted(writer_steps), name


def check_source(spark, source_opts: dict, out: Path, name: str) -> None:
    rows = spark.read.parquet(str(out)).collect()  # honours _spark_metadata
    ids = sorted(r.id for r in rows)
    assert ids == list(range(FILES * ROWS_PER_FILE)), f"{name} source: lost or duplicated rows"
    assert all(r.payload == payload(r.id) and r._step == r.id // ROWS_PER_FILE for r in rows)
    key = ("_region", "_table", "_sequence", "_row")
    keys = {r.id: tuple(r[k] for k in key) for r in rows}
    assert len(set(keys.values())) == len(rows), f"{name}: a row key names two rows"
    again = spark.read.format("durablewal").options(**source_opts) \
        .option("metadataColumns", ",".join(key)).load().select("id", *key)
    assert {r.id: tuple(r[k] for k in key) for r in again.collect()} == keys, name
