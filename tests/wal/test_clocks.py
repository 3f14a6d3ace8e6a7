"""Clocks no single host can push (wal/replay/clocks.py, docs/protocol.md "Clocks").

Each skewed host is a real separate process whose every wall-clock read is off by
eight days: ``clock_child.py`` under an LD_PRELOAD shim (``clock_shim.c``, built here
with gcc) that shifts clock_gettime(CLOCK_REALTIME), gettimeofday and time, the calls
Python's ``time.time()`` and the file log's entry timestamps go through. The test
process is the host with a right clock. Each test asserts what a user relies on:
healthy writers are not refused, no live step or young attempt is deleted, writers keep
cleaning, and a host that must be refused gets a typed error naming both clocks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

from pyspark_durable.endpoint import read_steps
from pyspark_durable.errors import WriterStepExpired
from pyspark_durable.log import Record, open_store
from pyspark_durable.spark.options import WalOptions
from pyspark_durable.spark.session_cache import namespace_for
from pyspark_durable.spark.sink import keep_retention
from pyspark_durable.wal import Cleaner, Namespace, RetentionPolicy
from pyspark_durable.wal.format.records import (
    CleanRecord,
    DedupRecord,
    NsRecord,
    StepCommit,
    encode_meta,
)
from pyspark_durable.wal.ledger import COMMITS_LOG
from pyspark_durable.wal.replay.clocks import CLOCK_STEP_MS
from pyspark_durable.wal.replay.dedup import DEDUP_STEPS, DEDUP_WINDOW_MS
from pyspark_durable.wal.replay.state import NamespaceState
from tests.helpers import CHILDREN, ROOT, TESTS

DAY_MS = 86_400_000
AHEAD_MS, BEHIND_MS = 8 * DAY_MS, -8 * DAY_MS
NAMESPACE = "clocks"


@pytest.fixture(scope="session")
def clock_shim(tmp_path_factory) -> Path:
    """The preload shim, built once; a machine without gcc fails here, never skips."""
    out = tmp_path_factory.mktemp("shim") / "clock_shim.so"
    built = subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-o", str(out),
                            str(TESTS / "clock_shim.c"), "-ldl"], capture_output=True, text=True)
    assert built.returncode == 0, f"gcc could not build the clock shim: {built.stderr}"
    return out


@pytest.fixture
def wal(tmp_path) -> Path:
    return tmp_path / "wal"


def open_ns(path: Path) -> Namespace:
    return Namespace(open_store("file", NAMESPACE, path=str(path)))


def host(shim: Path, skew_ms: int, path: Path, **args) -> dict:
    """Run one op in a separate process whose clock is off by ``skew_ms``; its output."""
    env = {**os.environ, "LD_PRELOAD": str(shim), "CLOCK_SKEW_MS": str(skew_ms),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    before = int(time.time() * 1000)
    done = subprocess.run([sys.executable, str(CHILDREN / "clock_child.py"),
                           json.dumps({"path": str(path), "namespace": NAMESPACE, **args})],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    # the skew took effect: the child's clock reads ours plus skew_ms
    assert before + skew_ms - 1_000 <= out["now_ms"] <= int(time.time() * 1000) + skew_ms
    return out


def rows(tag: str) -> pa.Table:
    return pa.table({"tag": pa.array([tag], pa.string())})


def commit(ns: Namespace, writer: str, step: int = 0, started_ms: int | None = None,
           consecutive: bool = False) -> int:
    attempt = ns.begin(writer, step)
    attempt.write("t", rows(f"{writer}/{step}"))
    return ns.commit(writer, step, [attempt.receipt()], consecutive=consecutive,
                     started_ms=started_ms)


def now_ms() -> int:
    return int(time.time() * 1000)


def agree(path: Path, ns: Namespace) -> None:
    """A full replay, a recovery from the newest snapshot and this handle decide alike."""
    states = [open_ns(path).ledger.state]
    commits = open_store("file", NAMESPACE, path=str(path)).open_log(COMMITS_LOG)
    if commits.low_watermark() == 0:  # (a cleaner may have trimmed the log below a snapshot)
        full = NamespaceState(NAMESPACE)
        full.replay(commits)
        states.append(full)
    for s in states:
        assert (s.next_step, s.pairs, s.dedup.clock_ms, s.dedup.forgot_start_ms) == \
            (ns.ledger.state.next_step, ns.ledger.state.pairs, ns.ledger.state.dedup.clock_ms,
             ns.ledger.state.dedup.forgot_start_ms)


def test_a_commit_from_a_host_ahead_refuses_no_healthy_batch_write(clock_shim, wal):
    """This tests that one batch write committed by a host 8 days ahead moves the WAL's
    clock at most CLOCK_STEP_MS, and that batch writes of hosts with a right clock
    committed after it, new ones and a recommit of an earlier one, are not refused
    (the old code refused every one of them with WriterStepExpired for about a day)."""
    ns = open_ns(wal)
    start_a = now_ms()
    assert commit(ns, "batch-a", started_ms=start_a) == 0
    assert host(clock_shim, AHEAD_MS, wal, op="batch", writer="batch-ahead")["result"] == 1
    ns.refresh()
    assert ns.info.clock_ms() <= now_ms() + CLOCK_STEP_MS
    assert commit(ns, "batch-b", started_ms=now_ms()) == 2
    assert commit(ns, "batch-a", started_ms=start_a) == 0  # remembered: its step
    assert commit(ns, "q", 0, consecutive=True) == 3
    assert ns.steps() == range(0, 4)
    agree(wal, ns)


def test_a_host_behind_gets_a_clock_error_naming_both_clocks_or_writes_safely(clock_shim, wal):
    """This tests a host 8 days behind on a WAL that has forgotten a one-off writer: a
    batch write that passes its own clock as the start is ClockSkew naming both clocks
    (not WriterStepExpired) and commits nothing; the Spark sink's start
    (one_off_start_ms) lets it batch-write; its streaming steps commit and recommit."""
    ns = open_ns(wal)
    t0 = now_ms()
    assert commit(ns, "batch-old", started_ms=t0 - DEDUP_WINDOW_MS + DAY_MS // 10) == 0
    ns.ledger.append(CleanRecord(t0 + DAY_MS // 5, {}))  # a pass moves the clock 0.2 days
    ns.refresh()
    assert "batch-old" not in ns.ledger.state.dedup.writers  # forgotten: its start is past the window
    out = host(clock_shim, BEHIND_MS, wal, op="batch", writer="batch-late")
    assert out["error"]["type"] == "ClockSkew", out
    assert abs(out["error"]["own_ms"] - (t0 + BEHIND_MS)) < 60_000
    assert out["error"]["wal_ms"] == ns.info.clock_ms()
    assert "behind the WAL's clock" in out["error"]["message"]
    assert ns.steps() == range(0, 1)
    assert host(clock_shim, BEHIND_MS, wal, op="batch-sink", writer="batch-late2")["result"] == 1
    for _ in range(2):  # a commit and its recommit
        assert host(clock_shim, BEHIND_MS, wal, op="stream", writer="q", step=0)["result"] == 2
    assert commit(ns, "q", 1, consecutive=True) == 3
    agree(wal, ns)


@pytest.mark.parametrize("skew_ms", [AHEAD_MS, BEHIND_MS], ids=["ahead", "behind"])
def test_streaming_recommits_from_a_skewed_host_return_their_step(clock_shim, wal, skew_ms):
    """This tests that a streaming writer on a skewed host commits, that its recommit of
    its last step returns that step (no second step), and that a writer with a right
    clock continues the same writer's steps and recommits them alike."""
    ns = open_ns(wal)
    for _ in range(2):
        assert host(clock_shim, skew_ms, wal, op="stream", writer="q", step=0)["result"] == 0
    assert commit(ns, "q", 1, consecutive=True) == 1
    assert host(clock_shim, skew_ms, wal, op="stream", writer="q", step=1)["result"] == 1
    assert host(clock_shim, skew_ms, wal, op="stream", writer="q", step=2)["result"] == 2
    assert commit(ns, "q", 2, consecutive=True) == 2
    assert commit(ns, "q", 3, consecutive=True) == 3
    assert ns.steps() == range(0, 4)
    agree(wal, ns)


