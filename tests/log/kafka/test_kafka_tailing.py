"""A reader that follows a namespace other processes write, on Apache Kafka, with each
client: every committed step is read whole, by content, and never called corrupt.

A committed step proves its entries exist (acknowledged with acks=all before its
commit record was written), so a read of its runs must never stop at a stale view of
a region's end (``KafkaLog.read_acknowledged``). The first test runs the normal
cluster setup for real (writer and reader processes, ``tests/children/tail_child.py``); the
second forces the race a leader change makes, deterministically.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pytest

from pyspark_durable.log import open_store
from pyspark_durable.wal import Namespace
from tests.children.stress_child import rows_for
from tests.helpers import CHILDREN, ROOT
from tests.log.kafka.test_kafka_backend import lagging

pytestmark = [pytest.mark.kafka, pytest.mark.backends("kafka-confluent", "kafka-python")]
CHILD = str(CHILDREN / "tail_child.py")
WRITERS = ("w0", "w1", "w2")
WRITE_S = 6.0  # each writer commits steps back to back this long
EXIT_TIMEOUT_S = 120.0  # a child that outlives this is stuck: the test fails


def _spawn(err: Path, role: str, config: dict, namespace: str, *args: str,
           stdin: int | None = None) -> subprocess.Popen:
    """A child whose stdout the test reads, its stderr going to ``err``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with err.open("w") as err_file:
        return subprocess.Popen([sys.executable, CHILD, role, "kafka", json.dumps(config),
                                 namespace, *args], stdin=stdin, stdout=subprocess.PIPE,
                                stderr=err_file, text=True, env=env)


def test_a_tailing_reader_reads_every_step_other_processes_commit(kafka_broker, namespace,
                                                                   client, tmp_path):
    """This tests that a reader process following a namespace from step 0 while three
    writer processes commit steps into it reads every committed step once, in order,
    with the rows each writer wrote, and that none of its reads raised an error."""
    config = {"bootstrap_servers": kafka_broker, "client": client}
    Namespace(open_store("kafka", namespace, **config)).store.close()  # created once
    reader = _spawn(tmp_path / "reader.err", "reader", config, namespace,
                    stdin=subprocess.PIPE)
    reader_lines: list[str] = []
    pump = threading.Thread(target=lambda: reader_lines.extend(reader.stdout), daemon=True)
    pump.start()
    writers = [_spawn(tmp_path / f"{w}.err", "writer", config, namespace, w, str(WRITE_S))
               for w in WRITERS]
    acked: dict[int, tuple[str, int]] = {}
    for name, w in zip(WRITERS, writers, strict=True):
        out, _ = w.communicate(timeout=EXIT_TIMEOUT_S)
        err = (tmp_path / f"{name}.err").read_text()
        assert w.returncode == 0 and out.endswith("DONE\n"), err[-4000:]
        for line in out.splitlines()[:-1]:
            _, writer_id, ws, step = line.split()
            assert int(step) not in acked, f"step {step} acknowledged twice"
            acked[int(step)] = (writer_id, int(ws))
    assert sorted(acked) == list(range(len(acked)))  # steps are dense
    reader.stdin.write(f"{len(acked)}\n")
    reader.stdin.close()
    reader.wait(timeout=EXIT_TIMEOUT_S)
    pump.join(timeout=EXIT_TIMEOUT_S)
    err = (tmp_path / "reader.err").read_text()
    errors = [line for line in reader_lines if not line.startswith(("READ", "DONE"))]
    assert reader.returncode == 0 and not errors, "".join(errors[:20]) + err[-4000:]
    assert reader_lines[-1] == "DONE\n"
    read = [line.split() for line in reader_lines[:-1]]
    assert [int(words[1]) for words in read] == list(range(len(acked)))  # each once, in order
    assert {int(words[1]): (words[2], int(words[3])) for words in read} == acked
    assert len(acked) >= 3 * len(WRITERS)  # the writers were not stuck


def test_a_committed_step_is_read_whole_through_a_stale_view(kafka_broker, namespace, client):
    """This tests that a namespace handle that knew the regions' ends before another
    process committed a step reads that step's rows whole when the broker first answers
    the old ends and a fetch stops early, instead of calling the step corrupt."""
    config = {"bootstrap_servers": kafka_broker, "client": client}
    writer = Namespace(open_store("kafka", namespace, **config))
    lag = {"ends": {}, "stale": 0, "early": 0}
    reader = Namespace(lagging(open_store("kafka", namespace, **config), lag))
    try:
        for ws in range(2):
            if ws == 1:  # the reader has read step 0: it knows the regions' ends
                lag.update(stale=4, early=2, ends={
                    f"{namespace}_region_{r}": writer.store.open_region(r).high_watermark()
                    for r in (0, 1)})
            attempt = writer.begin("w", ws)
            attempt.write("a", rows_for("w", ws, "a"), region_id=0)
            attempt.write("b", rows_for("w", ws, "b"), region_id=1)
            step = attempt.commit()
            assert reader.steps().stop == step + 1
            got: dict[str, list[pa.RecordBatch]] = {"a": [], "b": []}
            for batch in reader.read_step(step):
                got[reader.tables.by_id(refresh=False)[batch.table_id].name].extend(batch.batches)
            for table, batches in got.items():
                expect = rows_for("w", ws, table)
                assert pa.Table.from_batches(batches, schema=expect.schema).equals(expect)
        assert (lag["stale"], lag["early"]) == (0, 0)  # the stale answers were given
    finally:
        reader.store.close()
        writer.store.close()
