"""Open cost independent of history where no cleaner ever runs: committers write the
step-index snapshot every N records (wal/snapshot_schedule.py), so an open replays a
bounded tail, and racing committers' snapshots never disagree with a full replay."""

from __future__ import annotations

import multiprocessing
import time

import pyarrow as pa
import pytest

from pyspark_durable.log import open_store
from pyspark_durable.wal import Namespace, snapshot_schedule, step_index
from pyspark_durable.wal.namespace import COMMITS_LOG
from pyspark_durable.wal.snapshot_file import SNAPSHOT_NAME
from pyspark_durable.wal.state import NamespaceState

EVERY = 20  # records between committers' snapshots in these tests
CHUNK = 8  # steps per chunk of the step index in these tests


@pytest.fixture(autouse=True)
def small_numbers(monkeypatch):
    monkeypatch.setattr(snapshot_schedule, "SNAPSHOT_EVERY_RECORDS", EVERY)
    monkeypatch.setattr(step_index, "CHUNK_STEPS", CHUNK)


def write(ns: Namespace, writer: str, wstep: int, started_ms: int | None = None) -> int:
    a = ns.begin(writer, wstep)
    a.write("t", pa.table({"id": pa.array([wstep], pa.int64())}), region_id=wstep % 2)
    return a.commit(started_ms=started_ms)


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
    assert (a.next_step, a.next_sequences, a.pairs, a.writer_last) == \
        (b.next_step, b.next_sequences, b.pairs, b.writer_last)
    assert [(c.step, c.commit_offset, c.writer_id, c.writer_step, c.runs,
             dict(c.first_sequences)) for c in a.index] == \
        [(c.step, c.commit_offset, c.writer_id, c.writer_step, c.runs,
          dict(c.first_sequences)) for c in b.index]


@pytest.mark.parametrize("shape", ["writer", "per-step"])
def test_a_namespace_never_cleaned_opens_by_replaying_a_bounded_tail(make_store, shape):
    """This tests that committers alone (no cleaner pass ever) keep an open's replay
    bounded: after EVERY * 6 commits, one writer or one writer per step, an open
    replays fewer than EVERY records after the newest snapshot, and decides every
    step, sequence and remembered pair as a replay of the whole log does; snapshots
    never go backwards and two are kept; a recommit of an early pair, now covered by
    a snapshot's chunks, returns its step."""
    ns = Namespace(make_store())
    versions_seen: list[int] = []
    for i in range(EVERY * 6):
        writer, wstep, started = pair_of(shape, i)
        assert write(ns, writer, wstep, started) == i
        versions = ns.store.snapshot_versions(SNAPSHOT_NAME)
        assert len(versions) <= 2
        if versions:
            assert not versions_seen or versions[-1] >= versions_seen[-1]
            versions_seen.append(versions[-1])
    assert ns.store.open_log(COMMITS_LOG).low_watermark() == 0  # no committer trims
    opened = Namespace(make_store())
    assert 0 < opened.state.replayed < EVERY
    same_state(opened.state, full_replay(make_store()))
    early = EVERY * 6 - 40  # within a writer's newest DEDUP_STEPS, covered by chunks
    writer, wstep, started = pair_of(shape, early)
    assert write(opened, writer, wstep, started) == early  # read back from the chunks
    assert opened.steps() == range(0, EVERY * 6)


def commit_many(path: str, process: int, steps: int) -> None:
    """A committer process: its own writers, a snapshot every EVERY records."""
    snapshot_schedule.SNAPSHOT_EVERY_RECORDS = EVERY
    step_index.CHUNK_STEPS = CHUNK
    ns = Namespace(open_store("file", "race", path=path))
    for i in range(steps):
        if i % 2:
            write(ns, f"p{process}-batch-{i}", 0, int(time.time() * 1000))
        else:
            write(ns, f"p{process}-query", i // 2)
    ns.close()


def test_concurrent_committers_in_processes_write_snapshots_safely(tmp_path):
    """This tests committers in four processes at once, streaming and one-off writers
    interleaved, each writing snapshots as it passes EVERY records: the snapshots
    they race to write never corrupt anything; recovery from the newest, from the
    older one, and a replay of the whole log decide every step and pair alike."""
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=commit_many, args=(str(tmp_path), p, 60)) for p in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0, f"committer process exited with {p.exitcode}"
    store = open_store("file", "race", path=str(tmp_path))
    versions = store.snapshot_versions(SNAPSHOT_NAME)
    assert len(versions) >= 2
    full = full_replay(store)
    assert full.next_step == 240
    for version in versions[-2:]:  # each kept snapshot alone, then its tail
        state = NamespaceState.from_snapshot("race", store.read_snapshot_version(
            SNAPSHOT_NAME, version), version)
        state.replay(store.open_log(COMMITS_LOG))
        state.attach(store.open_log(COMMITS_LOG))
        same_state(state, full)
    recovered = Namespace(open_store("file", "race", path=str(tmp_path)))
    same_state(recovered.state, full)
    for p in range(4):  # every pair a process committed is remembered as its step
        assert recovered.committed_step(f"p{p}-query", 29) is not None
        assert recovered.committed_step(f"p{p}-batch-59", 0) is not None
