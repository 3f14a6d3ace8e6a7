"""WALs written by earlier releases open, read exactly, check clean and take new steps; a
WAL a newer release wrote is refused by name.

The golden WALs under tests/golden/ were written once by the code of older commits
(tests/golden/README.md says which, and how); each manifest holds what that code read
back. The future-* fixtures are today's WAL with one format version bumped
(tests/golden/make_future.py). Every test works on a copy in ``tmp_path``.
"""

from __future__ import annotations

import json
import shutil
import zlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest

from pyspark_durable.cli import main as durablewal
from pyspark_durable.endpoint import read_steps
from pyspark_durable.errors import InvalidVersion, NewerVersion
from pyspark_durable.log import open_store
from pyspark_durable.log.file.marks import ACK_FILE, ACK_SLOT, LOW_FILE, read_acked, read_low
from pyspark_durable.wal import Cleaner, Namespace
from pyspark_durable.wal.upkeep.check import run_check
from tests.helpers import TESTS

GOLDEN = TESTS / "golden"
OLDER = sorted(p for p in GOLDEN.glob("r*-*") if p.is_dir())
NEWER = sorted(p for p in GOLDEN.glob("future-*") if p.is_dir())
NS = "golden"
COLUMNS = ("id", "v", "_region", "_sequence", "_step")  # as build_golden.py compares


