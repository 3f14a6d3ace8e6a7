"""Snapshot redundancy that survives a repair: a damaged snapshot never counts as one of
the two kept, pruning never deletes a good snapshot while it keeps a damaged one, the
next cleaner pass (or the committer's next snapshot) replaces it, and ``check`` names
each damaged snapshot once (docs/protocol.md, "Snapshots that fail their check").

Damage is one flipped byte: on the file log in the snapshot's file, found through the
store's layout; on the other backends in the stored object itself (the version is read,
a byte flipped and the bytes stored again under the same version)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from pyspark_durable.errors import CorruptEntryError
from pyspark_durable.log import FileLogStore, LogStore
from pyspark_durable.wal import Cleaner, Namespace
from pyspark_durable.wal.format.snapshot_file import SNAPSHOT_NAME
from pyspark_durable.wal.ledger import COMMITS_LOG
from pyspark_durable.wal.replay.snapshot_schedule import read_copies
from pyspark_durable.wal.upkeep.check import run_check

pytestmark = pytest.mark.backends("file", "memory", "kafka-confluent", "kafka-python", "s3",
                                  "s3-moto")

STEPS = 19
EVERY = 8  # records between a committer's snapshots here, so 19 steps make a few


def rows(step: int) -> pa.Table:
    """Step ``step``'s rows: content no other step has, so a read proves which step it is."""
    return pa.table({"id": pa.array([step * 10, step * 10 + 1], pa.int64()),
                     "item": pa.array([f"s{step}-a", f"s{step}-b"])})


def handle(store: LogStore) -> Namespace:
    """A fresh handle (it recovers from the newest snapshot it can decode) whose commits
    write a snapshot every EVERY records, on every backend alike."""
    ns = Namespace(store)
    ns.ledger.snapshots.every_records = EVERY
    return ns


def commit_steps(ns: Namespace, start: int, stop: int) -> None:
    for step in range(start, stop):
        attempt = ns.begin("query", step)
        attempt.write("t", rows(step), region_id=step % 2)
        assert attempt.commit() == step


def assert_every_step_reads_back(store: LogStore, steps: int = STEPS) -> None:
    ns = handle(store)
    assert ns.steps() == range(steps)
    for step in range(steps):
        assert ns.read_step_table(step).to_pylist() == rows(step).to_pylist(), step


