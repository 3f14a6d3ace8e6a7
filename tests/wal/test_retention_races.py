"""Races between committers and cleaners, forced deterministically with real processes.

The rule under test (``pyspark_durable/wal/namespace.py``, rules 5-8): a cleaner
records its bound in the commits log before it deletes; a step record ordered after
a bound that covers its entries is refused (the committer gets AttemptLost); a
cleaner deletes only below what its replay after its own record proves unneeded;
snapshots never go backwards. Each test pauses one process between two steps of
its protocol (a failpoint), lets other committers and cleaners act, resumes it, and
then checks that every acknowledged step reads back by content, that a fresh handle
opens the namespace, and that ``durablewal check`` finds nothing wrong.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow as pa
import pytest

from pyspark_durable.errors import AttemptLost
from pyspark_durable.wal import Cleaner, Namespace, failpoints
from pyspark_durable.wal.replay import step_index
from pyspark_durable.wal.upkeep.check import Checker
from tests.children.race_child import rows_for
from tests.helpers import CHILDREN, ROOT, assert_acknowledged

pytestmark = pytest.mark.backends("file", "kafka-confluent", "s3")

CHILD = str(CHILDREN / "race_child.py")


class Paused:
    """A child process stopped at a failpoint until :meth:`resume`."""

    def __init__(self, role: str, store_config: tuple[str, dict], namespace: str, point: str,
                 *args: str) -> None:
        backend, config = store_config
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [sys.executable, CHILD, role, backend, json.dumps(config), namespace, point, *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=env)
        self.lines: list[str] = []
        while True:  # blocks on the child's own output: it pauses or ends
            line = self.proc.stdout.readline()
            if not line:
                raise AssertionError(f"child ended before {point}: {self.proc.stderr.read()}")
            self.lines.append(line.strip())
            if line.startswith("PAUSED"):
                assert line.split()[1] == point
                return

    def resume(self) -> list[str]:
        self.proc.stdin.write("go\n")
        self.proc.stdin.close()
        # the same buffered stream as readline(): communicate() would skip its buffer
        self.lines += self.proc.stdout.read().splitlines()
        err = self.proc.stderr.read()
        assert self.proc.wait(timeout=120) == 0, err
        return self.lines


def commit(ns: Namespace, writer: str, ws: int) -> int:
    """Commit (writer, ws) like the child does, writing again after AttemptLost."""
    while True:
        attempt = ns.begin(writer, ws)
        attempt.write("a", rows_for(writer, ws, "a"), region_id=0)
        attempt.write("b", rows_for(writer, ws, "b"), region_id=1)
        try:
            return attempt.commit()
        except AttemptLost:
            continue


def commit_late(ns: Namespace, slow, writer: str, ws: int) -> tuple[int, bool]:
    """Commit the already written attempt ``slow`` of (writer, ws); after AttemptLost
    (a cleaner's bound covers its entries) write the step again. (step, lost)."""
    try:
        return slow.commit(), False
    except AttemptLost:
        return commit(ns, writer, ws), True


def verify(make_store, acked: dict[tuple[str, int], int], deep: bool = False) -> Namespace:
    """Acknowledged steps read back by content; a fresh handle opens; check is clean
    (``deep``: check re-hashes every needed entry too)."""
    ns = Namespace(make_store())
    steps = ns.steps()
    for (writer, ws), step in acked.items():
        assert_acknowledged(ns, writer, ws, step)
        if step < steps.start:
            continue  # expired: the cleaner may have deleted it
        got = {ns.tables.by_id(refresh=False)[sb.table_id].name: pa.Table.from_batches(sb.batches)
               for sb in ns.read_step(step)}
        assert got == {t: rows_for(writer, ws, t) for t in ("a", "b")}, (writer, ws, step)
    report = Checker(make_store(), deep=deep).run()
    assert not report.problems, [str(p) for p in report.problems]
    return ns


@pytest.mark.parametrize("point", ["written", "commit.checked", "commit.appended"])
def test_committer_paused_while_cleaners_run(make_store, store_config, namespace, point):
    """This tests that a committer paused between any two steps of its protocol, while
    steps commit, expire and two cleaners with grace 0 run, either gets its step
    acknowledged with every row readable, or gets AttemptLost and commits on a retry:
    never an acknowledged step whose entries are gone."""
    ns = Namespace(make_store())
    acked = {("w", ws): commit(ns, "w", ws) for ws in range(2)}
    kept_from = ns.steps().stop  # steps from here on stay retained
    slow = Paused("commit", store_config, namespace, point, "slow", "0")
    acked[("w", 2)] = commit(ns, "w", 2)
    ns.expire(kept_from)
    Cleaner(ns, grace_ms=0).run_once()
    Cleaner(Namespace(make_store()), grace_ms=0).run_once()  # a second cleaner, own handle
    acked[("w", 3)] = commit(ns, "w", 3)
    lines = slow.resume()
    acks = [int(ln.split()[1]) for ln in lines if ln.startswith("ACK")]
    assert len(acks) == 1, lines
    acked[("slow", 0)] = acks[0]
    lost = any(ln.startswith("LOST") for ln in lines)
    # before its record is ordered the cleaners win; once it is, the step is kept
    assert lost == (point != "commit.appended"), lines
    after = verify(make_store, acked)
    assert after.store.open_region(0).low_watermark() > 0  # the cleaners did delete
    assert acked[("slow", 0)] >= after.steps().start


@pytest.mark.parametrize("point", ["clean.proposed", "clean.recorded", "clean.deleted",
                                   "clean.snapshot", "clean.snapshotted"])
def test_cleaner_paused_while_commits_and_another_cleaner_run(make_store, store_config,
                                                             namespace, point):
    """This tests that a cleaner paused between any two steps of its pass, while a slow
    attempt commits, new steps commit and expire, and a second cleaner runs whole
    passes, never deletes what an acknowledged, retained step needs, never makes the
    namespace unopenable (a late, older snapshot never hides a newer one), and ends
    its own pass without error."""
    ns = Namespace(make_store())
    slow = ns.begin("slow", 0)  # older than every step: below the bound of a grace-0 pass
    slow.write("a", rows_for("slow", 0, "a"), region_id=0)
    slow.write("b", rows_for("slow", 0, "b"), region_id=1)
    acked = {("w", ws): commit(ns, "w", ws) for ws in range(4)}
    ns.expire(4)
    cleaner = Paused("clean", store_config, namespace, point)
    acked[("slow", 0)], lost = commit_late(ns, slow, "slow", 0)
    # the paused cleaner's bound covers the slow entries once it is recorded
    assert lost == (point != "clean.proposed")
    for ws in range(4, 7):
        acked[("w", ws)] = commit(ns, "w", ws)
    ns.expire(acked[("slow", 0)])
    other = Namespace(make_store())
    for _ in range(2):
        Cleaner(other, grace_ms=0).run_once()
        acked[("w", 7 + _)] = commit(other, "w", 7 + _)
    lines = cleaner.resume()
    assert any(ln.startswith("CLEANED") for ln in lines), lines
    after = verify(make_store, acked)
    assert after.steps().start == acked[("slow", 0)]
    Cleaner(after, grace_ms=0).run_once()
    verify(make_store, acked)


def test_long_lived_handle_heals_after_clean(make_store):
    """This tests that a handle opened before a clean (as Spark's Python workers keep
    them) writes, reads and lists steps after other handles wrote, expired and
    cleaned the commits log under it, with the default grace."""
    old = Namespace(make_store())
    writer = Namespace(make_store())
    acked = {("w", ws): commit(writer, "w", ws) for ws in range(3)}
    Cleaner(Namespace(make_store())).run_once()  # default grace, nothing expired
    writer.expire(2)
    Cleaner(Namespace(make_store()), grace_ms=0).run_once()
    assert Namespace(make_store()).store.open_log("commits").low_watermark() > 0
    assert old.steps() == range(2, 3)
    acked[("old", 0)] = commit(old, "old", 0)
    got = old.read_step_table(acked[("old", 0)], tables={old.tables.resolve("a")})
    assert got.equals(rows_for("old", 0, "a"))
    assert old.committed_step("w", 1) == 1  # pairs survive in the snapshot
    verify(make_store, acked)


def test_a_commit_whose_catch_up_was_trimmed_under_it_recovers_and_numbers_its_step(
        make_store, caplog, monkeypatch):
    """This tests a commit that reads on from where its handle's replay stopped to its
    own record (docs/protocol.md, "Replaying one's own record") after other handles
    trimmed the commits log past that point. Its checks pass on the state it caught up
    with an instant before; at the failpoint ``commit.checked`` another handle commits
    three steps and expires them, and two cleaner passes snapshot twice and trim the
    commits log. The read on fails as OffsetOutOfRange, the handle recovers from the
    newest snapshot, and the commit returns the step every handle numbers. (The paused
    step has no rows, so the cleaners, with no grace, have no entry of it to take.)"""
    monkeypatch.setattr(step_index, "CHUNK_STEPS", 2)  # a snapshot keeps whole chunks
    old = Namespace(make_store())
    writer = Namespace(make_store())
    acked = {("w", 0): commit(writer, "w", 0)}
    old.refresh()
    stood = old.ledger.state.next_offset
    paused: list[str] = []

    def trim(point: str) -> None:
        if point == "commit.checked" and not paused:
            paused.append(point)  # once: the writer's commits pass this point too
            for ws in range(1, 3):
                acked[("w", ws)] = commit(writer, "w", ws)
            writer.expire(2)
            Cleaner(Namespace(make_store()), grace_ms=0).run_once()
            acked[("w", 3)] = commit(writer, "w", 3)
            writer.expire(3)
            Cleaner(Namespace(make_store()), grace_ms=0).run_once()
            assert writer.store.open_log("commits").low_watermark() > stood

    failpoints.install(trim)
    try:
        with caplog.at_level("INFO", logger="pyspark_durable.wal.namespace"):
            step = old.begin("old", 0).commit()
    finally:
        failpoints.install(None)
    assert paused, "the commit did not pass its checks"
    assert step == 4
    assert any(f"commits log cleaned below offset {stood}" in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]
    fresh = verify(make_store, acked)
    for ns in (old, fresh):
        assert ns.committed_step("old", 0) == 4 and ns.committed_step("w", 3) == 3
        assert ns.steps() == range(3, 5)
