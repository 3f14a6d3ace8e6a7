"""A WAL on storage that says no: a read-only mount, a full disk (a real tmpfs each).

Each test runs a child in its own user and mount namespace (``unshare -rm``), so it can
mount a small tmpfs without touching the machine's mounts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import CHILDREN, ROOT

CHILD = str(CHILDREN / "storage_child.py")


def run(mode: str, tmp_path: Path) -> dict:
    folder = tmp_path / "mnt"
    folder.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(["unshare", "-rm", sys.executable, CHILD, mode, str(folder)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_read_only_wal_is_read_and_checked(tmp_path):
    """This tests that a WAL on a read-only mount is recovered, read and checked like any
    other, and that writing to it is a typed error naming the read-only file system."""
    out = run("readonly", tmp_path)
    assert "error" not in out, out["error"]
    assert out["ids"] == [2, 3, 4, 5] and out["steps"] == [2, 6]
    assert out["problems"] == []
    assert out["write_error"].startswith("BackendUnavailable: namespace=shop")
    assert "(read-only file system)" in out["write_error"]


def test_full_disk_is_typed_and_loses_no_acknowledged_step(tmp_path):
    """This tests that filling a 1 MiB disk ends in a typed error (DiskFull, a
    BackendUnavailable) naming the namespace, the log and the disk being full, that every
    acknowledged step is still read back, that `check` finds nothing wrong and that no
    temporary file is left behind."""
    out = run("full", tmp_path)
    assert "error" not in out, out["error"]
    assert out["write_error"].startswith("DiskFull: namespace=shop log=")
    assert "(the disk is full)" in out["write_error"]
    acked = sorted(int(ws) for ws in out["acked"])
    assert len(acked) > 10 and out["ids"] == acked
    assert out["problems"] == [] and out["tmp_files"] == []


def test_enospc_in_the_middle_of_a_group_commit_is_never_acknowledged(tmp_path):
    """This tests that group-committed appends that run out of space in the middle of
    their write (a 1 MiB tmpfs filled but for 3 pages) fail with DiskFull, that the
    partly written frames are cut off again (the segment ends where it did before them),
    that another handle of the same log and a fresh one never read them, and that the
    next append, once space is freed, gets the offset right after the acknowledged ones
    rather than acknowledging the failed bytes."""
    out = run("midbatch", tmp_path)
    assert "error" not in out, out["error"]
    assert out["failed"] >= 1 and all(e.startswith("DiskFull: namespace=shop log=region_0")
                                       for e in out["errors"]), out["errors"]
    acked = out["acked"]
    assert acked == list(range(len(acked))), "acknowledged offsets are not dense"
    assert out["other_high"] == len(acked) and out["other_read"] == acked
    assert out["next"] == [len(acked)]
    assert out["fresh"][:5] == [[i, f"ok-{i}"] for i in range(5)]
    assert [o for o, _ in out["fresh"]] == [*acked, len(acked)]
    assert out["fresh"][-1] == [len(acked), "after"]
    assert out["other_after"] == [*acked, len(acked)]
    if len(acked) == 5:  # nothing of the big appends fit: the segment is as it was
        assert out["size_after"] == out["size_before"]


def test_a_full_small_disk_is_freed_by_retention_and_clean_and_writing_resumes(tmp_path):
    """This tests that a WAL which filled a 6 MiB disk (a tenth of one 64 MiB segment)
    through the default options, steps first and then a reader's positions until the
    commits log's last page is full too, is freed by the CLI's own `retention --max-steps
    3` and `clean` (which spend the namespace's reserve, then re-create it): disk usage
    drops to a small fraction, every retained step reads back with the bytes written, the
    writer that got the error writes on with its handle, and once it filled the disk
    again a `clean` alone frees it again."""
    out = run("recover", tmp_path)
    assert "error" not in out, out["error"]
    assert out["segment_size_bytes"] == (6 << 20) // 64  # 1/64 of the disk, not 64 MiB
    for one in out["rounds"]:
        assert one["step_error"].startswith("DiskFull: namespace=shop log=region_0")
        assert "(the disk is full)" in one["step_error"]
        assert one["reader_error"].startswith("DiskFull: namespace=shop log=commits")
        assert one["next_writer_step"] > 50
        commands = [c for c in ("retention", "clean") if c in one]
        for command in commands:
            assert one[command]["rc"] == 0, one[command]["stderr"]
        assert "released the 98304 bytes" in "".join(one[c]["stderr"] for c in commands), (
            "the disk was not full to the last page: the reserve went unused")
        clean = one["clean"]["doc"]
        assert clean["reserve"] == "recreated" and clean["freed_entries"] > 40, clean
        assert one["used_full"] > (6 << 20) * 9 // 10
        assert one["used_clean"] < one["used_full"] // 10, one  # measured: ~6 MiB -> 260 KiB
        assert one["used_after"] < one["used_full"] // 10, one
    written = {int(ws): d for ws, d in out["written"].items()}
    last = out["rounds"][-1]["next_writer_step"]
    assert out["retained"] == [[ws, written[ws]] for ws in range(last - 3, last + 1)]
    assert out["steps"][1] - out["steps"][0] == 4
    assert out["problems"] == []
