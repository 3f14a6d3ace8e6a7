"""``durablewal repair``: a step check finds lost is recorded lost, in the WAL itself.

The WAL is a real file WAL with one real byte flipped in a region segment; the repair
runs as the CLI (in this process, and as processes killed with SIGKILL at random
moments), and every claim is judged by what reads and ``check`` say afterwards."""

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

from pyspark_durable.cli import main
from pyspark_durable.endpoint import open_namespace, read_steps, write_step
from pyspark_durable.errors import DataLoss, StepLost
from pyspark_durable.wal import Cleaner
from pyspark_durable.wal.format.records import LostRecord, decode_record
from tests.helpers import flip_a_byte_of_entry

NS = "shop"
STEPS = 8
LOST = 3  # the step whose only entry gets a flipped byte


def rows(step: int) -> pa.Table:
    ids = [step * 10 + i for i in range(4)]
    return pa.table({"id": pa.array(ids, pa.int64()), "item": [f"item-{i}" for i in ids]})


def config(root: Path) -> dict:
    return {"backend": "file", "namespace": NS, "options": {"path": str(root)}}


@pytest.fixture
def damaged(tmp_path: Path) -> Path:
    """A WAL of STEPS steps (one entry each, region 0) whose step LOST's entry has one
    byte of its body flipped on disk."""
    root = tmp_path / "wal"
    ns = open_namespace(config(root))
    for step in range(STEPS):
        write_step(ns, "loader", step, {"orders": rows(step)})
    run = ns.step_commit(LOST).runs[0]
    ns.close()
    flip_a_byte_of_entry(root / NS / "region_0", run.start)
    return root


def cli(capsys, *argv) -> tuple[int, str]:
    code = main([str(a) for a in argv])
    return code, capsys.readouterr().out


def lost_records(root: Path) -> list[LostRecord]:
    ns = open_namespace(config(root), create=False)
    try:
        commits = ns.store.open_log("commits", create=False)
        found = []
        for entry in commits.read(0):
            if entry.key != b"c":  # a record's copy
                record, _ = decode_record(entry.value, namespace=NS, offset=entry.offset)
                if isinstance(record, LostRecord):
                    found.append(record)
        return found
    finally:
        ns.close()


def readable(root: Path) -> dict[int, list[int]]:
    """step -> its ids, for every step but the recorded-lost ones, which must say so."""
    ns = open_namespace(config(root), create=False)
    try:
        out = {}
        for step in ns.steps():
            try:
                out[step] = read_steps(ns, "orders", start=step, end=step + 1) \
                    .column("id").to_pylist()
            except StepLost as exc:
                assert f"step {step} is lost" in str(exc) and "durablewal repair" in str(exc)
                assert isinstance(exc, DataLoss)
        return out
    finally:
        ns.close()


def test_repair_records_the_lost_step_and_check_passes_after_it(damaged, capsys):
    """This tests the runbook on a WAL with one damaged entry: check exits 1 naming step 3
    and saying repair is the way if there is no backup; repair records step 3 lost (one
    record) and check then exits 0 with a warning naming it; a read of step 3 is StepLost
    naming the repair, every other step reads by content; a second repair records
    nothing (idempotent); and after a cleaner pass (a snapshot over the record) step 3 is
    still recorded lost."""
    code, out = cli(capsys, "check", damaged, "--namespace", NS)
    assert code == 1 and f"step {LOST} is lost" in out, out
    assert "durablewal repair" in out.splitlines()[-1], out

    code, out = cli(capsys, "repair", damaged, "--namespace", NS)
    assert code == 0, out
    assert f"step {LOST} recorded lost: " in out and "OK: check finds no problem" in out, out
    assert [r.step for r in lost_records(damaged)] == [LOST]

    code, out = cli(capsys, "check", damaged, "--namespace", NS)
    assert code == 0 and out.startswith("OK: "), out
    assert [ln for ln in out.splitlines() if ln.startswith("WARNING: ")] == [
        next(ln for ln in out.splitlines() if f"step {LOST} is recorded lost" in ln)], out
    expected = {s: [s * 10 + i for i in range(4)] for s in range(STEPS) if s != LOST}
    assert readable(damaged) == expected

    code, out = cli(capsys, "repair", damaged, "--namespace", NS, "--json")
    doc = json.loads(out)
    assert code == 0 and doc["recorded_lost"] == {} and doc["already_lost"] == [LOST], doc
    assert [r.step for r in lost_records(damaged)] == [LOST]

    ns = open_namespace(config(damaged), create=False)
    Cleaner(ns, grace_ms=0).run_once()
    write_step(ns, "loader", STEPS, {"orders": rows(STEPS)})  # writers go on
    ns.close()
    assert readable(damaged) == {**expected, STEPS: [STEPS * 10 + i for i in range(4)]}


REPAIR_KILLS = 3


def test_a_repair_killed_at_any_moment_is_finished_by_the_next(damaged):
    """This tests that repairs SIGKILLed at random moments (before, during or after their
    append) leave at most one lost record of step 3, and that a repair run to its end
    afterwards leaves exactly one and a clean check."""
    rng = random.Random(0x5EED)
    argv = [sys.executable, "-m", "pyspark_durable", "repair", str(damaged), "--namespace", NS]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    for _ in range(REPAIR_KILLS):
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env=env)
        time.sleep(rng.uniform(0.2, 1.5))  # a random moment of its run, not a poll
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        assert [r.step for r in lost_records(damaged)] in ([], [LOST])
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [r.step for r in lost_records(damaged)] == [LOST]
    check = subprocess.run([*argv[:3], "check", *argv[4:]], capture_output=True, text=True,
                           env=env, timeout=120)
    assert check.returncode == 0, check.stdout