def test_a_cleaner_ahead_deletes_no_live_step_and_no_young_attempt(clock_shim, wal):
    """This tests a cleaner 8 days ahead, with a retention max age of one day and a
    5-minute grace, running two passes: it expires none of the steps committed seconds
    earlier and deletes no entry of an uncommitted attempt a second old, which then
    commits (the old code expired every step and lost the attempt)."""
    ns = open_ns(wal)
    ns.set_retention(RetentionPolicy(max_age_ms=DAY_MS))
    for ws in range(5):
        assert commit(ns, "q", ws, consecutive=True) == ws
    attempt = ns.begin("q", 5)
    attempt.write("t", rows("q/5"))
    receipt = attempt.receipt()
    time.sleep(1)
    for _ in range(2):
        assert host(clock_shim, AHEAD_MS, wal, op="clean", grace_ms=300_000)["result"] == 0
    assert ns.steps() == range(0, 5)
    assert ns.commit("q", 5, [receipt], consecutive=True) == 5
    got = read_steps(ns, "t")
    assert sorted(got.column("tag").to_pylist()) == [f"q/{i}" for i in range(6)]
    # a cleaner with a right clock still applies the policy: a step older than max_age goes
    ns.set_retention(RetentionPolicy(max_steps=2))
    Cleaner(ns, grace_ms=0).run_once()
    assert ns.steps() == range(4, 6)
    agree(wal, ns)


