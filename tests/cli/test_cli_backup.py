"""``durablewal backup``: a consistent copy of a file-log namespace while a writer and a
cleaner run in their own processes.

The writer is the writer of ``tests/children/backup_child.py`` (steps of two tables in
two regions, each after an abandoned attempt of several pages that a cleaner frees by
punching holes), the cleaner the cleaner role of ``tests/children/stress_child.py``
(passes back to back, grace 0) over a retention policy, and segments are small: so
expiry, segment deletions, frees, snapshots and commits-log trims all run while each
backup is taken. Every backup is the CLI in a process of its own; every copy is judged
by what a fresh handle reads from it, and by ``durablewal check``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from pyspark_durable.cli import main
from pyspark_durable.log import open_store
from pyspark_durable.wal import Namespace, RetentionPolicy
from tests.children.wal_child import write_step
from tests.helpers import CHILDREN, ROOT, frame_spans, wait_until
from tests.wal_crash_tools import check_namespace

NS = "shop"
KEEP_STEPS = 12  # the retention policy: steps expire (and are deleted) during every backup
BACKUPS = 3
SEGMENT_BYTES = 128 << 10  # a region segment holds about two steps: deletions unlink files


def config(root: Path) -> dict:
    return {"path": str(root), "segment_size_bytes": SEGMENT_BYTES}


class Child:
    """A child process whose stdout lines are collected by a thread (its stderr goes to
    a file: a full pipe would stall it)."""

    def __init__(self, argv: list[str], log: Path) -> None:
        self.lines: list[str] = []
        self.err = log
        with open(log, "w") as err:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
                env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"})
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def acks(self) -> dict[int, int]:
        """writer step -> step of every ``ACK`` so far: each was acknowledged before the
        line was read."""
        return {int(p[1]): int(p[2]) for p in (ln.split() for ln in list(self.lines))
                if p and p[0] == "ACK"}

    def count(self, word: str) -> int:
        return sum(ln.split()[:1] == [word] for ln in list(self.lines))

    def alive(self) -> None:
        assert self.proc.poll() is None, f"the child died: {self.err.read_text()[-3000:]}"

    stop_flag: Path | None = None  # a cleaner's: it ends its passes once the file exists

    def stop(self) -> None:
        """End a cleaner between two passes (killed if it does not end in a minute)."""
        assert self.stop_flag is not None
        self.stop_flag.touch()
        try:
            self.proc.wait(timeout=60)
        finally:
            self.kill()

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=60)
        self.thread.join(timeout=10)


@pytest.fixture
def running(tmp_path: Path):
    """A WAL with a retention policy, a writer committing steps and a cleaner running
    passes back to back, each a process; stopped (the writer with SIGKILL) at the end."""
    root = tmp_path / "wal"
    ns = Namespace(open_store("file", NS, **config(root)))
    ns.set_retention(RetentionPolicy(max_steps=KEEP_STEPS))
    ns.close()
    cfg = json.dumps(config(root))
    writer = Child([sys.executable, str(CHILDREN / "backup_child.py"), "writer", cfg, NS],
                   tmp_path / "writer.err")
    stop = tmp_path / "stop-cleaner"
    cleaner = Child([sys.executable, str(CHILDREN / "stress_child.py"), "cleaner", "file",
                     cfg, NS, str(stop)], tmp_path / "cleaner.err")
    cleaner.stop_flag = stop
    try:
        yield root, writer, cleaner
    finally:
        writer.kill()
        cleaner.stop()


def cli(*argv: object) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pyspark_durable", *map(str, argv)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def retained_start(root: Path) -> int:
    ns = Namespace(open_store("file", NS, **config(root)), None, create=False)
    try:
        return ns.steps().start
    finally:
        ns.close()


def assert_copy_holds(copy: Path, acked: dict[int, int], first_retained: int) -> None:
    """The copy opens in a fresh process's way, holds every step acknowledged before its
    backup started that the source still retained (by content, under its step number),
    its steps are dense and each writer step is one step, and check finds nothing."""
    ns = Namespace(open_store("file", NS, **config(copy)), None, create=False)
    try:
        steps = ns.steps()
        assert steps.start <= first_retained, (steps, first_retained)
        assert steps.stop > max(acked.values()), (steps, max(acked.values()))
        check_namespace(ns, acked, retained_only=True)  # by content; dense sequences
    finally:
        ns.close()
    assert main(["check", str(copy), "--namespace", NS]) == 0  # in this process: no start-up


@pytest.mark.crash
def test_backups_taken_while_a_writer_and_a_cleaner_run_open_whole(running, tmp_path):
    """This tests the backup's consistency rule under load: while a writer process commits
    steps and a cleaner process runs retention passes back to back (expiring, deleting
    segments, freeing abandoned attempts, writing snapshots, trimming the commits log),
    three backups are taken one after the other; each copy opens, holds every step the
    writer acknowledged before that backup started (and the source still retained) by
    content, with dense steps and sequences, and checks clean; the writer and the
    cleaner went on during every backup, and the source checks clean at the end."""
    root, writer, cleaner = running
    for n in range(BACKUPS):
        wait_until(lambda n=n: len(writer.acks()) >= 15 * (n + 1) and cleaner.count("PASS"),
                   lambda: f"writer acks ({len(writer.acks())}) and a cleaner pass", 60)
        acked = writer.acks()
        passes, before = cleaner.count("PASS"), len(acked)
        dest = tmp_path / f"backup-{n}"
        done = cli("backup", "--path", root, "--namespace", NS, dest)
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"to {dest}: steps [" in done.stdout and "OK: the copy's check" in done.stdout
        assert f"give {dest} as the WAL's path" in done.stdout, done.stdout
        assert not Path(f"{dest}.partial").exists()
        assert_copy_holds(dest, acked, retained_start(root))
        writer.alive()
        cleaner.alive()
        assert cleaner.count("PASS") > passes and len(writer.acks()) > before
    assert_source_whole(root, writer, cleaner)


def assert_source_whole(root: Path, writer: Child, cleaner: Child) -> None:
    """Once the writer is killed and the cleaner stopped (a check reads segments a running
    cleaner deletes and frees), the source checks clean and holds every step the writer
    acknowledged that is still retained, by content."""
    writer.kill()
    cleaner.stop()
    assert cleaner.proc.returncode == 0 and cleaner.lines[-1] == "DONE", cleaner.err.read_text()
    assert main(["check", str(root), "--namespace", NS]) == 0
    source = Namespace(open_store("file", NS, **config(root)), None, create=False)
    try:
        check_namespace(source, writer.acks(), retained_only=True)
    finally:
        source.close()


def hold_backup(root: Path, dest: Path, point: str, log: Path) -> Child:
    """A backup process held at failpoint ``point`` (it has printed ``AT point``)."""
    child = Child([sys.executable, str(CHILDREN / "backup_child.py"), "backup", point,
                   "backup", "--path", str(root), "--namespace", NS, str(dest)], log)
    wait_until(lambda: f"AT {point}" in child.lines or child.proc.poll() is not None,
               f"the backup at {point}", 60)
    assert f"AT {point}" in child.lines, child.err.read_text()
    return child


def while_held(writer: Child, cleaner: Child) -> None:
    """The writer commits and the cleaner passes (deleting, freeing, trimming) while a
    backup is held: neither waits for a backup, however long it takes."""
    acks, passes = len(writer.acks()), cleaner.count("PASS")
    wait_until(lambda: len(writer.acks()) >= acks + 10 and cleaner.count("PASS") >= passes + 3,
               lambda: f"the writer ({len(writer.acks()) - acks} acks) and the cleaner "
                       f"({cleaner.count('PASS') - passes} passes) while the backup is held", 60)


@pytest.mark.crash
def test_a_backup_held_after_its_capture_copies_the_namespace_as_captured(running, tmp_path):
    """This tests the capture against everything a cleaner changes in place: a backup held
    right after its capture (its files open, its copy locks held, nothing copied) while
    the writer commits and the cleaner expires steps, deletes the segments it holds open,
    frees dead entries in them and trims the commits log; let go, it finishes, and its
    copy holds every step acknowledged before it started, by content, and checks clean
    (a hole punched in a captured segment, or a segment read by name after its deletion,
    would fail that check)."""
    root, writer, cleaner = running
    wait_until(lambda: len(writer.acks()) >= 10 and cleaner.count("PASS"),
               "the writer's first steps", 60)
    acked = writer.acks()
    dest = tmp_path / "backup"
    held = hold_backup(root, dest, "backup.captured", tmp_path / "held.err")
    while_held(writer, cleaner)
    held.proc.stdin.write("go\n")
    held.proc.stdin.flush()
    assert held.proc.wait(timeout=120) == 0, held.err.read_text()
    held.thread.join(timeout=10)
    assert any(ln.startswith("OK: the copy's check") for ln in held.lines), held.lines
    assert_copy_holds(dest, acked, retained_start(root))
    writer.alive()
    cleaner.alive()
    assert_source_whole(root, writer, cleaner)


@pytest.mark.crash
@pytest.mark.parametrize("point", ["backup.captured", "backup.copied"])
def test_a_backup_killed_midway_leaves_the_source_whole_and_a_partial_the_next_refuses(
        running, tmp_path, point, capsys):
    """This tests a backup SIGKILLed midway: held at ``point`` (its capture taken, its
    locks held and its files open; or its copy written but not checked or renamed) the
    writer keeps committing and the cleaner keeps passing; killed there, it leaves no
    DEST, only DEST.partial, which a second backup to DEST refuses by name (exit 2,
    nothing written); once it is removed, a backup to DEST succeeds and its copy holds
    every step acknowledged before it; and the source checks clean."""
    root, writer, cleaner = running
    wait_until(lambda: len(writer.acks()) >= 10 and cleaner.count("PASS"),
               "the writer's first steps", 60)
    dest = tmp_path / "backup"
    partial = Path(f"{dest}.partial")
    held = hold_backup(root, dest, point, tmp_path / "held.err")
    while_held(writer, cleaner)
    held.kill()
    assert not dest.exists() and partial.is_dir()

    assert main(["backup", str(root), "--namespace", NS, str(dest)]) == 2
    refused = capsys.readouterr().err
    assert f"{partial} exists: a backup to {dest} was interrupted" in refused, refused
    assert "incomplete" in refused and f"rm -rf {partial}" in refused
    assert not dest.exists()

    subprocess.run(["rm", "-rf", str(partial)], check=True)
    acked = writer.acks()
    done = cli("backup", root, "--namespace", NS, dest)
    assert done.returncode == 0, done.stdout + done.stderr
    assert_copy_holds(dest, acked, retained_start(root))
    writer.alive()
    cleaner.alive()
    assert_source_whole(root, writer, cleaner)


@pytest.fixture
def small_wal(tmp_path: Path) -> Path:
    root = tmp_path / "wal"
    ns = Namespace(open_store("file", NS, **config(root)))
    for ws in range(5):
        write_step(ns, ws)
    ns.close()
    return root


def tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def test_a_destination_that_is_not_new_and_empty_is_refused_and_nothing_is_written(
        small_wal, tmp_path, capsys):
    """This tests the refusals: a DEST holding a file, a DEST that is a file, a DEST
    inside the WAL root, and an S3 or Kafka WAL (each naming what backs it up instead,
    before any connection) all exit 2 with a typed error naming what was wrong, and write
    nothing (no DEST.partial either); an empty DEST folder is taken, with PATH and DEST
    on either side of the options."""
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    a_file = tmp_path / "a-file"
    a_file.write_text("mine")
    cases = [
        (["backup", "--path", small_wal, "--namespace", NS, full],
         f"destination {full} exists and is not empty"),
        (["backup", small_wal, "--namespace", NS, a_file],
         f"destination {a_file} exists and is not empty"),
        (["backup", small_wal, "--namespace", NS, small_wal / "inside"],
         f"is inside the WAL root {small_wal}"),
        (["backup", "s3://bucket/wal", "--namespace", NS, tmp_path / "s3"],
         "S3 Versioning"),
        (["backup", "--bootstrap-servers", "127.0.0.1:9", "--namespace", NS,
          tmp_path / "kafka"], "Cluster Linking"),
    ]
    before = tree(tmp_path)
    for argv, said in cases:
        code = main([str(a) for a in argv])
        err = capsys.readouterr().err
        assert code == 2 and said in err, (argv, err)
        assert tree(tmp_path) == before, argv
    assert (full / "keep.txt").read_text() == "mine" and a_file.read_text() == "mine"

    empty = tmp_path / "empty"
    empty.mkdir()
    code = main(["backup", str(small_wal), "--namespace", NS, str(empty)])
    out = capsys.readouterr().out
    assert code == 0 and "steps [0, 5) (5 retained)" in out, out
    doc_code = main(["backup", str(tmp_path / "json"), "--json", "--namespace", NS,
                     "--path", str(small_wal)])
    doc = json.loads(capsys.readouterr().out)
    assert doc_code == 0 and doc["steps"] == [0, 5] and doc["check"]["ok"], doc
    assert doc["bytes"] == sum(doc["logs"].values()) and set(doc["logs"]) == {
        "commits", "region_0", "region_1"} | ({"snapshots"} & set(doc["logs"]))
    for copy in (empty, tmp_path / "json"):
        ns = Namespace(open_store("file", NS, **config(copy)), None, create=False)
        try:
            check_namespace(ns, {}, retained_only=True)
            assert ns.steps() == range(0, 5)
        finally:
            ns.close()


def test_a_copy_that_fails_its_check_stays_partial_and_the_backup_fails(small_wal, tmp_path,
                                                                         capsys):
    """This tests the check a copy passes before it is a backup: a source with one damaged
    entry (a flipped byte in a step's frame) gives a copy with the same damage, so the
    backup exits 2 with BackupCheckFailed naming the problem and the partial copy, which
    it keeps for inspection; DEST is never made, and the source is not changed."""
    ns = Namespace(open_store("file", NS, **config(small_wal)), None, create=False)
    run = ns.step_commit(2).runs[0]
    ns.close()
    segment = min((small_wal / NS / f"region_{run.region_id}").glob("*.seg"))
    first, end = frame_spans(segment)[run.start]
    data = bytearray(segment.read_bytes())
    data[(first + end) // 2] ^= 0xFF
    segment.write_bytes(bytes(data))
    dest = tmp_path / "backup"
    assert main(["backup", str(small_wal), "--namespace", NS, str(dest)]) == 2
    err = capsys.readouterr().err
    assert "fails its check" in err and f"{dest}.partial" in err, err
    assert f"offset={run.start}" in err and "step 2 is lost" in err, err
    assert not dest.exists() and Path(f"{dest}.partial", NS).is_dir()
    assert segment.read_bytes() == bytes(data)
