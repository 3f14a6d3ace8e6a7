"""Stress test of retention: writers, a reader and cleaners, all SIGKILLed and restarted.

Two writer processes commit steps, one reader reads them and expires what it read,
two cleaners run passes with ``grace_ms=0`` back to back, all at once, each killed
by SIGKILL many times at random moments and restarted (``tests/children/stress_child.py``).
Kills are driven by the children's output (a writer after k more of its ACKs, the
reader after k more READs, a cleaner after k more ACKs of the writers once it has
passed at least once; then a small random delay), so a faster machine kills at the
same points of the work. Writers hold back while the reader lags (so cleaners often
find everything expired and race attempts in flight: ``LOST`` retries). Then nothing
acknowledged may be lost, duplicated or changed.
"""

from __future__ import annotations

import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pytest

from pyspark_durable.wal import Cleaner, Namespace, table_id_for_name
from pyspark_durable.wal.upkeep.check import Checker
from tests.helpers import CHILDREN, ROOT, assert_acknowledged

pytestmark = [pytest.mark.crash, pytest.mark.backends("file", "kafka-confluent", "s3")]
CHILD = str(CHILDREN / "stress_child.py")
WRITERS = ("w0", "w1")
CLEANERS = ("c0", "c1")
READER = "stress-reader"
TABLES = ("a", "b")
REGION_OF = {"a": 0, "b": 1}  # as in stress_child.py
WRITER_STEPS = {"file": 600, "kafka": 80, "s3": 30}  # per writer
# kills per process of each kind: file 2*3 + 4 + 2*3 = 16, kafka 2*2 + 2 + 2*2 = 10,
# s3 2*2 + 1 + 2*1 = 7 (its commits and cleaner passes take several round trips each)
KILLS = {"file": {"writer": 3, "reader": 4, "cleaner": 3},
         "kafka": {"writer": 2, "reader": 2, "cleaner": 2},
         "s3": {"writer": 2, "reader": 1, "cleaner": 1}}
KILL_DELAY_S = 0.03  # at most, after the k-th line: lands the kill anywhere in the next one
STALL_S = 90.0  # a running child with no progress line for this long has stalled
DEADLINE_S = 600.0  # the whole run, however lively the cleaners stay
SEED = 0x5EED5


@dataclass
class Child:
    """One logical child (a writer, the reader, a cleaner) across its restarts."""

    name: str
    kind: str  # writer | reader | cleaner
    args: list[str]
    # kill after k more counted lines, k drawn in this range: a writer's ACKs, the
    # reader's READs; for a cleaner, writers' ACKs once it has passed at least once
    kill_after: tuple[int, int]
    kills_left: int
    gen: int = -1
    proc: subprocess.Popen | None = None
    stderr: list[Path] = field(default_factory=list)
    progress: int = 0  # progress lines of the current generation
    kill_count: int = 0  # lines of this generation counted towards its kill
    kill_at: int | None = None  # kill after this many progress lines of this generation
    last_progress: float = 0.0
    done_gens: set[int] = field(default_factory=set)
    finished: bool = False
    kills: int = 0

    @property
    def progress_word(self) -> str:
        return {"writer": "ACK", "reader": "READ", "cleaner": "PASS"}[self.kind]

    def stderr_text(self) -> str:
        parts = []
        for path in self.stderr[-3:]:
            text = path.read_text(errors="replace") if path.exists() else ""
            parts.append(f"--- {path.name} ---\n{text[-4000:]}")
        return "\n".join(parts)


