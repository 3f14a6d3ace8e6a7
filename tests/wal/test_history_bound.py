"""Open cost independent of history where no cleaner ever runs: committers write the
step-index snapshot every N records (wal/replay/snapshot_schedule.py), so an open replays a
bounded tail, and racing committers' snapshots never disagree with a full replay."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from pyspark_durable.errors import StepExpired
from pyspark_durable.log import open_store
from pyspark_durable.wal import Cleaner, Namespace
from pyspark_durable.wal.format.snapshot_file import SNAPSHOT_NAME
from pyspark_durable.wal.ledger import COMMITS_LOG
from pyspark_durable.wal.replay import snapshot_schedule, step_index
from pyspark_durable.wal.replay.retention import RetentionPolicy
from pyspark_durable.wal.replay.state import NamespaceState
from tests.children.history_child import write
from tests.helpers import CHILDREN, ROOT

EVERY = 20  # records between committers' snapshots in these tests
CHUNK = 8  # steps per chunk of the step index in these tests
STEPS = EVERY * 4  # steps a test commits through one handle
PROCESSES, EACH = 3, 40  # racing committer processes, and steps each commits


@pytest.fixture(autouse=True)
def small_numbers(monkeypatch):
    monkeypatch.setattr(snapshot_schedule, "SNAPSHOT_EVERY_RECORDS", EVERY)
    monkeypatch.setattr(step_index, "CHUNK_STEPS", CHUNK)


def pair_of(shape: str, i: int) -> tuple[str, int, int | None]:
    """(writer, writer step, started_ms) of step ``i``: one streaming writer, or one
    one-off writer per step (a batch ``df.write``)."""
    if shape == "writer":
        return "query", i, None
    return f"batch-{i}", 0, int(time.time() * 1000)


def full_replay(store) -> NamespaceState:
    state = NamespaceState(store.namespace)
    state.replay(store.open_log(COMMITS_LOG))
    return state


def same_state(a: NamespaceState, b: NamespaceState) -> None:
    """Two states decide alike: steps, sequences, every step's record, remembered pairs."""
    assert (a.next_step, a.next_sequences, a.pairs, a.writer_last) == (
        b.next_step,
        b.next_sequences,
        b.pairs,
        b.writer_last,
    )
    assert [
        (c.step, c.commit_offset, c.writer_id, c.writer_step, c.runs, dict(c.first_sequences))
        for c in a.index
    ] == [
        (c.step, c.commit_offset, c.writer_id, c.writer_step, c.runs, dict(c.first_sequences))
        for c in b.index
    ]


@pytest.mark.parametrize("shape", ["writer", "per-step"])
@pytest.mark.backends("file", "memory", "kafka-confluent", "kafka-python")
def test_a_namespace_never_cleaned_opens_by_replaying_a_bounded_tail(make_store, shape):
    """This tests that committers alone (no cleaner pass ever) keep an open's replay
    bounded: after STEPS commits, one writer or one writer per step, an open
    replays fewer than EVERY records after the newest snapshot, and decides every
    step, sequence and remembered pair as a replay of the whole log does; snapshots
    never go backwards and two are kept; a recommit of an early pair, now covered by
    a snapshot's chunks, returns its step."""
    ns = Namespace(make_store())
    versions_seen: list[int] = []
    for i in range(STEPS):
        writer, wstep, started = pair_of(shape, i)
        assert write(ns, writer, wstep, started) == i
        versions = ns.store.snapshot_versions(SNAPSHOT_NAME)
        assert len(versions) <= 2
        if versions:
            assert not versions_seen or versions[-1] >= versions_seen[-1]
            versions_seen.append(versions[-1])
    assert ns.store.open_log(COMMITS_LOG).low_watermark() == 0  # no committer trims
    opened = Namespace(make_store())
    assert 0 < opened.ledger.state.replayed < EVERY
    same_state(opened.ledger.state, full_replay(make_store()))
    early = STEPS - 40  # within a writer's newest DEDUP_STEPS, covered by chunks
    writer, wstep, started = pair_of(shape, early)
    assert write(opened, writer, wstep, started) == early  # read back from the chunks
    assert opened.steps() == range(0, STEPS)


