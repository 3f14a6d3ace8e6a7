"""Many processes racing for the same commit point of a WAL in a bucket, and the server
killed under writers. On S3 nothing orders commits but ``If-None-Match``: these tests try
to make two processes win one offset, or one writer step become two steps.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow as pa
import pytest

from pyspark_durable.errors import BackendUnavailable
from pyspark_durable.log import open_store
from pyspark_durable.wal import Namespace
from tests.children.race_child import rows_for
from tests.helpers import CHILDREN, ROOT, s3_options
from tests.s3_server import seaweed_for_tests
from tests.wal.test_retention_races import verify

pytestmark = pytest.mark.s3
CHILD = str(CHILDREN / "race_child.py")
RACERS = 16


def race(options: dict, namespace: str, pairs: list[tuple[str, int]]) -> list[int]:
    """One committer process per (writer, writer step): all write their entries and pause
    before committing; then all are let go at once. The step each one was told."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen(
        [sys.executable, CHILD, "commit", "s3", json.dumps(options), namespace, "written",
         writer, str(ws)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=env) for writer, ws in pairs]
    for proc in procs:  # every one has written its entries and waits
        line = proc.stdout.readline()
        assert line.startswith("PAUSED written"), (line, proc.stderr.read())
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    steps = []
    for proc in procs:
        out = proc.stdout.read()
        assert proc.wait(timeout=300) == 0, proc.stderr.read()
        acks = [int(ln.split()[1]) for ln in out.splitlines() if ln.startswith("ACK")]
        assert len(acks) == 1, out
        steps.append(acks[0])
    return steps


def test_sixteen_processes_racing_one_writer_step_commit_one_step(s3_server):
    """This tests that 16 processes committing the same (writer, writer step) at once
    make exactly one step, and every one of them is told its number."""
    options = s3_options(s3_server)
    Namespace(open_store("s3", "one", **options)).close()
    steps = race(options, "one", [("racer", 3)] * RACERS)
    assert steps == [0] * RACERS
    ns = verify(lambda: open_store("s3", "one", **options), {("racer", 3): 0})
    assert ns.steps() == range(0, 1)


def test_sixteen_processes_racing_distinct_writer_steps_commit_sixteen_dense_steps(s3_server):
    """This tests that 16 processes committing 16 distinct (writer, writer step) pairs at
    once make 16 dense steps, each process told its own, each step its writer's rows."""
    options = s3_options(s3_server)
    Namespace(open_store("s3", "many", **options)).close()
    pairs = [(f"racer{i}", i) for i in range(RACERS)]
    steps = race(options, "many", pairs)
    assert sorted(steps) == list(range(RACERS))
    ns = verify(lambda: open_store("s3", "many", **options), dict(zip(pairs, steps, strict=True)))
    assert ns.steps() == range(0, RACERS)


@pytest.fixture
def own_server(tmp_path):
    """A server of this test's own: it is killed and restarted."""
    with seaweed_for_tests(tmp_path / "seaweed") as server:
        server.make_bucket("wal")
        yield server


def commit(ns: Namespace, ws: int) -> int:
    attempt = ns.begin("w", ws)
    attempt.write("a", rows_for("w", ws, "a"), region_id=0)
    attempt.write("b", rows_for("w", ws, "b"), region_id=1)
    return attempt.commit()


def test_a_server_killed_under_a_writer_gives_typed_retriable_errors_then_exactly_once(own_server):
    """This tests that while the server is down (killed with SIGKILL) a commit fails with
    a typed, retriable error and nothing half-visible, and that once it is back the writer
    retries the same writer step and every acknowledged step reads back once, by content."""
    options = s3_options(own_server, max_attempts="2")
    ns = Namespace(open_store("s3", "down", **options))
    acked = {("w", ws): commit(ns, ws) for ws in range(3)}
    own_server.kill()
    errors = []
    for ws in (3, 4):
        with pytest.raises(BackendUnavailable) as caught:
            commit(ns, ws)
        assert caught.value.retriable
        errors.append(str(caught.value))
    assert all(own_server.endpoint.removeprefix("http://") in e for e in errors), errors
    own_server.restart()
    for ws in (3, 4, 5):  # the writer's retry of what failed, then one more
        acked[("w", ws)] = commit(ns, ws)
    assert sorted(acked.values()) == list(range(6))
    fresh = verify(lambda: open_store("s3", "down", **options), acked)
    assert fresh.steps() == range(0, 6)
    got = pa.Table.from_batches([b for sb in fresh.read_step(acked[("w", 4)])
                                 if fresh.tables.by_id(refresh=False)[sb.table_id].name == "a"
                                 for b in sb.batches])
    assert got.equals(rows_for("w", 4, "a"))
