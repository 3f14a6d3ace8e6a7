"""File-backend-specific tests of ``pyspark_durable.log.file``, with real processes.

The generic contract lives in ``test_log_contract.py``; these tests prove what only the
embedded file log promises: several processes append to one log safely, an
acknowledged append survives ``kill -9`` at any moment, a torn tail is truncated and
reported, a CRC failure in the middle is an error naming where, appends share fsyncs
and return only after one covering their bytes, and retention removes whole segments.

Child processes run ``tests/children/file_log_child.py``; every record's bytes are a pure
function of ``(tag, seq)`` (:func:`file_log_child.make_record`), so the test recomputes
what any entry it finds must contain.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
import zlib
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import pytest

from pyspark_durable.errors import CorruptEntryError, OffsetOutOfRange
from pyspark_durable.log import Record
from pyspark_durable.log.file import BODY_HEAD, FRAME_HEAD, FileLogStore, encode_frame
from pyspark_durable.log.file.store import NAMED_SEGMENT_BYTES
from tests.children.file_log_child import make_record, parse_key
from tests.helpers import CHILDREN, ROOT

CHILD = CHILDREN / "file_log_child.py"
LOGGER = "pyspark_durable.log.file"
NS = "filelog"
LOG = "region_0"


# -- helpers ---------------------------------------------------------------------------


def spawn(args: list[object], stderr_path: Path) -> subprocess.Popen:
    """Start ``file_log_child.py`` with ``args`` (stdin/stdout piped, stderr to a file)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    with open(stderr_path, "w") as err:
        return subprocess.Popen(
            [sys.executable, str(CHILD), *map(str, args)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True, env=env,
        )


def kill_all(procs: list[subprocess.Popen]) -> None:
    """Kill (by pid) the children this test started that are still running."""
    for p in procs:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
        for stream in (p.stdin, p.stdout):
            if stream is not None:
                stream.close()


def frames(path: Path) -> tuple[list[tuple[int, int, int]], int]:
    """Parse a segment independently of the backend: ``[(pos, end, offset)]`` of the valid
    frames from its start, and the byte position where valid frames stop."""
    data = path.read_bytes()
    out, pos = [], 0
    while pos + FRAME_HEAD.size <= len(data):
        length, crc = FRAME_HEAD.unpack_from(data, pos)
        body = data[pos + FRAME_HEAD.size : pos + FRAME_HEAD.size + length]
        if length < BODY_HEAD.size or len(body) != length or zlib.crc32(body) != crc:
            break
        end = pos + FRAME_HEAD.size + length
        out.append((pos, end, BODY_HEAD.unpack_from(body)[0]))
        pos = end
    return out, pos


def segment_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.seg"))


def frame_index(folder: Path) -> dict[int, tuple[str, int]]:
    """offset -> (real path of its segment, byte position after its frame)."""
    index = {}
    for seg in segment_files(folder):
        found, _ = frames(seg)
        for _, end, offset in found:
            index[offset] = (os.path.realpath(seg), end)
    return index


def fd_path(fd: int) -> str:
    return os.path.realpath(f"/proc/self/fd/{fd}")


def rec(i: int, size: int = 200) -> Record:
    return make_record(7, i, size)


def open_log(root: Path, segment_size: int = 64 * 1024, **kw):
    store = FileLogStore(NS, path=str(root), segment_size_bytes=segment_size, **kw)
    return store, store.open_log(LOG)


def check_entry(entry, max_value: int) -> tuple[int, int]:
    """The entry is exactly the record its key names; return that (tag, seq)."""
    tag, seq = parse_key(entry.key)
    want = make_record(tag, seq, max_value)
    assert (entry.value, entry.headers) == (want.value, want.headers), (
        f"offset {entry.offset} holds bytes that no writer appended as (tag={tag}, seq={seq})"
    )
    return tag, seq


# -- 1. several processes ---------------------------------------------------------------


def test_four_processes_append_concurrently_and_a_reader_follows(tmp_path):
    """This tests that 4 processes (2 threads each) appending to one log at once, with
    16 KiB segments rolling under them, lose nothing and duplicate nothing: every record
    of every child is present exactly once at the offset it was acknowledged at, offsets
    are dense 0..N-1, bytes are identical and no frame fails its CRC; and that a reader
    in a fifth process, following the log while they append, only ever sees complete
    entries that a writer appended, in dense order, under a growing high watermark."""
    root, seg, count, threads, writers = tmp_path / "wal", 16 * 1024, 400, 2, 4
    total = count * writers
    procs: list[subprocess.Popen] = []
    try:
        reader = spawn(["read", root, NS, LOG, total, seg], tmp_path / "reader.err")
        procs.append(reader)
        appenders = [
            spawn(["append", root, NS, LOG, w, count, seg, threads], tmp_path / f"w{w}.err")
            for w in range(writers)
        ]
        procs += appenders
        for p in procs:
            assert p.stdout.readline() == "ready\n", (tmp_path / "reader.err").read_text()
        for p in appenders:  # release every appender at once
            p.stdin.write("go\n")
            p.stdin.flush()
        results = [json.loads(p.communicate(timeout=60)[0]) for p in appenders]
        seen = json.loads(reader.communicate(timeout=60)[0])
    finally:
        kill_all(procs)
    assert [p.returncode for p in procs] == [0] * len(procs)
    assert [r["errors"] for r in results] == [[]] * writers

    acked = {(tag, seq): off for r in results for tag, seq, off in r["acks"]}
    assert len(acked) == total == sum(len(r["acks"]) for r in results)
    assert set(acked) == {(w, s) for w in range(writers) for s in range(count)}
    assert sorted(acked.values()) == list(range(total)), "acknowledged offsets not dense"

    store, log = open_log(root, seg)
    try:
        assert (log.low_watermark(), log.high_watermark()) == (0, total)
        content = []
        for entry in log.read(0):
            tag, seq = check_entry(entry, 300)
            assert acked[(tag, seq)] == entry.offset
            content.append([entry.offset, tag, seq])
        assert [c[0] for c in content] == list(range(total))
    finally:
        store.close()
    segs = segment_files(root / NS / LOG)
    assert len(segs) >= 5, "segments did not roll during the test"
    for path in segs:  # every byte on disk is a valid frame: no torn or corrupt frame
        found, end = frames(path)
        assert end == path.stat().st_size and found[0][2] == int(path.stem)

    assert seen["problems"] == []
    assert seen["entries"] == content, "the reader saw other entries than the log holds"
    samples = seen["samples"]
    assert samples == sorted(set(samples)), f"high watermark went back: {samples}"
    assert samples[-1] == total
    assert len([s for s in samples if 0 < s < total]) >= 2, (
        f"the reader never read while the writers appended: {samples}"
    )


# -- 2. kill -9 ----------------------------------------------------------------------------


KILLS = 24
CRASH_THREADS = 2
CRASH_SEGMENT = 64 * 1024


def run_victim(root: Path, run: int, delay_s: float, err: Path) -> tuple[list[str], str]:
    """Start a crash child, SIGKILL it ``delay_s`` after its first acknowledgement, and
    return its complete output lines and its stderr."""
    child = spawn(["crash", root, NS, LOG, run, CRASH_SEGMENT, CRASH_THREADS], err)
    lines: list[str] = []
    acking = threading.Event()

    def pump() -> None:
        for line in child.stdout:
            lines.append(line)
            acking.set()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        assert acking.wait(30), f"crash child {run} never acknowledged: {err.read_text()}"
        time.sleep(delay_s)  # the random moment of the kill is the point of the test
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
        reader.join(timeout=30)
    finally:
        kill_all([child])
    assert child.returncode == -signal.SIGKILL, err.read_text()
    return [line for line in lines if line.endswith("\n")], err.read_text()


@pytest.mark.crash
def test_kill_9_never_loses_an_acknowledged_append(tmp_path, caplog):
    """This tests that a process appending as fast as it can (2 threads, batches of 1-50
    records up to 4 KiB, 64 KiB segments) and killed with SIGKILL at 24 random moments
    never loses an acknowledged append: after each kill, a fresh open finds every
    acknowledged entry at its acknowledged offset byte for byte, offsets dense, only
    entries some writer appended (each writer's sequence without a hole), and the high
    watermark at least one past the last acknowledged offset; the next writer repairs
    any torn tail and continues right after the last complete entry."""
    root = tmp_path / "wal"
    rng = random.Random(0xD0AB1E)
    acked: dict[int, tuple[int, int]] = {}  # offset -> (tag, seq)
    checked = 0  # offsets [0, checked) were verified after an earlier kill
    torn_tails = repaired = 0
    started = time.monotonic()
    for run in range(KILLS):
        lines, stderr = run_victim(root, run, rng.uniform(0.02, 0.3), tmp_path / f"c{run}.err")
        repaired += stderr.count("truncating torn tail")
        run_acks: dict[int, tuple[int, int]] = {}
        for line in lines:
            assert line.startswith("A "), f"child {run} reported: {line}"
            tag, seq0, n, off0 = map(int, line.split()[1:])
            run_acks.update({off0 + i: (tag, seq0 + i) for i in range(n)})
        assert run_acks, f"run {run}: no acknowledgement before the kill"
        assert min(run_acks) >= checked, "an append reused an offset of an earlier entry"
        acked.update(run_acks)

        last = segment_files(root / NS / LOG)[-1]
        torn_tails += frames(last)[1] < last.stat().st_size
        store, log = open_log(root, CRASH_SEGMENT)
        try:
            high = log.high_watermark()
            assert log.low_watermark() == 0
            assert high >= max(run_acks) + 1 >= checked + 1
            seqs: dict[int, list[int]] = defaultdict(list)
            offsets = []
            for entry in log.read(checked):
                tag, seq = check_entry(entry, 4096)
                assert tag // 16 == run, f"offset {entry.offset}: entry of another run"
                assert run_acks.get(entry.offset, (tag, seq)) == (tag, seq), (
                    f"offset {entry.offset} holds {(tag, seq)}, acknowledged "
                    f"{run_acks[entry.offset]}"
                )
                seqs[tag].append(seq)
                offsets.append(entry.offset)
            assert offsets == list(range(checked, high)), "offsets are not dense"
            assert set(run_acks) <= set(offsets)
            for tag, got in seqs.items():  # a writer's records, in its order, no hole
                assert got == list(range(len(got))), f"writer {tag}: {got[:5]}..."
            checked = high
        finally:
            store.close()
    elapsed = time.monotonic() - started

    # Final: everything acknowledged in any run is still there, and the next writer
    # repairs the last torn tail (if the last kill left one) and appends right after.
    assert len(segment_files(root / NS / LOG)) > KILLS, "segments did not roll"
    caplog.set_level(logging.WARNING, logger=LOGGER)
    store, log = open_log(root, CRASH_SEGMENT)
    try:
        found = {e.offset: parse_key(e.key) for e in log.read(0)}
        assert list(found) == list(range(checked))
        assert all(found[o] == acked[o] for o in acked)
        assert log.append([make_record(999, 0, 10)]) == [checked]
        last = segment_files(root / NS / LOG)[-1]
        assert frames(last)[1] == last.stat().st_size
    finally:
        store.close()
    print(f"\n{KILLS} kills in {elapsed:.1f} s, {len(acked)} acknowledged entries, "
          f"{checked} entries, "
          f"{len(segment_files(root / NS / LOG))} segments, {torn_tails} torn tails seen, "
          f"{repaired} repaired by the next child")


# -- 3. torn tail --------------------------------------------------------------------------


def _half_frame(frame: bytes) -> bytes:
    return frame[: len(frame) // 2]


TORN = {
    "half-frame": _half_frame,
    "header-with-short-body": lambda frame: frame[: FRAME_HEAD.size + 10],
    "partial-header": lambda frame: frame[:5],
    "zeros": lambda frame: b"\0" * 3000,
    "half-frame-then-zeros": lambda frame: _half_frame(frame) + b"\0" * 700,
}


@pytest.mark.parametrize("kind", sorted(TORN))
def test_torn_tail_is_reported_and_truncated_by_the_next_writer(tmp_path, caplog, kind):
    """This tests that a torn tail (a partial frame, a header with a short body, or
    zero-filled bytes) after N good entries is not returned by readers and not touched
    by them, and that the next writer truncates exactly the torn bytes, logs a warning
    naming the segment, and appends at offset N."""
    root, n = tmp_path / "wal", 48
    store, log = open_log(root, 4096)
    records = [rec(i, 400) for i in range(n)]
    for i in range(0, n, 6):
        log.append(records[i : i + 6])
    store.close()
    last = segment_files(root / NS / LOG)[-1]
    assert len(segment_files(root / NS / LOG)) >= 3
    good = last.stat().st_size
    torn = TORN[kind](encode_frame(n, 1, rec(n)))
    with open(last, "ab") as f:
        f.write(torn)

    caplog.set_level(logging.WARNING, logger=LOGGER)
    store, log = open_log(root, 4096)
    try:
        assert (log.low_watermark(), log.high_watermark()) == (0, n)
        got = list(log.read(0))
        assert [(e.offset, e.value) for e in got] == [(i, r.value) for i, r in enumerate(records)]
        assert last.stat().st_size == good + len(torn), "a reader modified the segment"
        assert not [r for r in caplog.records if r.name == LOGGER]

        extra = rec(n, 150)
        assert log.append([extra]) == [n]
        warnings = [r for r in caplog.records if r.name == LOGGER]
        assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
        message = warnings[0].getMessage()
        assert "torn tail" in message and last.name in message and f"byte {good}" in message
        assert last.stat().st_size == good + len(encode_frame(n, 1, extra))
        assert [e.value for e in log.read(0)] == [r.value for r in [*records, extra]]
    finally:
        store.close()
    store, log = open_log(root, 4096)
    try:
        assert log.high_watermark() == n + 1 and [e.offset for e in log.read(n)] == [n]
    finally:
        store.close()


# -- 4. CRC error in the middle ---------------------------------------------------------------


def _flip(path: Path, at: int, mask: int = 0xFF) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= mask
    path.write_bytes(bytes(data))


# Where to damage a frame: a body byte, the CRC field, the length field's top byte
# (the frame then seems to run past the end of the segment, like a torn write; with
# 0xFF it claims ~4 GiB, which must not be read into memory), the length's low byte.
DAMAGE = {
    "body": lambda pos, end: (pos + FRAME_HEAD.size + (end - pos - FRAME_HEAD.size) // 2, 0xFF),
    "crc": lambda pos, end: (pos + 5, 0x01),
    "length-high": lambda pos, end: (pos, 0x40),
    "length-huge": lambda pos, end: (pos, 0xFF),
    "length-low": lambda pos, end: (pos + 3, 0x01),
}


def _filled(root: Path) -> tuple[list[Path], list[Record]]:
    store, log = open_log(root, 4096)
    records = [rec(i, 300) for i in range(90)]
    for i in range(0, 90, 6):
        log.append(records[i : i + 6])
    store.close()
    segs = segment_files(root / NS / LOG)
    assert len(segs) >= 3
    return segs, records


def _reads_around(log, records: list[Record], bad: int) -> None:
    """Every offset but ``bad`` reads back its record; ``bad`` raises, naming itself."""
    for o, r in enumerate(records):
        if o == bad:
            with pytest.raises(CorruptEntryError) as err:
                list(log.read(o, o + 1))
            assert err.value.where["offset"] == bad
        else:
            assert [e.value for e in log.read(o, o + 1)] == [r.value], o


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_acknowledged_frame_in_the_last_segment_stays_local(tmp_path, damage):
    """This tests that a damaged frame in the middle of the LAST segment, below the
    acknowledged end, takes down only its own offset: the log opens, a read through it
    raises CorruptEntryError naming the segment, byte and offset (on every open, and for a
    handle that had indexed the frame before), every other entry of the segment, before
    and after the damage, reads back, nothing in the file is truncated or changed by
    readers, and a writer appends after it without touching the damaged bytes."""
    root = tmp_path / "wal"
    segs, records = _filled(root)
    last = segs[-1]
    found, _ = frames(last)
    assert len(found) >= 3
    pos, end, offset = found[len(found) // 2]
    early_store, early = open_log(root, 4096)
    try:
        at, mask = DAMAGE[damage](pos, end)
        _flip(last, at, mask)
        before = last.read_bytes()
        for _ in range(2):
            store, log = open_log(root, 4096)
            try:
                assert log.high_watermark() == len(records)
                with pytest.raises(CorruptEntryError) as err:
                    list(log.read(0))
                message = str(err.value)
                assert last.name in message and f"at byte {pos} " in message, message
                assert f"expected offset {offset}" in message
                _reads_around(log, records, offset)
            finally:
                store.close()
            assert last.read_bytes() == before, "a damaged segment was modified"

        assert early.high_watermark() == len(records)  # refresh under the lock
        with pytest.raises(CorruptEntryError) as err:
            list(early.read(int(last.stem)))
        assert last.name in str(err.value) and f"at byte {pos} " in str(err.value)
        assert last.read_bytes() == before

        store, log = open_log(root, 4096)
        try:
            extra = rec(len(records), 120)
            assert log.append([extra]) == [len(records)]
            assert last.read_bytes()[: len(before)] == before
            _reads_around(log, [*records, extra], offset)
        finally:
            store.close()
    finally:
        early_store.close()


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_corrupt_frame_in_a_sealed_segment_fails_the_read(tmp_path, damage):
    """This tests that a damaged frame in a SEALED (non-last) segment makes reading it
    raise CorruptEntryError naming the segment file and byte position, both for a log
    opened afterwards (which scans the segment when it is read) and for a log that had
    indexed the segment before the damage, while every other entry, of the same segment
    and of the segments after it, stays readable."""
    root = tmp_path / "wal"
    segs, records = _filled(root)
    sealed = segs[1]
    found, _ = frames(sealed)
    pos, end, offset = found[len(found) // 2]
    early_store, early = open_log(root, 4096)
    try:
        assert len(list(early.read(0))) == len(records)  # indexes every segment
        at, mask = DAMAGE[damage](pos, end)
        _flip(sealed, at, mask)
        store, log = open_log(root, 4096)  # opening only scans the last segment
        try:
            for reader in (log, early):
                with pytest.raises(CorruptEntryError) as err:
                    list(reader.read(0))
                message = str(err.value)
                assert sealed.name in message and f"at byte {pos} " in message, message
                base = int(segs[-1].stem)
                assert [e.value for e in reader.read(base)] == [r.value for r in records[base:]]
                got = []
                with pytest.raises(CorruptEntryError) as err:
                    for e in reader.read(int(sealed.stem)):
                        got.append(e.offset)
                assert f"at byte {pos} " in str(err.value), "a second read names another place"
                start = int(sealed.stem)  # entries before the damaged one, never one after
                assert got == list(range(start, start + len(got))) and len(got) <= offset - start
                _reads_around(reader, records, offset)  # the rest of the segment reads
        finally:
            store.close()
    finally:
        early_store.close()


# -- 5. group commit ------------------------------------------------------------------------


def test_concurrent_appends_share_fsyncs_and_each_waits_for_one(tmp_path, monkeypatch):
    """This tests that appends from many threads of one process share fdatasync calls
    (far fewer fsyncs than appends), while each append returns only after an fdatasync
    that started after the append was called, on the append's segment file, with the
    file already long enough to hold all of the append's frames."""
    tick = itertools.count()
    syncs: list[tuple[int, str, int]] = []  # (tick when done, file, size when called)
    real = os.fdatasync

    def recording(fd: int) -> None:
        size, path = os.fstat(fd).st_size, fd_path(fd)
        real(fd)
        syncs.append((next(tick), path, size))

    monkeypatch.setattr(os, "fdatasync", recording)
    root = tmp_path / "wal"
    store, log = open_log(root, 32 * 1024, group_commit_interval_ms=10)
    n_threads, per_thread = 12, 40
    calls: list[tuple[int, int, list[int]]] = []
    start = threading.Barrier(n_threads)
    errors: list[BaseException] = []

    def work(t: int) -> None:
        rng = random.Random(t)
        start.wait()
        try:
            for i in range(per_thread):
                batch = [make_record(t, i * 10 + j, 200) for j in range(rng.randint(1, 3))]
                call = next(tick)
                offsets = log.append(batch)
                calls.append((call, next(tick), offsets))
        except Exception as exc:  # noqa: BLE001 - the main thread asserts there is none
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    store.close()
    assert not errors
    assert len(calls) == n_threads * per_thread
    assert len(syncs) * 4 <= len(calls), f"{len(syncs)} fsyncs for {len(calls)} appends"
    index = frame_index(root / NS / LOG)
    appended = sorted(o for _, _, offs in calls for o in offs)
    assert appended == sorted(index) == list(range(len(index)))
    assert len({path for path, _ in index.values()}) >= 2, "no segment roll"
    for call, ret, offsets in calls:
        for o in offsets:
            path, end = index[o]
            assert any(call < done < ret and p == path and size >= end
                       for done, p, size in syncs), f"offset {o} returned before its fsync"


def test_a_lone_append_written_by_its_caller_goes_first_and_the_others_wait_their_turn(
        tmp_path, monkeypatch):
    """This tests the rule for an append written on its caller's thread (nothing was
    pending or being written): while it is inside its fdatasync, appends handed to the
    writer thread meanwhile are not written and do not return; they are written after
    it, at the offsets that follow its own, each returning after a sync of its frames;
    a synchronous append that comes meanwhile joins them instead of writing on its own
    thread. The lone write is held inside its fsync by the test (no sleep decides it)."""
    real = os.fdatasync
    inside, release = threading.Event(), threading.Event()
    synced: list[tuple[int, str, int]] = []  # (thread, file, size) of each finished sync

    def holding(fd: int) -> None:
        path = fd_path(fd)
        if path.endswith(".seg") and not inside.is_set():
            inside.set()  # the first segment sync after arming: the lone write's
            assert release.wait(30), "the test never released the held fsync"
        real(fd)
        synced.append((threading.get_ident(), path, os.fstat(fd).st_size))

    root = tmp_path / "wal"
    store, log = open_log(root, 1 << 20, group_commit_interval_ms=0)
    assert log.append([make_record(1, 0, 100)]) == [0]
    inside.set()  # the setup's syncs are not held
    monkeypatch.setattr(os, "fdatasync", holding)
    inside.clear()
    lone_result: list[list[int]] = []
    lone = threading.Thread(target=lambda: lone_result.append(
        log.append([make_record(1, 1, 100), make_record(1, 2, 100)])))
    lone.start()
    assert inside.wait(30), "the lone append never reached its fsync"
    later = [log.append_async([make_record(2, i, 100)]) for i in range(3)]
    joined: list[list[int]] = []
    sync_caller = threading.Thread(target=lambda: joined.append(
        log.append([make_record(3, 0, 100)])))
    sync_caller.start()
    sync_caller.join(0.5)  # it must not finish while the lone write holds the log
    assert sync_caller.is_alive() and not any(f.done() for f in later)
    release.set()
    lone.join(30)
    sync_caller.join(30)
    assert lone_result == [[1, 2]]
    assert [f.result(30) for f in later] == [[3], [4], [5]]
    assert joined == [[6]]
    seg_syncs = [(t, size) for t, path, size in synced if path.endswith(".seg")]
    assert seg_syncs[0][0] == lone.ident, "the lone append was not written by its caller"
    assert all(t != lone.ident and t != sync_caller.ident for t, _ in seg_syncs[1:]), (
        "an append that came during the lone write did not go to the writer thread")
    store.close()
    _, reopened = open_log(root, 1 << 20)
    want = [make_record(1, i, 100) for i in range(3)] + \
        [make_record(2, i, 100) for i in range(3)] + [make_record(3, 0, 100)]
    got = [(e.key, e.value) for e in reopened.read(0)]
    assert got == [(r.key, r.value) for r in want]


# -- 6. durability order ----------------------------------------------------------------------


def test_append_returns_only_after_fdatasync(tmp_path, monkeypatch):
    """This tests that an append does not return while the fdatasync of its bytes is
    still running (the frame is already written when the fsync starts), nor before the
    record of what is acknowledged was fdatasync'd after it, and that over
    sequential appends rolling segments every append returns after an fdatasync covering
    its frames and, for a new segment, after the folder was fsync'd (its directory entry
    is durable too)."""
    tick = itertools.count()
    events: list[tuple[int, str, str, int]] = []  # (tick when done, kind, path, size)
    entered, release = threading.Event(), threading.Event()
    blocking = [False]  # opening a new log writes its empty mark first
    real_fdatasync, real_fsync = os.fdatasync, os.fsync

    def fdatasync(fd: int) -> None:
        size, path = os.fstat(fd).st_size, fd_path(fd)
        if blocking[0]:
            entered.set()
            assert release.wait(30)
        real_fdatasync(fd)
        events.append((next(tick), "fdatasync", path, size))

    def fsync(fd: int) -> None:
        path = fd_path(fd)
        real_fsync(fd)
        events.append((next(tick), "fsync", path, 0))

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    monkeypatch.setattr(os, "fsync", fsync)
    root = tmp_path / "wal"
    store, log = open_log(root, 2048, group_commit_interval_ms=0)
    folder = os.path.realpath(root / NS / LOG)
    blocking[0] = True
    events.clear()
    try:
        result: list = []
        appender = threading.Thread(
            target=lambda: result.append((log.append([rec(0)]), next(tick)))
        )
        appender.start()
        assert entered.wait(30), "the append never called fdatasync"
        appender.join(0.3)
        assert appender.is_alive() and not result, "append returned before its fdatasync"
        release.set()
        appender.join(30)
        assert result and result[0][0] == [0]
        synced = [e for e in events if e[1] == "fdatasync"]
        # the frame's fdatasync, then the acknowledgement record's, then the return
        assert len(synced) == 2 and synced[1][0] < result[0][1]
        _, _, path, size = synced[0]
        assert (path, size) == frame_index(root / NS / LOG)[0], "fsync'd before the write"
        assert synced[1][2] == os.path.join(folder, "acked")

        blocking[0] = False
        calls = []
        for i in range(1, 80):
            call = next(tick)
            offsets = log.append([rec(i * 3 + j, 150) for j in range(1 + i % 3)])
            calls.append((call, next(tick), offsets))
    finally:
        release.set()
        store.close()
    index = frame_index(root / NS / LOG)
    new_segments = {int(p.stem) for p in segment_files(root / NS / LOG)} - {0}
    assert len(new_segments) >= 5
    for call, ret, offsets in calls:
        during = [e for e in events if call < e[0] < ret]
        for o in offsets:
            path, end = index[o]
            assert any(k == "fdatasync" and p == path and s >= end for _, k, p, s in during), o
        if offsets[0] in new_segments:  # this append rolled to a new segment
            assert any(k == "fsync" and p == folder for _, k, p, _ in during)


# -- 7. rolls and retention --------------------------------------------------------------------


def test_roll_and_delete_before_remove_whole_segments(tmp_path):
    """This tests that segments roll at segment_size_bytes into files named by their
    first offset, that delete_before removes exactly the segment files whose entries
    are all below the new low watermark (never the active one, never a segment still
    holding a needed entry), and that the low watermark persists across a reopen while
    appends continue at the high watermark."""
    root, size = tmp_path / "wal", 4096
    store, log = open_log(root, size)
    folder = root / NS / LOG
    records = [rec(i, 300) for i in range(150)]
    for i in range(0, 150, 5):
        log.append(records[i : i + 5])
    segs = segment_files(folder)
    bases = [int(p.stem) for p in segs]
    assert len(segs) >= 6 and bases[0] == 0
    for path, base, nxt in zip(segs, bases, [*bases[1:], 150], strict=True):
        found, end = frames(path)
        assert [o for _, _, o in found] == list(range(base, nxt)), path.name
        assert end == path.stat().st_size
        if nxt != 150:
            assert path.stat().st_size >= size, f"{path.name} rolled early"

    cut = bases[2] + 1  # inside the third segment: the first two go
    log.delete_before(cut)
    assert [int(p.stem) for p in segment_files(folder)] == bases[2:]
    assert (folder / "low_watermark").read_text() == f"{cut} {zlib.crc32(str(cut).encode()):08x}"
    assert (log.low_watermark(), log.high_watermark()) == (cut, 150)
    with pytest.raises(OffsetOutOfRange):
        log.read(cut - 1)
    assert [e.value for e in log.read(cut)] == [r.value for r in records[cut:]]
    log.delete_before(1)  # the low watermark never goes back
    assert log.low_watermark() == cut
    log.delete_before(bases[3])  # exactly a segment's base: the one before it goes
    assert [int(p.stem) for p in segment_files(folder)] == bases[3:]
    store.close()

    store, log = open_log(root, size)
    try:
        assert (log.low_watermark(), log.high_watermark()) == (bases[3], 150)
        log.delete_before(10_000)  # everything: the active segment rolls and goes too
        assert [int(p.stem) for p in segment_files(folder)] == [150]
        assert (log.low_watermark(), log.high_watermark()) == (150, 150)
        assert list(log.read(150)) == []
    finally:
        store.close()
    store, log = open_log(root, size)
    try:
        assert (log.low_watermark(), log.high_watermark()) == (150, 150)
        assert log.append([rec(150)]) == [150]
        assert [e.offset for e in log.read(150)] == [150]
        with pytest.raises(OffsetOutOfRange):
            log.read(149)
    finally:
        store.close()


@pytest.mark.parametrize("tail, expect, acked, clean_after, verdict", [
    (True, 5, 6, True, "ACKNOWLEDGED"),   # below the acknowledged end: damage, whatever follows
    (True, 5, 6, False, "ACKNOWLEDGED"),
    (True, 6, 6, True, "TORN"),           # at the acknowledged end, nothing valid after: torn
    (True, 6, 6, False, "CORRUPT"),       # a valid frame after it: corruption, never truncated
    (False, 6, 0, True, "CORRUPT"),       # a sealed segment is never torn
])
def test_torn_tail_rule_as_a_decision(tail, expect, acked, clean_after, verdict):
    """This tests that the torn-tail rule decides from the acknowledged end first: a bad
    frame below it is damage even if nothing follows, one at or above it is a torn tail
    only in the last segment and only with no valid frame after it (and then the file is
    not even read to find out when the acknowledged end already decides)."""
    from pyspark_durable.log.file.segments import Verdict, judge_bad_frame

    asked = []

    def nothing_valid_after() -> bool:
        asked.append(True)
        return clean_after

    got = judge_bad_frame(tail=tail, expect=expect, acked=acked,
                          nothing_valid_after=nothing_valid_after)
    assert got is Verdict[verdict]
    assert bool(asked) == (tail and expect >= acked)


def test_an_append_never_stats_the_files_it_syncs(tmp_path, monkeypatch):
    """This tests that appends (a lone caller's and the writer thread's, rolling
    segments) ask no stat of the last segment or of ``acked``, the files they write and
    fdatasync, except a new segment's inode once when a roll makes it: on Linux 6.13+ a
    stat makes the next write take a fine-grained time, and the fdatasync after it
    commits that to ext4's journal (30 us of CPU a sync, measured in bench/RESULTS.md).
    Sizes are read by seeking to the end instead; every entry still reads back."""
    root = tmp_path / "wal"
    store, log = open_log(root, 8 * 1024)
    log.append([rec(0)])
    asked: list[str] = []

    def watching(real):
        def call(target, *args, **kwargs):
            name = fd_path(target) if isinstance(target, int) else str(target)
            if name.endswith((".seg", "/acked")):
                asked.append(f"{real.__name__}({name})")
            return real(target, *args, **kwargs)
        return call

    for fn in ("stat", "fstat", "lstat"):
        monkeypatch.setattr(os, fn, watching(getattr(os, fn)))
    for i in range(1, 100):
        if i % 3:
            log.append([rec(i)])
        else:
            log.append_async([rec(i)]).result()
    monkeypatch.undo()
    # a roll asks the new segment's inode once, when it is made: one sync pays for it
    created = {f"stat({p})" for p in segment_files(root / NS / LOG)[1:]}
    repeated = [a for a in asked if a not in created or asked.count(a) > 1]
    assert repeated == [], f"appends stat'd the files they sync: {sorted(set(repeated))}"
    assert created, "no segment roll"
    assert [e.offset for e in log.read(0)] == list(range(100))
    store.close()


def test_a_lone_appender_never_waits_for_the_group_commit_interval(tmp_path, monkeypatch):
    """This tests that appends that come one after another (each after the previous one
    returned) are written at once, with no group-commit wait, while appends from
    concurrent threads do wait (up to the interval) so that they share fsyncs."""
    waits: list[float] = []
    real_sleep = time.sleep

    def recording(seconds: float) -> None:
        if threading.current_thread().name.startswith("durablewal-"):
            waits.append(seconds)
        real_sleep(seconds)

    monkeypatch.setattr(time, "sleep", recording)
    store, log = open_log(tmp_path / "wal", group_commit_interval_ms=200)
    try:
        for i in range(20):
            assert log.append([Record(b"k", b"v%d" % i)]) == [i]
        assert waits == [], f"a lone appender waited {waits}"

        start = threading.Barrier(4)

        def worker(n: int) -> None:
            start.wait()
            for i in range(10):
                log.append([Record(b"t%d" % n, b"v%d" % i)])

        pool = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        assert log.high_watermark() == 60
        assert waits, "concurrent appenders never waited to share an fsync"
    finally:
        store.close()


def test_deleting_inside_the_active_segment_frees_it_at_the_next_deletion(tmp_path):
    """This tests that a log that never fills a segment still frees disk: a deletion point
    inside the segment being appended to rolls it, so the next deletion past it removes
    the file, and reads and appends go on across the roll."""
    root = tmp_path / "wal"
    store, log = open_log(root, 64 * 1024)  # rolls on deletion once it holds 4 KiB
    folder = root / NS / LOG
    try:
        log.append([rec(i, 500) for i in range(20)])  # ~10 KB: one segment, far from full
        log.delete_before(15)
        assert [int(p.stem) for p in segment_files(folder)] == [0, 20], "no roll"
        assert [e.offset for e in log.read(15)] == list(range(15, 20))
        assert log.append([rec(i, 500) for i in range(20, 25)]) == list(range(20, 25))
        log.delete_before(22)  # past the rolled segment: its file goes
        assert [int(p.stem) for p in segment_files(folder)] == [20]
        assert [e.offset for e in log.read(22)] == [22, 23, 24]
        log.delete_before(23)  # the new segment holds ~2.5 KB: below 4 KiB, no roll
        assert [int(p.stem) for p in segment_files(folder)] == [20]
    finally:
        store.close()
    store, log = open_log(root, 64 * 1024)
    try:
        assert (log.low_watermark(), log.high_watermark()) == (23, 25)
    finally:
        store.close()


# -- 8. a small disk: sizes that follow it, and the reserve ------------------------------


def fake_disk(monkeypatch: pytest.MonkeyPatch, size_bytes: int) -> list[str]:
    """Make os.statvfs report a file system of ``size_bytes``; the paths it was asked."""
    asked: list[str] = []

    def statvfs(path: object) -> SimpleNamespace:
        asked.append(str(path))
        return SimpleNamespace(f_blocks=size_bytes // 4096, f_frsize=4096)

    monkeypatch.setattr(os, "statvfs", statvfs)
    return asked


@pytest.mark.parametrize("disk, segment, reserve", [
    (6 << 20, 96 << 10, 96 << 10),         # a small disk: 1/64 of it each
    (1 << 20, 16 << 10, 16 << 10),
    (32 << 10, 1024, 16 << 10),            # never below the option's minimum, nor 4 blocks
    (4 << 30, 64 << 20, 1 << 20),          # from 4 GiB up: 64 MiB segments as before
    (1 << 40, 64 << 20, 1 << 20),
    (0, 64 << 20, 1 << 20),                # a file system that does not say its size
])
def test_default_segment_size_and_reserve_follow_the_disk(tmp_path, monkeypatch, disk,
                                                          segment, reserve):
    """This tests that without segment_size_bytes a store's region segments are 1/64 of
    the file system its folder is on (measured on the nearest existing parent when the
    folder does not exist yet), at most 64 MiB, that logs which are not regions keep at
    most 4 MiB, that the reserve is 1/64 of the disk between 16 KiB and 1 MiB (both at
    their caps when the disk's size is unknown), and that an explicit segment_size_bytes
    wins."""
    asked = fake_disk(monkeypatch, disk)
    root = tmp_path / "not" / "yet"
    store = FileLogStore(NS, path=str(root))
    try:
        assert asked == [str(tmp_path)]
        assert (store.segment_size_bytes, store.reserve_bytes) == (segment, reserve)
        assert store.open_log(LOG).segment_size_bytes == segment
        assert store.open_log("commits").segment_size_bytes == min(segment, NAMED_SEGMENT_BYTES)
    finally:
        store.close()
    store = FileLogStore(NS, path=str(root), segment_size_bytes=2048)
    try:
        assert store.segment_size_bytes == 2048
    finally:
        store.close()


def test_reserve_is_made_with_the_namespace_released_once_and_recreated(tmp_path, caplog):
    """This tests that creating a namespace preallocates its reserve (allocated blocks,
    not a sparse file) beside the logs, where it is neither a log nor a namespace, that
    releasing it frees it once (and says so), and that restoring it re-creates it whole
    and then reports it kept."""
    from pyspark_durable.log.base import Reserve
    from pyspark_durable.log.file.store import RESERVE_FILE

    store = FileLogStore(NS, path=str(tmp_path))
    try:
        store.open_log("commits")
        reserve = tmp_path / NS / RESERVE_FILE
        st = reserve.stat()
        assert st.st_size == store.reserve_bytes and st.st_blocks * 512 >= st.st_size
        assert store.list_logs() == ["commits"]
        assert FileLogStore.list_namespaces({"path": tmp_path}) == [NS]
        assert store.restore_reserve() is Reserve.KEPT
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            assert store.release_reserve() is True
        assert not reserve.exists() and "the disk is full; released the" in caplog.text
        assert store.release_reserve() is False
        assert store.restore_reserve() is Reserve.RECREATED
        assert reserve.stat().st_size == store.reserve_bytes
        assert [p.name for p in (tmp_path / NS).iterdir() if p.name.endswith(".tmp")] == []
    finally:
        store.close()


def test_a_reader_catching_up_reads_what_its_refresh_checked_without_reading_it_again(
        tmp_path, monkeypatch):
    """A handle catching up with another process's appends scans the new frames (length,
    CRC, offset) when it refreshes, then reads them. This tests that the read takes the
    bodies that scan checked (the segment is opened once, by the scan), once: a second
    read of them goes to the file, as every read did (so damage since is reported,
    test_a_damaged_acknowledged_frame_in_the_last_segment_stays_local); that every entry
    is the one appended, by content; and that what memory cannot serve reads from the
    file as before: a frame above SMALL_BODY, a range from before what was kept, and
    freed entries (skipped, though their bodies were kept). A handle keeps at most
    RECENT_BYTES of bodies across its segments, sealed ones keeping none."""
    from pyspark_durable.log.file import folder as folder_module
    from pyspark_durable.log.file import segments as segments_module
    from pyspark_durable.log.file.frames import SMALL_BODY
    from pyspark_durable.log.file.segments import RECENT_BYTES

    root = tmp_path / "wal"
    wstore, writer = open_log(root, 256 << 10)
    rstore, reader = open_log(root, 256 << 10)
    opened: list[str] = []

    def counting(path, *args, **kwargs):
        if str(path).endswith(".seg"):
            opened.append(str(path))
        return open(path, *args, **kwargs)

    def catch_up(start: int) -> list:
        opened.clear()
        monkeypatch.setattr(folder_module, "open", counting, raising=False)
        monkeypatch.setattr(segments_module, "open", counting, raising=False)
        try:
            return list(reader.read(start))
        finally:
            monkeypatch.undo()

    records = [rec(i, 300) for i in range(41)]
    writer.append(records[:1])
    assert [e.value for e in reader.read(0)] == [records[0].value]
    for i in range(1, 41, 5):
        writer.append(records[i : i + 5])
    got = catch_up(1)
    assert [check_entry(e, 300)[1] for e in got] == list(range(1, 41))
    assert [e.offset for e in got] == list(range(1, 41))
    assert len(opened) == 1, f"the catch-up opened the segment {len(opened)} times"
    again = catch_up(1)  # a second read goes to the file, and checks every CRC again
    assert [(e.offset, e.value) for e in again] == [(e.offset, e.value) for e in got]
    assert len(opened) == 1, "the second read did not read the file"

    large = Record(b"large", os.urandom(SMALL_BODY + 1024))
    writer.append([large, rec(42, 300)])
    got = catch_up(41)
    assert [(e.value, e.headers) for e in got] == \
        [(large.value, large.headers), (rec(42, 300).value, rec(42, 300).headers)]
    assert len(opened) == 2, "a frame above SMALL_BODY is read from the file"

    writer.free([(5, 10)])
    got = catch_up(0)
    assert [e.offset for e in got] == [o for o in range(43) if not 5 <= o < 10]
    for e in got:
        if e.offset != 41:
            check_entry(e, 300)

    # past RECENT_BYTES, across a segment roll: a long catch-up keeps its first bodies
    many = [rec(i, 300) for i in range(43, 43 + 3 * RECENT_BYTES // 300)]
    for i in range(0, len(many), 50):
        writer.append(many[i : i + 50])
    got = catch_up(43)
    assert [check_entry(e, 300)[1] for e in got] == [parse_key(r.key)[1] for r in many]
    segments = reader._segments  # noqa: SLF001 - what the handle holds in memory
    assert len(segments) > 1, "no segment roll"
    assert sum(s.recent_bytes for s in segments) <= RECENT_BYTES
    assert all(not s.recent for s in segments[:-1]), "a sealed segment keeps bodies"
    rstore.close()
    wstore.close()
