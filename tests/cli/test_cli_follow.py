"""``durablewal tail --follow --format jsonl|arrow``: a table's committed rows as a stream
other programs read, exactly once across a killed and restarted tail.

The tail runs as a real process (its stdout a pipe, its signals real ones) on the file
backend; a writer process commits steps, and leaves uncommitted attempts beside them,
while it follows.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from pyspark_durable.cli import main
from pyspark_durable.endpoint import open_namespace, write_step
from tests.helpers import ROOT

NS = "shop"
STEPS = 40
ROWS = 3  # per step
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}
TAIL = [sys.executable, "-m", "pyspark_durable", "tail"]

# the writer process: STEPS steps of ROWS rows, and before every third one an attempt
# it never commits (its rows, "ghost-...", must never be seen)
WRITER = """
import sys, time
import pyarrow as pa
from pyspark_durable.endpoint import open_namespace, write_step
ns = open_namespace({"backend": "file", "namespace": "shop", "options": {"path": sys.argv[1]}})
for s in range(int(sys.argv[2])):
    if s % 3 == 0:
        ns.begin("ghost", s).write("orders", pa.table(
            {"id": pa.array([-s], pa.int64()), "tag": [f"ghost-{s}"], "blob": [b"x"]}))
    write_step(ns, "loader", s, {"orders": pa.table({
        "id": pa.array([s * 10 + i for i in range(3)], pa.int64()),
        "tag": [f"s{s}-r{i}" for i in range(3)], "blob": [bytes([s, i]) for i in range(3)]})})
    time.sleep(0.03)
