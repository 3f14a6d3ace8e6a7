"""Crash tests of the WAL with real processes killed by SIGKILL at random moments."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
from helpers import assert_acknowledged

from pyspark_durable.log import open_store
from pyspark_durable.wal import Namespace

sys.path.insert(0, str(Path(__file__).parent))
from wal_child import WRITER, rows_for

pytestmark = pytest.mark.crash
BACKENDS = ["file", "confluent"]
CHILD = str(Path(__file__).parent / "wal_child.py")
KILLS = {"file": 20, "kafka": 10}
TOTAL_STEPS = 300


def run_child(backend: str, config: dict, namespace: str, mode: str, steps: int,
              kill: tuple[int, float] | None) -> tuple[list[tuple[int, int]], bool]:
    """Run the child; with ``kill=(n, s)``, SIGKILL it ``s`` seconds after its n-th ack.

    Counting acks bounds the progress of one run whatever the machine's speed; the
    random delay after them lands the kill anywhere inside the following steps.
    """
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    proc = subprocess.Popen(
        [sys.executable, CHILD, backend, json.dumps(config), namespace, mode, str(steps)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lines: list[str] = []
    if kill is not None:
        for line in proc.stdout:  # blocks on the child's acknowledgements
            lines.append(line)
            if line.startswith("ACK") and sum(ln.startswith("ACK") for ln in lines) >= kill[0]:
                time.sleep(kill[1])  # the random moment of the kill is the point of the test
                os.kill(proc.pid, signal.SIGKILL)
                break
    # read the rest through the same buffered stream: communicate() would read the pipe's
    # file descriptor directly and drop lines this wrapper already buffered (lost ACKs)
    lines += proc.stdout.read().splitlines()
    err = proc.stderr.read()
    proc.wait(timeout=120)
    if kill is None or proc.returncode != -signal.SIGKILL:
        assert proc.returncode in (0, -signal.SIGKILL), err
    acks = [(int(p[1]), int(p[2])) for p in (ln.split() for ln in lines) if p and p[0] == "ACK"]
    return acks, any(ln.strip() == "DONE" for ln in lines)


def expected_step_rows(ws: int) -> dict[str, pa.Table]:
    return {"a": rows_for(ws, "a"), "b": rows_for(ws, "b")}


def check_namespace(ns: Namespace, acked: dict[int, int], retained_only: bool) -> None:
    """Every acknowledged step once, by content; nothing of abandoned attempts; dense sequences."""
    steps = ns.steps()
    seen_ws: dict[int, int] = {}
    seqs: dict[int, list[int]] = {}
    for step in steps:
        commit = ns.step_commit(step)
        assert commit.writer_id == WRITER
        ws = commit.writer_step
        assert ws not in seen_ws, f"writer step {ws} committed twice: {seen_ws[ws]} and {step}"
        seen_ws[ws] = step
        got: dict[str, list[pa.RecordBatch]] = {}
        for sb in ns.read_step(step):
            got.setdefault(ns.state.tables[sb.table_id].name, []).extend(sb.batches)
            seqs.setdefault((sb.region_id, sb.table_id), []).append(sb.sequence_num)
        for table, expect in expected_step_rows(ws).items():
            if expect.num_rows == 0:
                assert table not in got, (step, ws, table)
                continue
            assert pa.Table.from_batches(got[table]).equals(expect), (step, ws, table)
    for ws, step in acked.items():
        assert_acknowledged(ns, WRITER, ws, step)
        if not retained_only or step >= steps.start:
            assert seen_ws.get(ws) == step, f"acknowledged ws={ws} step={step} is missing"
    for key, got_seqs in seqs.items():
        expect_end = ns.state.next_sequences[key]
        assert got_seqs == list(range(expect_end - len(got_seqs), expect_end)), key


# each Kafka client gets one of the two modes
@pytest.mark.parametrize("store_config,mode", [("file", "write"), ("file", "clean"),
                                               ("confluent", "write"), ("kafka-python", "clean")],
                         indirect=["store_config"])
def test_writer_killed_at_random_points(make_store, store_config, namespace, mode):
    """This tests that a writer (and cleaner) killed by SIGKILL ≥ 20 times loses and duplicates nothing."""
    backend, config = store_config
    make_store().close()  # the namespace exists before the first child
    rng = random.Random(0xD0AB1E)
    acked: dict[int, int] = {}
    kills = 0
    for _ in range(KILLS[backend] * 3):
        if kills >= KILLS[backend]:
            break
        acks, done = run_child(backend, config, namespace, mode, TOTAL_STEPS,
                               (rng.randint(1, 6), rng.uniform(0.0, 0.05)))
        for ws, step in acks:
            assert acked.setdefault(ws, step) == step, f"ws={ws} acknowledged as two steps"
        if done:
            break
        kills += 1
        # after every kill, a fresh process recovers a consistent namespace
        check_namespace(Namespace(open_store(backend, namespace, **config)), acked,
                        retained_only=mode == "clean")
    assert kills >= KILLS[backend], f"only {kills} kills happened before the writer finished"
    acks, done = run_child(backend, config, namespace, mode, TOTAL_STEPS, None)
    assert done
    acked.update(acks)
    ns = Namespace(open_store(backend, namespace, **config))
    check_namespace(ns, acked, retained_only=mode == "clean")
    assert sorted(acked) == list(range(TOTAL_STEPS))
    if mode == "write":
        assert ns.steps() == range(0, TOTAL_STEPS)
