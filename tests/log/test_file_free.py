"""Freeing single entries of a file log: the space really goes back, and the ``freed``
file's record is what a scan trusts, so damage to that file is reported or harmless,
never an entry silently lost or misread (pyspark_durable/log/file/freed.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pyspark_durable.errors import CorruptEntryError
from pyspark_durable.log import Record
from pyspark_durable.log.file import FileLogStore
from pyspark_durable.log.file.disk import PRIVATE
from pyspark_durable.log.file.freed import FREED_FILE, FREED_RECORD, FreedFrames, append_freed

BIG = 64 * 1024


def big(i: int) -> Record:
    return Record(i.to_bytes(8, "big"), bytes([i % 251]) * BIG)


def store(root: Path) -> FileLogStore:
    return FileLogStore("ns", path=str(root), segment_size_bytes=8 << 20)


def segment_blocks(folder: Path) -> int:
    return sum(p.stat().st_blocks for p in folder.glob("*.seg"))


def region_folder(root: Path) -> Path:
    (folder,) = {p.parent for p in root.rglob("*.seg")}
    return folder


def test_freed_frames_give_their_space_back_and_read_as_freed_after_a_reopen(tmp_path):
    """This tests that freeing 20 entries of 64 KiB in the middle of a segment shrinks the
    segment's allocated blocks by about their size (a punched hole, not a promise), that
    the file keeps its size, and that a fresh store scanning the segment from byte 0 steps
    over the hole and reads every other entry exactly."""
    log = store(tmp_path).open_region(0)
    log.append([big(i) for i in range(40)])
    folder = region_folder(tmp_path)
    size, blocks = sum(p.stat().st_size for p in folder.glob("*.seg")), segment_blocks(folder)
    log.free([(10, 30)])
    assert blocks - segment_blocks(folder) >= 19 * BIG // 512, (blocks, segment_blocks(folder))
    assert sum(p.stat().st_size for p in folder.glob("*.seg")) == size
    fresh = store(tmp_path).open_region(0, create=False)
    assert fresh.freed_ranges() == [(10, 30)]
    assert [(e.offset, e.value) for e in fresh.read(0)] == \
        [(i, big(i).value) for i in range(40) if not 10 <= i < 30]
    assert fresh.append([big(40)]) == [40] and fresh.repairs == []


def test_a_bit_flip_in_the_freed_file_is_reported_and_never_misread(tmp_path):
    """This tests that a flipped bit in a freed-frames record (its CRC fails) is reported
    as a repair, and that the punched frames it named then read as damage naming their
    offset, never as entries; the entries around them read exactly."""
    log = store(tmp_path).open_region(0)
    log.append([big(i) for i in range(40)])
    log.free([(10, 30)])
    path = region_folder(tmp_path) / FREED_FILE
    raw = bytearray(path.read_bytes())
    raw[9] ^= 0x10
    path.write_bytes(bytes(raw))
    fresh = store(tmp_path).open_region(0, create=False)
    assert [e.offset for e in fresh.read(0, 10)] == list(range(10))
    assert any("fails its CRC" in r for r in fresh.repairs), fresh.repairs
    with pytest.raises(CorruptEntryError) as got:
        list(fresh.read(10, 40))
    assert got.value.where["offset"] == 10
    assert [(e.offset, e.value) for e in fresh.read(30)] == [(i, big(i).value)
                                                             for i in range(30, 40)]


def test_a_cut_freed_file_is_harmless_and_a_record_without_its_hole_too(tmp_path, caplog):
    """This tests the two crash shapes of a free: a record written but its hole never
    punched (a kill between them) reads as freed, with every other entry exact; and a
    freed file cut inside its last record (a write that never finished, as a power cut
    leaves it) is logged but not kept as damage (``check`` stays clean, as for a segment's
    torn tail), the frames it named read as they lie, and the next free cuts it off
    before appending and punches the hole the kill left out, so the space comes back."""
    log = store(tmp_path).open_region(0)
    log.append([big(i) for i in range(40)])
    folder = region_folder(tmp_path)
    seg = next(folder.glob("*.seg"))
    pos = [0]
    for _ in range(40):  # the frames' byte positions, as the log indexed them
        pos.append(pos[-1] + 8 + 20 + 8 + BIG)
    append_freed(folder, [FreedFrames(0, 5, 8, pos[5], pos[8])], 0, PRIVATE)  # no hole punched
    fresh = store(tmp_path).open_region(0, create=False)
    assert fresh.freed_ranges() == [(5, 8)]
    assert [e.offset for e in fresh.read(0, 10)] == [0, 1, 2, 3, 4, 8, 9]
    with open(folder / FREED_FILE, "ab") as f:
        f.write(FreedFrames(0, 20, 22, pos[20], pos[22]).encode()[:30])
    cut = store(tmp_path).open_region(0, create=False)
    assert [e.offset for e in cut.read(18, 24)] == list(range(18, 24))  # its frames are whole
    assert not cut.repairs, cut.repairs
    assert any("partial record" in r.getMessage() for r in caplog.records), caplog.text
    blocks = segment_blocks(folder)
    cut.free([(30, 31)])
    # frames 5-7 and 30 (4 x 64 KiB, less at most a block at each edge of the two holes)
    assert blocks - segment_blocks(folder) >= 3 * BIG // 512, (blocks, segment_blocks(folder))
    assert (folder / FREED_FILE).stat().st_size == 2 * FREED_RECORD.size
    assert store(tmp_path).open_region(0, create=False).freed_ranges() == [(5, 8), (30, 31)]
    assert os.path.getsize(seg) == pos[40]


def test_a_free_while_a_copy_is_taken_punches_nothing_until_a_later_free(tmp_path):
    """This tests how a free and a copy of the log meet (log/file/copy.py): while a
    capture holds the log's copy lock, a free records its frames (they read as freed at
    once) but punches no hole, so the copy written after it holds every entry as
    captured; the first free after the copy punches the held-back hole with its own."""
    source = store(tmp_path)
    log = source.open_region(0)
    log.append([big(i) for i in range(40)])
    folder = region_folder(tmp_path)
    blocks = segment_blocks(folder)
    copy_root = tmp_path / "copy"
    copy_root.mkdir()
    capture = source.capture("region_0")
    try:
        log.free([(10, 20)])
        assert segment_blocks(folder) == blocks, "a hole was punched under a copy"
        assert store(tmp_path).open_region(0, create=False).freed_ranges() == [(10, 20)]
        assert source.write_copy(capture, copy_root) >= 40 * BIG
    finally:
        capture.close()
    copied = FileLogStore("ns", path=str(copy_root)).open_region(0, create=False)
    assert [(e.offset, e.value) for e in copied.read(0)] == [(i, big(i).value) for i in range(40)]
    assert copied.repairs == []

    log.free([(25, 30)])
    assert blocks - segment_blocks(folder) >= 14 * BIG // 512, (blocks, segment_blocks(folder))
    fresh = store(tmp_path).open_region(0, create=False)
    assert fresh.freed_ranges() == [(10, 20), (25, 30)]
    assert [e.offset for e in fresh.read(0)] == [*range(10), *range(20, 25), *range(30, 40)]