ns.close()
"""


def expected_rows(steps: int) -> Counter:
    return Counter((s * 10 + i, f"s{s}-r{i}", bytes([s, i])) for s in range(steps)
                   for i in range(ROWS))


def make_wal(root: Path, steps: int, pause_s: float = 0.0) -> list[int]:
    """``steps`` steps of table 'orders' as the writer process writes them; the commit
    time (ms) of each."""
    ns = open_namespace({"backend": "file", "namespace": NS, "options": {"path": str(root)}})
    times = []
    for s in range(steps):
        write_step(ns, "loader", s, {"orders": pa.table({
            "id": pa.array([s * 10 + i for i in range(ROWS)], pa.int64()),
            "tag": [f"s{s}-r{i}" for i in range(ROWS)],
            "blob": [bytes([s, i]) for i in range(ROWS)]})})
        times.append(ns.step_commit(s).timestamp_ms)
        time.sleep(pause_s)
    ns.close()
    return times


class Tail:
    """A ``durablewal tail --follow --format jsonl`` process and a consumer of its lines
    that takes a step only once its ``_step_end`` row arrived: what it took is
    ``taken``, its position ``last_step``; rows of a step not ended are dropped when the
    tail dies, as a consumer that commits per step would."""

    def __init__(self, root: Path, from_step: int, tmp: Path) -> None:
        self.err = tmp / f"tail-{from_step}.err"
        self.proc = subprocess.Popen(
            [*TAIL, str(root), "--namespace", NS, "--table", "orders", "--follow", "--format",
             "jsonl", "--from-step", str(from_step), "--poll-ms", "50"],
            stdout=subprocess.PIPE, stderr=self.err.open("w"), env=ENV)
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def consume(self, taken: list[dict], last_step: int, until: int,
                timeout_s: float = 60) -> int:
        """Take complete steps until ``until`` is taken or the stream ends; the new position."""
        pending: list[dict] = []
        deadline = time.monotonic() + timeout_s
        while last_step < until and time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.5)
            except queue.Empty:
                continue
            if line is None:
                break
            if not line.endswith(b"\n"):
                break  # the half-written last line of a killed tail
            row = json.loads(line)
            assert row["_step"] > last_step, ("a step came twice", row)
            pending.append(row)
            if row["_step_end"]:
                assert {r["_step"] for r in pending} == {row["_step"]}
                taken += pending
                pending, last_step = [], row["_step"]
        return last_step


@pytest.mark.crash
def test_follow_survives_a_killed_tail_exactly_once(tmp_path):
    """This tests that a consumer of `tail --follow --format jsonl` that records its last
    complete step and restarts the tail (after SIGKILL) with --from-step last+1 gets
    every committed row exactly once, by content, while a writer process commits steps
    and leaves uncommitted attempts beside them; SIGTERM then ends the tail with exit 0."""
    root = tmp_path / "wal"
    make_wal(root, 1)  # the namespace and its table exist before the tail starts
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(root), str(STEPS)], env=ENV)
    taken: list[dict] = []
    first = Tail(root, 0, tmp_path)
    last = first.consume(taken, -1, until=8)
    assert last >= 8, first.err.read_text()
    os.kill(first.proc.pid, signal.SIGKILL)
    first.proc.wait(timeout=30)
    first.consume(taken, last, until=last)  # whatever was in the pipe: not taken
    second = Tail(root, last + 1, tmp_path)
    assert writer.wait(timeout=120) == 0
    last = second.consume(taken, last, until=STEPS - 1)
    second.proc.send_signal(signal.SIGTERM)
    assert second.proc.wait(timeout=30) == 0
    assert second.err.read_text() == ""
    assert last == STEPS - 1
    got = Counter((r["id"], r["tag"], base64.b64decode(r["blob"])) for r in taken)
    assert got == expected_rows(STEPS)  # each once; no ghost row
    assert all(r["_table"] == "orders" and {"_region", "_sequence", "_row"} <= r.keys()
               for r in taken)


def run_tail(root: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([*TAIL, str(root), "--namespace", NS, "--table", "orders", *argv],
                          capture_output=True, env=ENV, timeout=120)


def test_arrow_stream_reads_back_as_the_rows(tmp_path):
    """This tests that `--format arrow` writes an Arrow IPC stream that
    pyarrow.ipc.open_stream reads as the table's rows, one batch per step, with the
    metadata columns."""
    make_wal(tmp_path / "wal", 5)
    done = run_tail(tmp_path / "wal", "--format", "arrow", "--from-step", "1")
    assert done.returncode == 0, done.stderr
    reader = pa.ipc.open_stream(done.stdout)
    batches = list(reader)
    assert [b.column("_step").unique().to_pylist() for b in batches] == [[1], [2], [3], [4]]
    table = pa.Table.from_batches(batches, reader.schema)
    assert table.select(["id", "tag", "blob"]).to_pylist() == [
        {"id": s * 10 + i, "tag": f"s{s}-r{i}", "blob": bytes([s, i])}
        for s in range(1, 5) for i in range(ROWS)]
    assert table.column("_row").to_pylist() == [0, 1, 2] * 4


def test_from_time_starts_at_the_first_step_committed_at_or_after_it(tmp_path, capsys):
    """This tests that `--from-time` (ISO-8601 or ms) starts at the first step committed at
    or after it, as the Spark source's startingTimestamp, and the -n default (last rows)
    without a start."""
    times = make_wal(tmp_path / "wal", 4, pause_s=0.02)
    iso = dt.datetime.fromtimestamp(times[2] / 1000, dt.UTC).isoformat()
    for when in (iso, str(times[2])):
        code = main(["tail", str(tmp_path / "wal"), "--namespace", NS, "--table", "orders",
                     "--format", "jsonl", "--from-time", when])
        out, err = capsys.readouterr()
        assert (code, err) == (0, "")
        rows = [json.loads(line) for line in out.splitlines()]
        assert [r["_step"] for r in rows] == [2, 2, 2, 3, 3, 3]
        assert [r["_step_end"] for r in rows] == [False, False, True] * 2
    code = main(["tail", str(tmp_path / "wal"), "--namespace", NS, "--table", "orders",
                 "--format", "jsonl", "-n", "4"])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert code == 0 and [(r["_step"], r["_row"]) for r in rows] == [(2, 2), (3, 0), (3, 1),
                                                                     (3, 2)]


def test_piped_to_head_exits_0_without_a_traceback(tmp_path):
    """This tests that `tail --format jsonl | head -n 3` ends with exit 0 and nothing on
    stderr, read once and followed (the follow notices the closed pipe while it waits)."""
    make_wal(tmp_path / "wal", 5)
    tail = " ".join([*TAIL, str(tmp_path / "wal"), "--namespace", NS, "--table", "orders",
                     "--format", "jsonl", "--from-step", "0"])
    for extra in ("", " --follow --poll-ms 50"):
        done = subprocess.run(["bash", "-o", "pipefail", "-c", f"{tail}{extra} | head -n 3"],
                              capture_output=True, text=True, env=ENV, timeout=120)
        assert (done.returncode, done.stderr) == (0, ""), done.stderr
        assert [json.loads(line)["id"] for line in done.stdout.splitlines()] == [0, 1, 2]


def test_bad_input_is_one_typed_line(tmp_path, capsys):
    """This tests that a negative --from-step is a usage error, an unknown table names
    the close one, a step not committed yet (without --follow) and a bad time are one
    line naming what to give, and --follow without a machine format is refused."""
    make_wal(tmp_path / "wal", 2)
    base = ["tail", str(tmp_path / "wal"), "--namespace", NS]
    with pytest.raises(SystemExit) as info:
        main([*base, "--table", "orders", "--format", "jsonl", "--from-step", "-1"])
    assert info.value.code == 2 and "-1 is negative" in capsys.readouterr().err
    cases = [(["--table", "ordrs", "--format", "jsonl"], "did you mean 'orders'?"),
             (["--table", "orders", "--format", "jsonl", "--from-step", "9"],
              "--from-step 9 is not committed yet; committed steps are [0, 2)"),
             (["--table", "orders", "--format", "arrow", "--from-time", "yesterday"],
              "is not a timestamp"),
             (["--table", "orders", "--follow"], "give --format jsonl or --format arrow")]
    for argv, needle in cases:
        code = main([*base, *argv])
        out, err = capsys.readouterr()
        assert (code, out) == (2, ""), err
        assert err.startswith("durablewal: error: ") and err.count("\n") == 1, err
        assert needle in err and "Traceback" not in err


def test_follow_waits_for_a_step_not_committed_yet(tmp_path):
    """This tests that a follow from the next step (a consumer caught up) waits for it,
    prints it once committed, and ends with exit 0 on SIGINT."""
    root = tmp_path / "wal"
    make_wal(root, 2)
    proc = subprocess.Popen([*TAIL, str(root), "--namespace", NS, "--table", "orders",
                             "--follow", "--format", "jsonl", "--from-step", "2",
                             "--poll-ms", "50"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=ENV)
    try:
        ns = open_namespace({"backend": "file", "namespace": NS,
                             "options": {"path": str(root)}})
        time.sleep(1.5)  # the tail started and waits (if not yet, it finds the step at once)
        write_step(ns, "loader", 2, {"orders": [{"id": 20, "tag": "late", "blob": b""}]})
        ns.close()
        line = proc.stdout.readline()
        assert json.loads(line)["tag"] == "late"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        assert (proc.returncode, out, err) == (0, b"", b"")
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
