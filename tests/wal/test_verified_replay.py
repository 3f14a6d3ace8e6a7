"""Verified replay: each step records a content digest of every entry it
commits, and a read checks the bytes it gets against them.

The rule: a step's record names its entries by offset *and* by content, so a read
returns an entry only if its bytes are the ones that were committed, whatever the
log's own CRC says. The test that tries to break it rewrites a committed entry's
payload and recomputes the frame's CRC, so the file log itself accepts the frame.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import pyarrow as pa
import pytest

from pyspark_durable.cli import main
from pyspark_durable.errors import ContentMismatch, DataLoss
from pyspark_durable.log import open_store
from pyspark_durable.log.file import FRAME_HEAD
from pyspark_durable.wal import Namespace
from pyspark_durable.wal.format.records import StepCommit
from pyspark_durable.wal.format.runs import DIGEST_HEX
from tests.log.test_file_log import frames

NS = "verified"


def write_steps(root: Path) -> Namespace:
    ns = Namespace(open_store("file", NS, path=str(root)))
    for step in range(3):
        attempt = ns.begin("w", step)
        attempt.write("t", pa.table({"id": [step], "text": ["x" * 2000]}))
        attempt.commit()
    return ns


def rewrite_keeping_crc(root: Path, offset: int) -> None:
    """Flip one byte in the middle of region 0's entry at ``offset`` and write the frame
    back with a CRC that matches its new body, as a rewritten or restored copy would."""
    for seg in sorted((root / NS / "region_0").glob("*.seg")):
        for pos, end, found in frames(seg)[0]:
            if found != offset:
                continue
            data = bytearray(seg.read_bytes())
            body_at = pos + FRAME_HEAD.size
            middle = (body_at + end) // 2
            data[middle] ^= 0x01
            length, _ = FRAME_HEAD.unpack_from(data, pos)
            FRAME_HEAD.pack_into(data, pos, length, zlib.crc32(bytes(data[body_at:end])))
            seg.write_bytes(bytes(data))
            return
    raise AssertionError(f"no frame for offset {offset}")


def test_a_rewritten_entry_with_a_valid_crc_fails_the_read_naming_its_step(tmp_path, capsys):
    """This tests that after an entry's payload is rewritten with a matching frame CRC
    (the log reads it back without complaint), reading its step raises ContentMismatch
    (a DataLoss) naming the step and offset, the other steps still read, and
    `durablewal check --deep` reports it (a plain check, which trusts the CRC, does not)."""
    ns = write_steps(tmp_path)
    victim = ns.step_commit(1).runs[0]
    assert len(victim.digests) == DIGEST_HEX * victim.entries
    ns.close()
    rewrite_keeping_crc(tmp_path, victim.start)
    ns = Namespace(open_store("file", NS, path=str(tmp_path)), create=False)
    assert len(list(ns.store.open_region(0).read(0))) == 3  # the log's CRCs all match
    with pytest.raises(ContentMismatch, match=r"step 1 committed") as info:
        ns.read_step_table(1)
    assert isinstance(info.value, DataLoss)
    assert info.value.where["step"] == 1 and info.value.where["offset"] == victim.start
    assert [ns.read_step_table(s).column("id").to_pylist() for s in (0, 2)] == [[0], [2]]
    ns.close()
    assert main(["check", str(tmp_path), "--namespace", NS]) == 0
    capsys.readouterr()
    assert main(["check", str(tmp_path), "--namespace", NS, "--deep"]) == 1
    out = capsys.readouterr().out
    assert f"offset={victim.start} step=1: entry is not the one step 1 committed" in out


def test_steps_written_before_digests_read_unverified():
    """This tests that a step record written before content digests (runs of 7 fields)
    reads back with no digests (its reads are not verified), and that a record with
    digests round-trips them."""
    old = StepCommit.from_json({"k": "step", "w": "w", "ws": 0, "att": ["a"], "ts": 1,
                                "runs": [[0, 7, 0, 2, 5, 99, 0]]})
    assert old.runs[0].digests == ""
    new = StepCommit.from_json({**old.to_json(), "runs": [[0, 7, 0, 2, 5, 99, 0, "ab" * 16]]})
    assert new.runs[0].digests == "ab" * 16 and new.to_json()["runs"][0][-1] == "ab" * 16
