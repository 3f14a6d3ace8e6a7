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

CHILD = str(Path(__file__).parent / "storage_child.py")


def run(mode: str, tmp_path: Path) -> dict:
    folder = tmp_path / "mnt"
    folder.mkdir()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
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
    """This tests that filling a 1 MiB disk ends in a typed error naming the namespace, the
    log and the disk being full, that every acknowledged step is still read back, that
    `check` finds nothing wrong and that no temporary file is left behind."""
    out = run("full", tmp_path)
    assert "error" not in out, out["error"]
    assert out["write_error"].startswith("BackendUnavailable: namespace=shop log=")
    assert "(the disk is full)" in out["write_error"]
    acked = sorted(int(ws) for ws in out["acked"])
    assert len(acked) > 10 and out["ids"] == acked
    assert out["problems"] == [] and out["tmp_files"] == []