def test_one_pass_from_a_host_ahead_stops_no_writers_auto_clean(clock_shim, wal):
    """This tests the Spark sink's shared clean schedule (cleanIntervalMs and the newest
    pass's time): after one pass of a cleaner 8 days ahead, a writer with a right clock
    still runs its due cleaner pass after a commit, and that pass puts the schedule back
    on its clock (the old code skipped every writer's pass for 8 days)."""
    ns = open_ns(wal)
    for ws in range(3):
        commit(ns, "q", ws, consecutive=True)
    host(clock_shim, AHEAD_MS, wal, op="clean", grace_ms=0)
    assert ns.ledger.refreshed().last_clean_ms > now_ms() + AHEAD_MS - 60_000
    opts = WalOptions.parse({"path": str(wal), "namespace": NAMESPACE,
                             "cleanIntervalMs": "60000", "retentionSteps": "1"})
    before = now_ms()
    keep_retention(opts)
    assert before <= ns.ledger.refreshed().last_clean_ms <= now_ms()  # a pass ran, on our clock
    assert ns.steps() == range(2, 3)
    keep_retention(opts)  # not due again: the schedule holds
    assert namespace_for(opts).info.last_clean_ms() == ns.ledger.refreshed().last_clean_ms


def test_an_old_wal_with_a_skewed_record_replays_as_it_was_written(wal):
    """This tests a WAL written before the clock rules (no `clocks` record) whose clock a
    cleaner pass 8 days ahead pushed: a batch write refused then is still refused by
    every replay after a cleaner pass appends the `clocks` record, no step is
    renumbered, and a batch write started as the sink starts it (the WAL's clock at
    least) commits."""
    store = open_store("file", NAMESPACE, path=str(wal))
    commits = store.open_log(COMMITS_LOG, create=True)
    for record in (NsRecord(NAMESPACE, 0, "inc0").to_json(),
                   DedupRecord(DEDUP_WINDOW_MS, DEDUP_STEPS).to_json()):
        commits.append([Record(b"", encode_meta({**record, "i": "inc0"}))])
    ns = Namespace(store)
    assert ns.ledger.state.dedup.step_ms is None  # the old rules
    t0 = now_ms()
    assert commit(ns, "batch-1", started_ms=t0) == 0
    ns.ledger.append(CleanRecord(t0 + AHEAD_MS, {}))  # an old pass from a host ahead
    with pytest.raises(WriterStepExpired):
        commit(ns, "batch-2", started_ms=t0 + 1)
    assert commit(ns, "q", 0, consecutive=True) == 1
    before = (ns.ledger.refreshed().next_step, ns.ledger.state.pairs, ns.ledger.state.index.refused)
    Cleaner(ns, grace_ms=0).run_once()  # appends the `clocks` record
    assert ns.ledger.state.dedup.step_ms == CLOCK_STEP_MS
    full = NamespaceState(NAMESPACE)
    full.replay(open_store("file", NAMESPACE, path=str(wal)).open_log(COMMITS_LOG))
    assert (full.next_step, full.pairs) == before[:2]
    assert [ns.step_commit(s).writer_id for s in ns.steps()] == ["batch-1", "q"]
    assert commit(ns, "batch-3", started_ms=ns.info.one_off_start_ms(now_ms())) == 2
    agree(wal, ns)


def test_one_record_moves_the_clock_at_most_a_day_and_passes_do_not_add_up(wal):
    """This tests the replay rules alone: a step record 8 days ahead moves the step clock
    and the WAL's clock by CLOCK_STEP_MS, ten cleaner passes 8 days ahead move the WAL's
    clock no further than a day past the step clock, a step behind moves nothing, and a
    full replay, a recovery and the handle agree on every value."""
    ns = open_ns(wal)
    t0 = now_ms()
    assert commit(ns, "q", 0, consecutive=True) == 0
    first = ns.ledger.refreshed().dedup.step_clock_ms
    assert t0 <= first <= now_ms()
    ns.ledger.append(StepCommit("x", 0, (), (), first + AHEAD_MS))  # a commit 8 days ahead
    for _ in range(10):
        ns.ledger.append(CleanRecord(first + AHEAD_MS, {}))
    ns.ledger.append(StepCommit("y", 0, (), (), first + BEHIND_MS))
    d = ns.ledger.refreshed().dedup
    assert (d.step_clock_ms, d.clock_ms) == (first + CLOCK_STEP_MS, first + 2 * CLOCK_STEP_MS)
    assert ns.steps() == range(0, 3)
    agree(wal, ns)