def flip(store: LogStore, version: int) -> None:
    """Flip one byte in the middle of a stored snapshot version."""
    if isinstance(store, FileLogStore):
        path = store.folder / "snapshots" / f"{SNAPSHOT_NAME}.{version:020d}"
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x01
        path.write_bytes(bytes(data))
        return
    data = bytearray(store.read_snapshot_version(SNAPSHOT_NAME, version))
    data[len(data) // 2] ^= 0x01
    store.write_snapshot(SNAPSHOT_NAME, version, bytes(data))


def snapshot_problems(store: LogStore) -> list:
    return [p for p in run_check(store).problems if "snapshot" in p.where]


def written_and_cleaned(make_store) -> tuple[LogStore, int, int]:
    """A namespace of STEPS steps after a cleaner pass: (store, older, newest) snapshot
    versions, with the commits log trimmed (the log alone can no longer rebuild it)."""
    ns = handle(make_store())
    commit_steps(ns, 0, STEPS)
    Cleaner(ns, grace_ms=0).run_once()
    store = make_store()
    versions = store.snapshot_versions(SNAPSHOT_NAME)
    assert len(versions) == 2, versions
    assert store.open_log(COMMITS_LOG).low_watermark() > 0
    return store, versions[0], versions[1]


def test_a_pass_replaces_a_damaged_newest_snapshot_and_keeps_the_good_one(make_store):
    """This tests the repair: with the newest snapshot damaged, `check` names it once; a
    cleaner pass keeps the good older snapshot, writes a fresh good one and deletes the
    damaged one, after which `check` is clean; one more flipped byte, in the new newest
    snapshot, still leaves every step readable by content."""
    store, older, newest = written_and_cleaned(make_store)
    flip(store, newest)
    problems = snapshot_problems(store)
    assert [p.where.get("version") for p in problems] == [newest], problems
    assert "the next cleaner pass (durablewal clean) writes a good snapshot" in \
        problems[0].message
    assert_every_step_reads_back(make_store())  # recovery uses the older snapshot

    report = Cleaner(handle(make_store()), grace_ms=0).run_once()
    assert report.replaced == [newest]
    copies = read_copies(make_store())
    assert not copies.damaged
    assert older in copies.good and newest not in copies.good
    assert len(copies.good) == 2 and max(copies.good) > newest
    assert run_check(make_store()).ok

    flip(store, max(copies.good))
    assert_every_step_reads_back(make_store())


def test_the_committers_next_snapshot_replaces_a_damaged_one(make_store):
    """This tests the committer's pruning: after the newest snapshot is damaged, the
    snapshot a committer writes when due never makes it delete the good older one; the
    damaged one goes, two good ones are left, and `check` is clean."""
    store, older, newest = written_and_cleaned(make_store)
    flip(store, newest)
    ns = handle(make_store())
    commit_steps(ns, STEPS, STEPS + EVERY)
    copies = read_copies(make_store())
    assert not copies.damaged and older in copies.good and len(copies.good) == 2, copies
    assert run_check(make_store()).ok
    assert_every_step_reads_back(make_store(), STEPS + EVERY)


def test_both_snapshots_damaged_names_each_once_and_fails_typed(make_store):
    """This tests the worst case with a trimmed commits log: both kept snapshots damaged,
    an open fails with a CorruptEntryError naming both versions (no guessed state), and
    `check` names each damaged snapshot exactly once and says the namespace cannot be
    recovered without naming them again."""
    store, older, newest = written_and_cleaned(make_store)
    flip(store, older)
    flip(store, newest)
    with pytest.raises(CorruptEntryError, match="no snapshot can be replayed") as caught:
        Namespace(make_store())
    assert f"version={older}" in str(caught.value) and f"version={newest}" in str(caught.value)
    problems = run_check(make_store()).problems
    for version in (older, newest):
        assert sum(f"version={version}" in p.text() for p in problems) == 1, problems
    assert any("cannot be recovered" in p.message for p in problems), problems


def test_both_snapshots_damaged_before_any_trim_recover_from_the_log_and_a_pass_repairs(
        make_store):
    """This tests damage to every snapshot while the commits log is whole (no cleaner ran
    yet): an open replays the log and reads every step; one cleaner pass writes two good
    snapshots and deletes both damaged ones, and `check` is clean."""
    ns = handle(make_store())
    commit_steps(ns, 0, STEPS)
    store = make_store()
    damaged = store.snapshot_versions(SNAPSHOT_NAME)
    assert len(damaged) == 2 and store.open_log(COMMITS_LOG).low_watermark() == 0
    for version in damaged:
        flip(store, version)
    assert_every_step_reads_back(make_store())
    report = Cleaner(handle(make_store()), grace_ms=0).run_once()
    assert report.replaced == damaged
    copies = read_copies(make_store())
    assert not copies.damaged and len(copies.good) == 2 and min(copies.good) > max(damaged)
    assert run_check(make_store()).ok
    flip(store, max(copies.good))
    assert_every_step_reads_back(make_store())


@pytest.mark.backends("file")
def test_the_cli_names_the_damage_and_clean_replaces_it(make_store, store_config, capsys):
    """This tests the runbook on the command line: `durablewal check` exits 1 with one line
    naming the damaged snapshot and `durablewal clean`; `clean` says which snapshot it
    replaced; `check` then exits 0. Its last line is the clean to run."""
    from pyspark_durable.cli import main

    store, _, newest = written_and_cleaned(make_store)
    flip(store, newest)
    args = [store_config[1]["path"], "--namespace", store.namespace]
    assert main(["check", *args]) == 1
    out = capsys.readouterr().out
    named = [line for line in out.splitlines() if f"version={newest}" in line]
    assert len(named) == 1 and "durablewal clean" in named[0], out
    # the last line is the command to run next, as the user named the WAL
    assert out.splitlines()[-1] == (f"next: durablewal clean {args[0]} --namespace {args[2]}   "
                                    "(a pass writes a good snapshot in place of each damaged "
                                    "one; then check again)"), out
    assert main(["clean", *args]) == 0
    assert f"damaged snapshot(s) {newest} replaced by snapshot" in capsys.readouterr().out
    assert main(["check", *args]) == 0
