"""What the WAL crash tests share: running a writer child that is killed, and checking
what a fresh process finds against what the child acknowledged."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa

from pyspark_durable.wal import Namespace
from tests.children.wal_child import WRITER, rows_for, run
from tests.helpers import assert_acknowledged

CHILD = str(Path(__file__).parent / "children" / "wal_child.py")


def run_child(backend: str, config: dict, namespace: str, mode: str, steps: int,
              kill: tuple[int, float] | None, env: dict[str, str] | None = None,
              out: list[str] | None = None) -> tuple[list[tuple[int, int]], bool]:
    """Run the child; with ``kill=(n, s)``, SIGKILL it ``s`` seconds after its n-th ack.

    Counting acks bounds the progress of one run whatever the machine's speed; the
    random delay after them lands the kill anywhere inside the following steps.
    """
    env = {**(env or os.environ), "PYTHONPATH": str(Path(__file__).parent.parent)}
    proc = subprocess.Popen(
        [sys.executable, CHILD, backend, json.dumps(config), namespace, mode, str(steps)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lines: list[str] = []
    if kill is not None:
        for line in proc.stdout:  # blocks on the child's acknowledgements
            lines.append(line)
            if line.startswith("ACK") and sum(ln.startswith("ACK") for ln in lines) >= kill[0]:
                time.sleep(kill[1])  # the random moment of the kill is the point of the test
                os.kill(proc.pid, signal.SIGKILL)
                break
    # read the rest through the same buffered stream: communicate() would read the pipe's
    # file descriptor directly and drop lines this wrapper already buffered (lost ACKs)
    lines += proc.stdout.read().splitlines()
    err = proc.stderr.read()
    proc.wait(timeout=120)
    if kill is None or proc.returncode != -signal.SIGKILL:
        assert proc.returncode in (0, -signal.SIGKILL), err
    if out is not None:
        out += [ln.rstrip("\n") for ln in lines]
    return parsed(lines)


def parsed(lines: list[str]) -> tuple[list[tuple[int, int]], bool]:
    """The writer's lines as ((writer step, step) of every ACK, whether it said DONE)."""
    acks = [(int(p[1]), int(p[2])) for p in (ln.split() for ln in lines) if p and p[0] == "ACK"]
    return acks, any(ln.strip() == "DONE" for ln in lines)


def run_writer_here(backend: str, config: dict, namespace: str, mode: str,
                    steps: int) -> tuple[list[tuple[int, int]], bool]:
    """The child's writer in this process: what :func:`run_child` returns, without the
    half second of a new interpreter importing pyarrow, where nothing is killed or
    injected (a fresh ``Namespace`` has no state a process would not have)."""
    lines: list[str] = []
    run(backend, config, namespace, mode, steps, lines.append)
    return parsed(lines)


def expected_step_rows(ws: int) -> dict[str, pa.Table]:
    return {"a": rows_for(ws, "a"), "b": rows_for(ws, "b")}


def check_namespace(ns: Namespace, acked: dict[int, int], retained_only: bool) -> None:
    """Every acknowledged step once, by content; nothing of abandoned attempts; dense sequences."""
    steps = ns.steps()
    seen_ws: dict[int, int] = {}
    seqs: dict[int, list[int]] = {}
    for step in steps:
        commit = ns.step_commit(step)
        assert commit.writer_id == WRITER
        ws = commit.writer_step
        assert ws not in seen_ws, f"writer step {ws} committed twice: {seen_ws[ws]} and {step}"
        seen_ws[ws] = step
        got: dict[str, list[pa.RecordBatch]] = {}
        for sb in ns.read_step(step):
            got.setdefault(ns.tables.by_id(refresh=False)[sb.table_id].name, []).extend(sb.batches)
            seqs.setdefault((sb.region_id, sb.table_id), []).append(sb.sequence_num)
        for table, expect in expected_step_rows(ws).items():
            if expect.num_rows == 0:
                assert table not in got, (step, ws, table)
                continue
            assert pa.Table.from_batches(got[table]).equals(expect), (step, ws, table)
    for ws, step in acked.items():
        assert_acknowledged(ns, WRITER, ws, step)
        if not retained_only or step >= steps.start:
            assert seen_ws.get(ws) == step, f"acknowledged ws={ws} step={step} is missing"
    for key, got_seqs in seqs.items():
        expect_end = ns.tables.regions(key[1])[key[0]]
        assert got_seqs == list(range(expect_end - len(got_seqs), expect_end)), key
