"""Writer processes of one file log share their syncs, and lose nothing when one dies.

The rule under test (docs/backends.md, "Shared syncs"): past a log's mark lie only whole
appends waiting for a sync (below the writers' ``written``) and, briefly, a torn write;
the mark moves only over frames a sync made durable; a failed sync, or one whose process
died, cuts every frame past the mark in a new epoch, and their writers learn it and
write them again; an append returns only once its frames are below the mark.

Every writer is a separate process appending batches (tests/children/file_log_child.py
``share``), with every fsync slowed (the preload shim of the disk-fault tests,
tests/faults/syncshim.c) so that writers wait on one another as on network block storage.
Faults are injected at the fdatasync(2) calls of one writer process: it dies just before
its frames' sync or its mark's sync, or its frames' sync fails. Then the files are
rebuilt as only their synced writes would have left them (a power cut), and a fresh
handle reads the log: every acknowledged batch at its offsets, by content, once; the
batch a dead writer had in flight whole or not at all; nothing twice.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pyspark_durable.log.file import FileLogStore
from tests.children.file_log_child import make_record, parse_key
from tests.faults.powercut import DurableImage, build_shim, power_cut, shim_env

ROOT = Path(__file__).resolve().parents[2]
CHILD = ROOT / "tests" / "children" / "file_log_child.py"
NS, LOG = "shared", "log"
SEGMENT = 16 << 10  # rolls happen while writers wait for syncs
SLOW_SYNC_US = 3000  # a sync takes milliseconds: writers pile up behind it


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_shim(tmp_path_factory.mktemp("shim"))


def run_writers(root: Path, envs: list[dict[str, str]], count: int, tmp: Path,
                ) -> list[tuple[list[str], int]]:
    """Start one ``share`` child per environment, release them together, and return each
    one's complete output lines and exit code."""
    procs = []
    try:
        for w, env in enumerate(envs):
            err = open(tmp / f"w{w}.err", "w")
            procs.append(subprocess.Popen(
                [sys.executable, str(CHILD), "share", str(root), NS, LOG, str(w), str(count),
                 str(SEGMENT)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                text=True, env={**env, "PYTHONPATH": str(ROOT)}, cwd=ROOT))
            err.close()
        for w, p in enumerate(procs):
            line = p.stdout.readline()
            assert line == "ready\n", f"writer {w}: {line!r} {(tmp / f'w{w}.err').read_text()}"
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        outs = [p.communicate(timeout=120)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return [([ln for ln in out.splitlines(keepends=True) if ln.endswith("\n")], p.returncode)
            for out, p in zip(outs, procs, strict=True)]


def batches(lines: list[str]) -> tuple[dict[tuple[int, int], tuple[int, int]], list[str],
                                       tuple[int, int, int] | None]:
    """A writer's acknowledged batches ((tag, seq0) -> (n, offset0)), its errors, and the
    batch it announced but was never told about (in flight when it died)."""
    acked: dict[tuple[int, int], tuple[int, int]] = {}
    errors: list[str] = []
    pending = None
    for line in lines:
        kind, rest = line[0], line[2:].split()
        if kind == "B":
            pending = tuple(map(int, rest))
        elif kind == "A":
            tag, seq0, n, off0 = map(int, rest)
            acked[(tag, seq0)] = (n, off0)
            pending = None
        elif kind == "E":
            errors.append(line.strip())
            pending = None
    return acked, errors, pending


def read_back(root: Path) -> dict[int, tuple[int, int]]:
    """A fresh handle's entries, offset -> (tag, seq), each checked by content."""
    store = FileLogStore(NS, path=str(root), segment_size_bytes=SEGMENT)
    try:
        log = store.open_log(LOG)
        found = {}
        for entry in log.read(log.low_watermark()):
            tag, seq = parse_key(entry.key)
            want = make_record(tag, seq, 300)
            assert (entry.value, entry.headers) == (want.value, want.headers), entry.offset
            found[entry.offset] = (tag, seq)
        assert sorted(found) == list(range(len(found))), "offsets are not dense"
        assert log.repairs == [], log.repairs
        return found
    finally:
        store.close()


def check_log(found: dict[int, tuple[int, int]], results: list[tuple[list[str], int]],
              died: int | None) -> None:
    """Every acknowledged batch at its offsets, once; no record twice; each writer's
    records in its order; the batch a dead writer had in flight whole or absent."""
    where = {rec: off for off, rec in found.items()}
    assert len(where) == len(found), "a record was appended twice"
    for w, (lines, _) in enumerate(results):
        acked, _, pending = batches(lines)
        for (tag, seq0), (n, off0) in acked.items():
            for i in range(n):
                assert found.get(off0 + i) == (tag, seq0 + i), (
                    f"writer {w}: acknowledged record {seq0 + i} is not at offset {off0 + i}")
        seqs = sorted(seq for tag, seq in where if tag == w)
        assert seqs == list(range(len(seqs))), f"writer {w}: a hole in its records"
        if w == died and pending is not None:
            _, seq0, n = pending
            there = [(w, seq0 + i) in where for i in range(n)]
            assert all(there) or not any(there), f"writer {w}'s last batch is torn: {there}"
            offsets = [where[(w, seq0 + i)] for i in range(n) if there[i]]
            assert offsets == list(range(offsets[0], offsets[0] + n)) if offsets else True


def test_writer_processes_share_syncs_and_every_append_is_there_once(shim, tmp_path):
    """This tests that four writer processes appending batches at once, on a disk whose
    every sync takes 3 ms, share syncs (fewer segment syncs than appends, and some appends
    acknowledged by another process's sync) and that every acknowledged batch is at its
    offsets, by content, once, after a power cut that keeps only what was synced."""
    root, record = tmp_path / "wal", tmp_path / "record"
    root.mkdir()
    image = DurableImage.baseline(shim, root)
    env = shim_env(shim, root, record, delay_us=SLOW_SYNC_US)
    results = run_writers(root, [env] * 4, 120, tmp_path)
    assert [code for _, code in results] == [0] * 4, [r[0][-3:] for r in results]
    appends = sum(len(batches(lines)[0]) for lines, _ in results)
    synced, joined = (sum(int(lines[-1].split()[i]) for lines, _ in results) for i in (1, 2))
    seg_syncs = sum(1 for line in (record / "events").read_text().splitlines()
                    if line.startswith("F ") and line.endswith(".seg"))
    print(f"\n{appends} appends by 4 processes: {seg_syncs} segment syncs, {synced} syncs "
          f"made, {joined} appends acknowledged by another process's sync")
    assert joined > 0 and seg_syncs < appends, "no sync was shared"
    power_cut(shim, root, record, image, tmp_path / "after")
    found = read_back(root)
    assert len(found) == 4 * 120
    check_log(found, results, died=None)


# (the sync of writer 0 that is faulty: its call, a substring of its path, the nth such
#  call; and what happens there)
# (early: a writer whose appends other processes' syncs acknowledge makes fewer syncs
#  of its own than appends, and the fault must land)
FAULTS = {
    "killed before its frames' sync": ("fdatasync", f"/{LOG}/0", 3, "crash"),
    "killed before its mark's sync": ("fdatasync", f"/{LOG}/acked", 3, "crash"),
    "its frames' sync fails": ("fdatasync", f"/{LOG}/0", 2, "fail"),
    "its frames' sync fails twice": ("fdatasync", f"/{LOG}/0", 2, "fail2"),
    # the reason for ``syncing``: the failed sync's frames may still show in the page
    # cache, so whoever comes next must cut them, not sync and acknowledge them
    "its frames' sync fails, then it dies before cutting": ("fdatasync", f"/{LOG}/0", 4,
                                                            "failcrash"),
}


@pytest.mark.crash
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_writer_dying_or_failing_in_a_shared_sync_loses_no_acknowledged_append(
        shim, tmp_path, fault):
    """This tests that when one of four writer processes sharing syncs (every sync 3 ms)
    is killed just before its frames' or its mark's fdatasync, or sees its frames'
    fdatasync fail with EIO, the other three finish every append (those whose frames the
    fault cut write them again), the failing writer gets a typed error and retries, and
    after a power cut every acknowledged batch is at its offsets once, by content, and
    the dead writer's batch in flight is there whole or not at all; then a new append
    goes on right after."""
    call, where, nth, kind = FAULTS[fault]
    root, record = tmp_path / "wal", tmp_path / "record"
    root.mkdir()
    image = DurableImage.baseline(shim, root)
    spec = f"{call}:{where}:{nth}" + (":2" if kind == "fail2" else "")
    faults = {"crash": spec} if kind == "crash" else {"fail": spec}
    if kind == "failcrash":
        faults["crash"] = f"ftruncate:{where}:1"  # the cut after the failed sync
    victim = shim_env(shim, root, record, delay_us=SLOW_SYNC_US, **faults)
    others = shim_env(shim, root, record, delay_us=SLOW_SYNC_US)
    results = run_writers(root, [victim, others, others, others], 60, tmp_path)
    codes = [code for _, code in results]
    died = kind in ("crash", "failcrash")
    if died:
        assert codes == [-9, 0, 0, 0], codes
        assert batches(results[0][0])[0], "the victim died before any acknowledgement"
    else:
        assert codes == [0] * 4, codes
        errors = batches(results[0][0])[1]
        assert errors and all("BackendUnavailable" in e and f"namespace={NS}" in e
                              for e in errors), errors
    for lines, _ in results[1:]:
        assert batches(lines)[1] == [], "a writer that did not fault saw an error"
    events = (record / "events").read_text()
    power_cut(shim, root, record, image, tmp_path / "after")
    found = read_back(root)
    check_log(found, results, died=0 if died else None)
    if not died:
        assert len(found) == 4 * 60
    rewritten = sum(open(tmp_path / f"w{w}.err").read().count("writing them again")
                    for w in range(1, 4))
    print(f"\n{fault}: {len(found)} entries, {rewritten} appends of other writers written "
          f"again, {events.count(chr(10))} sync events")
    store = FileLogStore(NS, path=str(root), segment_size_bytes=SEGMENT)
    try:
        assert store.open_log(LOG).append([make_record(99, 0, 300)]) == [len(found)]
    finally:
        store.close()
