"""Steps named by commit time, without Spark: the namespace's search, read_steps'
start_timestamp/end_timestamp and ``durablewal tail --since``."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

from pyspark_durable.cli import main
from pyspark_durable.endpoint import open_namespace, read_steps, write_step
from pyspark_durable.errors import ConfigError, StepNotCommitted
from pyspark_durable.wal import Namespace

NS = "timed"
# commit times of steps 0..3: step 2 was stamped before step 1 (two writers raced
# between reading the clock and appending), so times are not ordered by step
TIMES_MS = (1_000_000, 3_000_000, 2_000_000, 5_000_000)


def write_at(ns: Namespace, monkeypatch: pytest.MonkeyPatch, times_ms=TIMES_MS) -> None:
    """Steps 0.. with the given commit times: the namespace reads this clock when it commits."""
    import pyspark_durable.wal.namespace as namespace_module

    for step, millis in enumerate(times_ms):
        clock = types.SimpleNamespace(time=lambda m=millis: m / 1000)
        monkeypatch.setattr(namespace_module, "time", clock)
        write_step(ns, "loader", step, {"t": [{"id": step}]})
    monkeypatch.undo()


@pytest.fixture
def timed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Namespace]:
    config = {"backend": "file", "namespace": NS, "options": {"path": str(tmp_path)}}
    ns = open_namespace(config)
    write_at(ns, monkeypatch)
    yield tmp_path, ns
    ns.close()


@pytest.mark.parametrize(("t", "step"), [(0, 0), (1_000_000, 0), (1_000_001, 1), (2_500_000, 1),
                                         (3_000_000, 1), (3_000_001, 3), (5_000_000, 3),
                                         (5_000_001, 4)])
def test_the_first_step_committed_at_or_after_a_time(timed, t: int, step: int):
    """This tests that a time finds the first step committed at or after it, even where
    commit times are out of step order (2,000,000 finds step 1, stamped 3,000,000, not
    step 2), and the next step when every commit is before it."""
    _, ns = timed
    assert ns.info.first_step_committed_at(t) == step


def test_read_steps_by_time_starts_at_the_later_step_and_ends_before(timed):
    """This tests that read_steps with a start time between two commits starts at the
    later step, and that the end time is exclusive (steps committed before it)."""
    _, ns = timed
    ids = read_steps(ns, "t", start_timestamp=1_500_000)["id"].to_pylist()
    assert ids == [1, 2, 3]
    iso = "1970-01-01T00:25:00Z"  # 1,500,000 ms
    assert read_steps(ns, "t", start_timestamp=iso)["id"].to_pylist() == [1, 2, 3]
    assert read_steps(ns, "t", end_timestamp=3_000_000)["id"].to_pylist() == [0]
    assert read_steps(ns, "t", start=1, end_timestamp=6_000_000)["id"].to_pylist() == [1, 2, 3]


def test_read_steps_after_the_last_commit_names_what_exists(timed):
    """This tests that a start time after the last commit is StepNotCommitted naming the
    committed steps and when they were committed."""
    _, ns = timed
    with pytest.raises(StepNotCommitted, match=r"start_timestamp=1970-01-01T01:40:00.001Z "
                       r"\(6000001 ms\) is after the last commit.*committed steps \[0, 4\) "
                       r"were committed from 1970-01-01T00:16:40.000Z .* to "
                       r"1970-01-01T01:23:20.000Z"):
        read_steps(ns, "t", start_timestamp=6_000_001)


def test_read_steps_refuses_a_step_and_a_time_for_one_end(timed):
    """This tests that read_steps given both start and start_timestamp fails saying so."""
    _, ns = timed
    with pytest.raises(ConfigError, match=r"both a step \(1\) and a timestamp \(1000\)"):
        read_steps(ns, "t", start=1, start_timestamp=1000)
    with pytest.raises(ConfigError, match="not a timestamp"):
        read_steps(ns, "t", start_timestamp="yesterday")


def test_cli_tail_since(timed, capsys):
    """This tests that `durablewal tail --since` shows only rows of steps committed at or
    after the time, and that a time after the last commit is one line and exit 2."""
    root, _ = timed
    code = main(["tail", str(root), "--namespace", NS, "--table", "t", "--since",
                 "1970-01-01T00:50:00Z", "--json"])  # 3,000,000 ms
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    assert [r["id"] for r in json.loads(out)["rows"]] == [1, 2, 3]
    code = main(["tail", str(root), "--namespace", NS, "--table", "t", "--since", "9000000"])
    out, err = capsys.readouterr()
    assert code == 2 and "--since=1970-01-01T02:30:00.000Z (9000000 ms) is after the last " \
        "commit" in err, err


def test_the_search_follows_steps_committed_after_it_was_asked(timed, monkeypatch):
    """This tests that a handle that answered once answers for steps committed later too."""
    _, ns = timed
    assert ns.info.first_step_committed_at(5_500_000) == 4
    import pyspark_durable.wal.namespace as namespace_module

    for step, millis in ((4, 4_000_000), (5, 6_000_000)):
        monkeypatch.setattr(namespace_module, "time",
                            types.SimpleNamespace(time=lambda m=millis: m / 1000))
        write_step(ns, "loader", step, {"t": [{"id": step}]})
    assert ns.info.first_step_committed_at(3_500_000) == 3
    assert ns.info.first_step_committed_at(5_500_000) == 5


def test_a_stream_from_a_past_time_after_the_last_commit_starts_at_the_next_step(timed):
    """This tests that a stream given a time after the last commit but not in the future
    starts at the next step (all later commits are after it), and one in the future fails."""
    from pyspark_durable.endpoint.step_times import first_step_since

    _, ns = timed
    assert first_step_since(ns, 6_000_000, "option startingTimestamp", stream=True) == 4
    with pytest.raises(StepNotCommitted, match="is after the last commit and is in the future"):
        first_step_since(ns, 10**15, "option startingTimestamp", stream=True)
