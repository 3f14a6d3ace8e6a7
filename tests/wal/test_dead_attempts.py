"""Dead attempts' entries are freed after the grace with no retention policy, and no
acknowledged row is ever lost to it (docs/protocol.md, "Dead attempts, freed after the
grace" and "The rule that makes cleaning safe").

Real files, real fsync and real processes. Entry times are the file log's clock, which
``log_clock`` shifts in this process, so "older than the grace" is a fact the test
sets, not a race it hopes to win (``helpers.log_clock``).
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pyarrow as pa
import pytest

from pyspark_durable.cli import main as durablewal
from pyspark_durable.errors import AttemptLost, EntryFreed
from pyspark_durable.log import open_store
from pyspark_durable.wal import Cleaner, Namespace
from pyspark_durable.wal.upkeep.check import Checker
from tests.children.race_child import rows_for
from tests.helpers import log_clock
from tests.wal.test_retention_races import Paused, commit, commit_late
from tests.wal.test_retention_races import verify as verify_races

pytestmark = pytest.mark.backends("file")


def write_dead(ns: Namespace, writer: str, ws: int, big: int = 0):
    """An attempt that writes to both regions and never commits (a killed task)."""
    attempt = ns.begin(writer, ws)
    rows = rows_for(writer, ws, "a")
    if big:
        rows = pa.table({"id": pa.array(range(big), pa.int64()),
                         "tag": pa.array([os.urandom(512).hex() for _ in range(big)])})
    attempt.write("a", rows, region_id=0)
    attempt.write("b", rows_for(writer, ws, "b"), region_id=1)
    attempt.receipt()
    return attempt


def verify(store_path: Path, namespace: str, acked: dict[tuple[str, int], int]) -> Namespace:
    """Every acknowledged step reads back by content in a fresh handle, and `check
    --deep` (which re-hashes every needed entry) finds nothing wrong."""
    return verify_races(lambda: open_store("file", namespace, path=str(store_path)), acked,
                        deep=True)


def uncommitted(ns: Namespace) -> dict[int, tuple[int, int]]:
    return {r.region_id: (r.uncommitted, r.freed) for r in ns.info.region_entries()}


def region_blocks(root: Path, region_id: int) -> int:
    return sum(p.stat().st_blocks for p in root.rglob(f"region_{region_id}/*.seg"))


def test_a_killed_attempt_is_freed_after_the_grace_with_no_retention_policy(tmp_path,
                                                                            namespace, capsys):
    """This tests the default: no retention policy, the default grace (an hour), a
    killed attempt written two hours ago between committed steps. One cleaner pass
    frees it (regions reports 0 uncommitted, the region's blocks on disk shrink), every
    committed row reads back, `durablewal check --deep` is clean, a late commit of the
    killed attempt is AttemptLost (never acknowledged), and a younger killed attempt is
    kept, since it may still commit."""
    root = tmp_path / "wal"
    ns = Namespace(open_store("file", namespace, path=str(root)))
    with log_clock(-7200):
        acked = {("w", 0): commit(ns, "w", 0)}
        killed = write_dead(ns, "killed", 0, big=2000)  # about 2 MB in region 0
        acked[("w", 1)] = commit(ns, "w", 1)
    acked[("w", 2)] = commit(ns, "w", 2)
    young = write_dead(ns, "young", 0)
    before = uncommitted(ns)
    assert before[0][0] > 2 and before[0][1] == 0, before
    blocks = region_blocks(root, 0)
    report = Cleaner(ns).run_once()
    assert report.freed[0] >= 1 and report.regions[0] == (0, 0), report  # nothing deleted
    young_entries = young.receipt().entries
    left = uncommitted(ns)
    assert left[0][0] == sum(1 for e in young_entries if e.region_id == 0), (left, young_entries)
    assert left[0][1] == before[0][0] - left[0][0]
    assert blocks - region_blocks(root, 0) >= 1_000_000 // 512, (blocks, region_blocks(root, 0))
    with pytest.raises(AttemptLost):
        killed.commit()
    acked[("young", 0)] = young.commit()  # younger than the grace: kept, and it commits
    code = durablewal(["check", str(root), "--namespace", namespace, "--deep"])
    assert code == 0, capsys.readouterr().out
    capsys.readouterr()
    regions = durablewal(["regions", str(root), "--namespace", namespace, "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert regions == 0 and [(r["uncommitted"], r["freed"] > 0) for r in doc["regions"]] == \
        [(0, True), (0, True)], doc
    verify(root, namespace, acked)
    assert {r: u for r, (u, _) in uncommitted(Namespace(open_store(
        "file", namespace, path=str(root)))).items()} == {0: 0, 1: 0}


@pytest.mark.parametrize("point", ["clean.proposed", "clean.recorded", "clean.freeing",
                                   "clean.deleted"])
def test_a_late_commit_racing_a_cleaner_that_frees_it(make_store, store_config, namespace,
                                                      point):
    """This tests a killed-looking attempt (older than the grace) whose commit races a
    cleaner paused at each point of its pass, with no retention policy: before the
    cleaner's record is ordered the commit wins and the cleaner, replaying past its own
    record, keeps its entries; after it, the commit is AttemptLost and its retry commits.
    Never an acknowledged step whose rows are gone."""
    ns = Namespace(make_store())
    with log_clock(-7200):  # between committed steps: freed in place, not below a prefix
        acked = {("w", 0): commit(ns, "w", 0)}
        slow = write_dead(ns, "slow", 0)
        acked[("w", 1)] = commit(ns, "w", 1)
    acked[("w", 2)] = commit(ns, "w", 2)
    cleaner = Paused("clean", store_config, namespace, point)
    acked[("slow", 0)], lost = commit_late(ns, slow, "slow", 0)
    assert lost == (point != "clean.proposed")
    acked[("w", 3)] = commit(ns, "w", 3)
    lines = cleaner.resume()
    assert any(ln.startswith("CLEANED") for ln in lines), lines
    after = verify(Path(store_config[1]["path"]), namespace, acked)
    freed = {r: f for r, (_, f) in uncommitted(after).items()}
    assert (freed[0] > 0) == lost, freed  # the slow attempt's entries went iff it lost


@pytest.mark.parametrize("point", ["written", "commit.checked", "commit.appended"])
def test_a_committer_paused_while_a_cleaner_frees(make_store, store_config, namespace, point):
    """This tests a committer in another process paused between the steps of its commit
    while this process commits newer steps and a cleaner with grace 0 frees what no step
    refers to: before its record is appended it gets AttemptLost and commits on a retry;
    once it is appended its step is acknowledged and its entries are kept."""
    ns = Namespace(make_store())
    acked = {("w", 0): commit(ns, "w", 0)}
    slow = Paused("commit", store_config, namespace, point, "slow", "0")
    with log_clock(+1):  # newer than the slow entries by the writers' clock: they are old
        acked[("w", 1)] = commit(ns, "w", 1)
    report = Cleaner(ns, grace_ms=0).run_once()
    lines = slow.resume()
    acks = [int(ln.split()[1]) for ln in lines if ln.startswith("ACK")]
    assert len(acks) == 1, lines
    acked[("slow", 0)] = acks[0]
    lost = any(ln.startswith("LOST") for ln in lines)
    assert lost == (point != "commit.appended"), lines
    assert (report.freed.get(0, 0) > 0) == lost, report
    verify(Path(store_config[1]["path"]), namespace, acked)


@pytest.mark.crash
@pytest.mark.parametrize("point", ["clean.freeing", "clean.deleted"])
def test_a_cleaner_killed_while_freeing_leaves_a_clean_namespace(make_store, store_config,
                                                                 namespace, point):
    """This tests a cleaner SIGKILLed after recording its bound and before freeing, and
    after freeing and before its snapshot: a fresh open reads every acknowledged step,
    `check --deep` is clean, and the next pass frees what the killed one did not."""
    ns = Namespace(make_store())
    with log_clock(-7200):
        acked = {("w", 0): commit(ns, "w", 0)}
        write_dead(ns, "killed", 0)
        acked[("w", 1)] = commit(ns, "w", 1)
    acked[("w", 2)] = commit(ns, "w", 2)
    cleaner = Paused("clean", store_config, namespace, point)
    os.kill(cleaner.proc.pid, signal.SIGKILL)
    assert cleaner.proc.wait(timeout=60) == -signal.SIGKILL
    root = Path(store_config[1]["path"])
    verify(root, namespace, acked)
    again = Namespace(make_store())
    Cleaner(again, grace_ms=0).run_once()
    assert {r: u for r, (u, _) in uncommitted(again).items()} == {0: 0, 1: 0}
    verify(root, namespace, acked)


def test_a_step_whose_entry_was_freed_is_named_lost_never_read_short(make_store):
    """This tests what a step that refers to a freed entry gives (a cleaner never frees
    one: this frees it by hand): a read of the step raises EntryFreed naming the region
    and offset, never fewer rows, and `check` names the step as lost."""
    ns = Namespace(make_store())
    acked = {("w", ws): commit(ns, "w", ws) for ws in range(3)}
    run = next(r for r in ns.step_commit(acked[("w", 1)]).runs if r.region_id == 0)
    ns.store.open_region(0).free([(run.start, run.start + 1)])
    fresh = Namespace(make_store())
    with pytest.raises(EntryFreed) as got:
        list(fresh.read_step(acked[("w", 1)]))
    assert got.value.where["offset"] == run.start
    assert list(fresh.read_step(acked[("w", 2)]))  # the others read
    problems = [str(p) for p in Checker(make_store(), deep=True).run().problems]
    assert any(f"step {acked[('w', 1)]} is lost: its entries [{run.start}, "
               f"{run.start + 1}) were freed" in p for p in problems), problems