def copy_of(fixture: Path, tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    shutil.copytree(fixture / "wal", tmp_path / "wal")
    return tmp_path / "wal", json.loads((fixture / "manifest.json").read_text())


def open_ns(root: Path) -> Namespace:
    return Namespace(open_store("file", NS, path=str(root)))


def read_back(ns: Namespace) -> dict[str, list[dict[str, Any]]]:
    return {t: [{c: r[c] for c in COLUMNS} for r in read_steps(ns, t).to_pylist()]
            for t in ("a", "b")}


def problems(root: Path) -> list[str]:
    return [p.text() for p in run_check(open_store("file", NS, path=str(root))).problems]


def test_every_format_change_has_a_golden_wal():
    """This tests that the golden WALs are in place: one per release that changed a format
    (nine), each with the manifest of what its own code read back."""
    assert len(OLDER) == 9 and len(NEWER) == 5, (OLDER, NEWER)
    for fixture in OLDER:
        manifest = json.loads((fixture / "manifest.json").read_text())
        assert fixture.name.endswith(manifest["commit"][:7]) and manifest["rows"]["a"]


@pytest.mark.parametrize("fixture", OLDER, ids=lambda p: p.name)
def test_a_wal_an_older_release_wrote_reads_exactly_checks_clean_and_goes_on(fixture, tmp_path):
    """This tests that a WAL written by an earlier release (copied from tests/golden) opens,
    reads back exactly the rows its own code read (by content, with region, sequence and
    step), that `durablewal check` finds no problem, and that a new step in two regions and
    a cleaner pass that deletes one more step leave it reading exactly again, checking clean,
    with its marks rewritten in today's form."""
    root, manifest = copy_of(fixture, tmp_path)
    ns = open_ns(root)
    first, end = manifest["steps"]
    assert ns.steps() == range(first, end)
    assert read_back(ns) == manifest["rows"]
    if manifest["reader"]:
        reader, next_step = manifest["reader"]
        ns.refresh()
        assert ns.info.readers()[reader].next_step == next_step
    assert problems(root) == []
    assert durablewal(["check", str(root), "--namespace", NS]) == 0

    attempt = ns.begin("writer-2", 0)
    expected = {t: [r for r in manifest["rows"][t] if r["_step"] > first] for t in ("a", "b")}
    for region, table in enumerate(("a", "b")):
        rows = pa.table({"id": [900 + region, 901 + region], "v": [f"new-{table}"] * 2})
        attempt.write(table, rows, region_id=region)
        sequence = max(r["_sequence"] for r in manifest["rows"][table]
                       if r["_region"] == region) + 1
        expected[table] += [{"id": i, "v": f"new-{table}", "_region": region,
                             "_sequence": sequence, "_step": end} for i in rows["id"].to_pylist()]
    assert attempt.commit() == end
    ns.expire(first + 1)
    Cleaner(ns, grace_ms=0).run_once()
    ns.close()

    again = open_ns(root)
    assert again.steps() == range(first + 1, end + 1)
    assert read_back(again) == expected
    again.close()
    assert problems(root) == []
    for region in ("region_0", "region_1"):  # the next append and deletion wrote today's form
        assert (root / NS / region / ACK_FILE).stat().st_size in (ACK_SLOT.size, 2 * ACK_SLOT.size)
        assert b" " in (root / NS / region / LOW_FILE).read_bytes()


@pytest.mark.parametrize("fixture", NEWER, ids=lambda p: p.name)
def test_a_wal_a_newer_release_wrote_is_refused_naming_both_versions(fixture, tmp_path):
    """This tests that a WAL with a key, value, snapshot (payload or envelope) or compact-runs
    version newer than this release reads is refused with NewerVersion naming the element,
    the version found and the newest one read, never read around as damage, and that
    `durablewal check` reports it and exits 1 instead of crashing."""
    root, manifest = copy_of(fixture, tmp_path)
    with pytest.raises(NewerVersion) as info:
        ns = open_ns(root)
        try:
            read_back(ns)
        finally:
            ns.close()
    refusal = info.value
    assert (refusal.element, refusal.found, refusal.newest) == (
        manifest["element"], manifest["found"], manifest["newest"])
    assert isinstance(refusal, InvalidVersion)
    text = (f"{manifest['element']} version {manifest['found']} is newer than this release "
            f"reads (newest: {manifest['newest']})")
    assert text in str(refusal)
    found = problems(root)
    assert found and all(text in p for p in found if "newer" in p), found
    assert durablewal(["check", str(root), "--namespace", NS]) == 1


def test_older_and_damaged_marks_are_told_apart(tmp_path):
    """This tests that a low watermark of bare digits (releases before its CRC) is read,
    while today's form whose space became a digit, or bare digits below the first segment,
    is reported as damage; and that 24-byte acked slots are read, then replaced whole by
    today's 20-byte form on the next write."""
    notes: list[str] = []
    (tmp_path / LOW_FILE).write_bytes(b"42")
    assert read_low(tmp_path, 40, notes.append) == 42 and not notes
    assert read_low(tmp_path, 50, notes.append) == 50 and len(notes) == 1  # below the base
    offset = next(n for n in range(1000) if f"{zlib.crc32(str(n).encode()):08x}".isdigit())
    lost = f"{offset}0{zlib.crc32(str(offset).encode()):08x}".encode()  # " " ^ 0x10 == "0"
    (tmp_path / LOW_FILE).write_bytes(lost)
    assert read_low(tmp_path, 0, notes.append) == 0 and "damaged" in notes[-1]

    from pyspark_durable.log.file.disk import PRIVATE
    from pyspark_durable.log.file.marks import ACK_BODY, ACK_SLOT_PADDED, write_acked

    def padded(seq: int, nxt: int) -> bytes:
        return ACK_SLOT_PADDED.pack(seq, nxt, zlib.crc32(ACK_BODY.pack(seq, nxt)))
    (tmp_path / ACK_FILE).write_bytes(padded(6, 70) + padded(5, 60))
    notes.clear()
    assert read_acked(tmp_path, notes.append) == (6, 70, True) and not notes
    write_acked(tmp_path, 7, 80, PRIVATE)
    assert (tmp_path / ACK_FILE).stat().st_size == 2 * ACK_SLOT.size
    assert read_acked(tmp_path, notes.append) == (7, 80, True) and not notes
    write_acked(tmp_path, 8, 90, PRIVATE)
    assert read_acked(tmp_path, notes.append) == (8, 90, True) and not notes


def test_a_kafka_snapshot_of_a_release_before_versions_is_listed_as_version_0():
    """This tests that the Kafka store lists the unversioned ``snapshot/wal`` key of a
    release before commit ee5e358 as version 0 (below every versioned one), reads it, and
    tombstones it when version 0 is deleted (on the store's registry, without a broker:
    the registry is what a broker would hold)."""
    from pyspark_durable.log.kafka.store import KafkaLogStore

    registry: dict[bytes, bytes | None] = {b"snapshot/wal": b"old", b"log/commits": b""}
    store = object.__new__(KafkaLogStore)
    store.registry = SimpleNamespace(view=lambda: registry, put=registry.__setitem__)
    assert store.snapshot_versions("wal") == [0]
    assert store.read_snapshot_version("wal", 0) == b"old"
    registry[b"snapshot/wal/%020d" % 7] = b"new"
    assert store.snapshot_versions("wal") == [0, 7] and store.read_snapshot("wal") == (7, b"new")
    store.delete_snapshot("wal", 0)
    assert registry[b"snapshot/wal"] is None and store.snapshot_versions("wal") == [7]