class Run:
    """Starts, kills and restarts the children; collects their lines by generation."""

    def __init__(self, backend: str, config: dict, namespace: str, tmp: Path, rng: random.Random):
        self.base = [sys.executable, CHILD]
        self.target = [backend, json.dumps(config), namespace]
        self.tmp = tmp
        self.rng = rng
        self.events: queue.Queue[tuple[str, int, str | None]] = queue.Queue()
        self.env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.lines: dict[str, list[tuple[int, list[str]]]] = defaultdict(list)

    def start(self, child: Child) -> None:
        child.gen += 1
        child.progress = child.kill_count = 0
        child.last_progress = time.monotonic()
        child.kill_at = self.rng.randint(*child.kill_after) if child.kills_left else None
        err = self.tmp / f"{child.name}.{child.gen}.err"
        child.stderr.append(err)
        with err.open("w") as err_file:
            child.proc = subprocess.Popen(
                [*self.base, child.kind, *self.target, *child.args], stdout=subprocess.PIPE,
                stderr=err_file, text=True, env=self.env)
        threading.Thread(target=self._pump, args=(child.name, child.gen, child.proc.stdout),
                         daemon=True).start()

    def _pump(self, name: str, gen: int, stdout: IO[str]) -> None:
        for line in stdout:
            self.events.put((name, gen, line.rstrip("\n")))
        self.events.put((name, gen, None))

    def kill(self, child: Child) -> None:
        """SIGKILL the current generation (after a small random delay) and restart it."""
        time.sleep(self.rng.uniform(0.0, KILL_DELAY_S))  # the random moment of the kill
        child.proc.send_signal(signal.SIGKILL)
        if child.proc.wait() != -signal.SIGKILL:
            return  # it finished on its own first: its end of output says how
        child.kills += 1
        child.kills_left -= 1
        self.start(child)

    def on_line(self, children: list[Child], child: Child, gen: int, line: str | None) -> None:
        if line is None:  # end of a generation's output
            if gen != child.gen:
                return  # a killed generation
            code = child.proc.wait()
            if code == 0 and gen in child.done_gens:
                child.finished = True
                return
            pytest.fail(f"{child.name} (generation {gen}) exited with {code} without DONE:\n"
                        f"{child.stderr_text()}", pytrace=False)
        words = line.split() or [""]
        self.lines[child.name].append((gen, words))
        if words[0] == "BAD":
            pytest.fail(f"{child.name} found wrong content: {line}\n{child.stderr_text()}",
                        pytrace=False)
        if words[0] == "DONE":
            child.done_gens.add(gen)
        own = gen == child.gen and words[0] in (child.progress_word, "DONE")
        if own:
            child.progress += 1
            child.last_progress = time.monotonic()
        writing = not all(c.finished for c in children if c.kind == "writer")
        for c in children:  # a cleaner's kill counts writers' ACKs (its own passes once they
            # are done), the others' kills their own lines
            mine = c is child and own and words[0] != "DONE"
            counts = (words[0] == "ACK" if writing else mine) if c.kind == "cleaner" else mine
            if c.kill_at is None or not counts or c.proc.poll() is not None:
                continue
            c.kill_count += 1
            if c.kill_count >= c.kill_at and c.progress >= 1:
                self.kill(c)

    def check_stalls(self, children: list[Child]) -> None:
        now = time.monotonic()
        for child in children:
            if not child.finished and now - child.last_progress > STALL_S:
                pytest.fail(f"{child.name} made no progress for {STALL_S:.0f} s (stalled); "
                            f"its last lines: {self.lines[child.name][-5:]}\n"
                            f"{child.stderr_text()}", pytrace=False)

    def drive(self, children: list[Child], stop_flag: Path) -> None:
        """Run every child to DONE, killing as planned; stop the cleaners at the end."""
        by_name = {c.name: c for c in children}
        cleaners = [c for c in children if c.kind == "cleaner"]
        for child in children:
            self.start(child)
        deadline = time.monotonic() + DEADLINE_S
        try:
            while not all(c.finished for c in children):
                if time.monotonic() > deadline:
                    pytest.fail(f"the run did not end within {DEADLINE_S:.0f} s: " + ", ".join(
                        f"{c.name} finished={c.finished} kills left={c.kills_left}"
                        for c in children), pytrace=False)
                try:
                    name, gen, line = self.events.get(timeout=STALL_S)  # the children's output
                except queue.Empty:
                    self.check_stalls(children)
                    continue
                self.on_line(children, by_name[name], gen, line)
                self.check_stalls(children)
                if not stop_flag.exists() and all(
                    c.finished for c in children if c.kind != "cleaner"
                ) and not any(c.kills_left for c in cleaners):
                    stop_flag.touch()
        finally:
            for child in children:
                if child.proc is not None and child.proc.poll() is None:
                    child.proc.kill()
                    child.proc.wait()