def test_concurrent_committers_in_processes_write_snapshots_safely(tmp_path):
    """This tests committers in PROCESSES processes at once, streaming and one-off writers
    interleaved, each writing snapshots as it passes EVERY records: the snapshots
    they race to write never corrupt anything; recovery from the newest, from the
    older one, and a replay of the whole log decide every step and pair alike."""
    procs = [subprocess.Popen([sys.executable, str(CHILDREN / "history_child.py"), str(tmp_path),
                               str(p), str(EACH), str(EVERY), str(CHUNK)],
                              stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}) for p in range(PROCESSES)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, f"committer process exited with {p.returncode}: {err[-2000:]}"
    store = open_store("file", "race", path=str(tmp_path))
    versions = store.snapshot_versions(SNAPSHOT_NAME)
    assert len(versions) >= 2
    full = full_replay(store)
    assert full.next_step == PROCESSES * EACH
    for version in versions[-2:]:  # each kept snapshot alone, then its tail
        state = NamespaceState.from_snapshot(
            "race", store.read_snapshot_version(SNAPSHOT_NAME, version), version
        )
        state.replay(store.open_log(COMMITS_LOG))
        state.attach(store.open_log(COMMITS_LOG))
        same_state(state, full)
    recovered = Namespace(open_store("file", "race", path=str(tmp_path)))
    same_state(recovered.ledger.state, full)
    for p in range(PROCESSES):  # every pair a process committed is remembered as its step
        assert recovered.committed_step(f"p{p}-query", EACH // 2 - 1) is not None
        assert recovered.committed_step(f"p{p}-batch-{EACH - 1}", 0) is not None


def racing_reads(monkeypatch, ns: Namespace, race: Callable[[], None]) -> list[int]:
    """The first time ``ns`` reads steps back from its commits log (a chunk of its step
    index), ``race()`` runs first: other handles act between this handle's view and its
    read. Returns the commits log's start each racing read found, for the test to see."""
    commits = ns.ledger.commits
    read = commits.read
    found: list[int] = []

    def racing_read(start: int, end: int | None = None):
        if end is not None and not found:
            race()
            found.append(commits.low_watermark())
        return read(start, end)

    monkeypatch.setattr(commits, "read", racing_read)
    ns.ledger.state.attach(commits)  # its step index reads through racing_read from now on
    return found


def run_ahead(b: Namespace, expire_to: int, commits: int) -> None:
    """Another handle expires steps, commits enough for several committer snapshots
    (each folding the expired chunks away) and cleans: the commits log is trimmed."""
    b.expire(expire_to)
    start = b.steps().stop
    for i in range(start, start + commits):
        assert write(b, "query", i) == i
    Cleaner(b, grace_ms=0).run_once()


@pytest.mark.backends("file", "memory", "kafka-confluent", "kafka-python")
def test_a_handle_holding_an_old_index_heals_when_others_trim_under_it(make_store, monkeypatch):
    """This tests the race that trimming and committers' snapshots make: a long-lived
    handle holds a step index whose chunks start at step 0; at the moment it reads a
    chunk back, other handles expire those steps, commit EVERY * 2 + 4 records (so two
    newer snapshots no longer refer to the chunk) and a cleaner trims the commits log
    below them. The reader's handle heals (recovers from the newest snapshot) and gets
    StepExpired for the expired step, and a step still retained; then the same race
    under a cleaner pass of that handle, which heals and runs again. Both handles then
    decide as a fresh open does, and every retained step reads back."""
    a = Namespace(make_store())
    for i in range(CHUNK * 4):
        write(a, "query", i)
    Cleaner(a, grace_ms=0).run_once()  # a's index: chunks from step 0
    assert a.info.first_indexed_step() == 0
    b = Namespace(make_store())
    found = racing_reads(monkeypatch, a, lambda: run_ahead(b, CHUNK * 3, EVERY * 2 + 4))
    with pytest.raises(StepExpired):
        a.step_commit(1)  # as of a's view, retained: its chunk is read back
    assert found and found[0] > 0, "the race did not trim the commits log"
    assert a.step_commit(CHUNK * 3).step == CHUNK * 3  # retained: read back after healing
    same_state(a.ledger.state, Namespace(make_store()).ledger.state)

    cut = a.info.first_indexed_step() + CHUNK + 3  # inside an old chunk, not one read lately
    a.set_retention(RetentionPolicy(max_steps=a.steps().stop - cut))
    a.refresh()
    found = racing_reads(monkeypatch, a, lambda: run_ahead(b, b.steps().stop - CHUNK, EVERY * 2 + 4))
    report = Cleaner(a, grace_ms=0).run_once()
    assert found and found[0] > 0, "the race did not trim the commits log"
    fresh = Namespace(make_store())
    same_state(a.ledger.state, fresh.ledger.state)
    assert report.first_retained_step >= fresh.steps().start - CHUNK
    for step in fresh.steps():
        assert a.step_commit(step).step == step