def kill_range(lines: int, kills: int) -> tuple[int, int]:
    """Kill after k counted lines, k in this range: every kill lands before the work ends."""
    high = lines // (kills + 1)
    return max(1, high // 4), high


def parse_reads(gens: list[tuple[int, list[str]]]) -> dict[int, list[tuple[int, tuple[str, ...]]]]:
    """READ lines per reader generation, in order: (step, (writer, ws, spans...))."""
    per_gen: dict[int, list[tuple[int, tuple[str, ...]]]] = defaultdict(list)
    for gen, words in gens:
        if words[0] == "READ":
            per_gen[gen].append((int(words[1]), tuple(words[2:])))
    return per_gen


def test_acknowledged_steps_survive_kills_of_writers_reader_and_cleaners(
    make_store, store_config, namespace, tmp_path
):
    """This tests that nothing acknowledged is ever lost with concurrent writers, a reader
    that expires and cleaners with grace 0, all SIGKILLed at random moments and restarted."""
    backend, config = store_config
    n = WRITER_STEPS[backend]
    total = n * len(WRITERS)
    kills = KILLS[backend]
    Namespace(make_store()).close()  # the namespace exists before the first child
    stop_flag = tmp_path / "stop-cleaners"
    children = [
        *(Child(w, "writer", [w, str(n), READER], kill_range(n, kills["writer"]), kills["writer"])
          for w in WRITERS),
        Child("reader", "reader", [READER, str(total)], kill_range(total, kills["reader"]),
              kills["reader"]),
        *(Child(c, "cleaner", [str(stop_flag)], kill_range(total, kills["cleaner"]),
                kills["cleaner"]) for c in CLEANERS),
    ]
    run = Run(backend, config, namespace, tmp_path, random.Random(SEED))
    started = time.monotonic()
    run.drive(children, stop_flag)
    elapsed = time.monotonic() - started
    by_kind = Counter({kind: sum(c.kills for c in children if c.kind == kind)
                       for kind in ("writer", "reader", "cleaner")})
    lost = sum(words[0] == "LOST" for w in WRITERS for _, words in run.lines[w])
    passes = [int(words[2]) for c in CLEANERS for _, words in run.lines[c] if words[0] == "PASS"]
    freed = sum(passes)
    summary = (f"[{backend}] {elapsed:.1f} s: {total} steps, kills {dict(by_kind)} "
               f"(total {sum(by_kind.values())}), {lost} LOST retries, {len(passes)} cleaner "
               f"passes freeing {freed} entries")
    print(summary, flush=True)  # before the checks: a failing run reports its numbers too
    planned = {kind: k * sum(c.kind == kind for c in children) for kind, k in kills.items()}
    assert dict(by_kind) == planned, f"not every planned kill happened: {summary}"
    assert freed > 0, f"the cleaners never deleted anything: {summary}"

    # every acknowledged (writer, ws) is exactly one step, whatever restarts re-acknowledged
    acked: dict[tuple[str, int], int] = {}
    owner: dict[int, tuple[str, int]] = {}
    for w in WRITERS:
        for _, words in run.lines[w]:
            if words[0] != "ACK":
                continue
            pair, step = (words[1], int(words[2])), int(words[3])
            assert pair[0] == w, words
            assert acked.setdefault(pair, step) == step, f"{pair} acked as {acked[pair]} and {step}"
            assert owner.setdefault(step, pair) == pair, f"step {step} acked for {owner[step]}, {pair}"
    assert set(acked) == {(w, ws) for w in WRITERS for ws in range(n)}
    assert sorted(owner) == list(range(total)), "acknowledged steps are not 0..total-1"

    # the reader read every acknowledged step, with its content; a step twice only when the
    # reader was killed between reading it and recording its position
    per_gen = parse_reads(run.lines["reader"])
    content: dict[int, tuple[str, ...]] = {}
    last = -1
    duplicates = 0
    for gen in sorted(per_gen):
        steps = [s for s, _ in per_gen[gen]]
        assert steps[0] in (last, last + 1), f"reader generation {gen} started at {steps[0]} after {last}"
        assert steps == list(range(steps[0], steps[0] + len(steps))), f"generation {gen} skipped steps"
        duplicates += steps[0] == last
        for step, fields in per_gen[gen]:
            assert content.setdefault(step, fields) == fields, f"step {step} read as two contents"
        last = steps[-1]
    assert sorted(content) == list(range(total)), "the reader did not read every step"
    for pair, step in acked.items():
        assert (content[step][0], int(content[step][1])) == pair, (step, pair, content[step])

    # sequence numbers are dense per table: each step's entries start where the last ended
    next_seq = dict.fromkeys(TABLES, 0)
    for step in range(total):
        for span in content[step][2:]:
            table, first, entries = span.split(":")
            assert int(first) == next_seq[table], (
                f"step {step} table {table} starts at sequence {first}, not {next_seq[table]}")
            next_seq[table] += int(entries)

    # the namespace opens afresh, checks clean, survives one more pass and opens again
    ns = Namespace(make_store())
    assert ns.steps().stop == total
    for table in TABLES:
        key = (REGION_OF[table], table_id_for_name(table))
        assert ns.tables.regions(key[1])[key[0]] == next_seq[table], table
    for pair, step in acked.items():
        assert_acknowledged(ns, *pair, step)
    report = Checker(make_store()).run()
    assert not report.problems, report.problems
    Cleaner(ns, grace_ms=0).run_once()
    again = Namespace(make_store())
    assert again.steps() == range(total, total), again.steps()
    for pair, step in acked.items():
        assert_acknowledged(again, *pair, step)
    report = Checker(make_store()).run()
    assert not report.problems, report.problems

    print(f"[{backend}] every check passed; {duplicates} steps read again after a reader kill")
