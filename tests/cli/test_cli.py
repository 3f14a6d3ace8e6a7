"""The ``durablewal`` CLI, in-process (``main([...])``) and as a real subprocess.

WAL content is built with the Python API; every command is run on the file backend
with table and ``--json`` output, and the read commands on Kafka too.
"""

from __future__ import annotations

import io
import json
import os
import re
import socket
import subprocess
import sys
import time
import types
from pathlib import Path

import pyarrow as pa
import pytest

from pyspark_durable.cli import main
from pyspark_durable.endpoint import open_namespace, read_steps, write_step
from pyspark_durable.wal import AttemptReceipt, Cleaner, Namespace, WrittenEntry
from tests.helpers import spark_checkpoint_like, tree

NS = "shop"
STEPS = 6
ROWS_PER_STEP = 4


def orders(step: int) -> pa.Table:
    start = step * ROWS_PER_STEP
    ids = list(range(start, start + ROWS_PER_STEP))
    return pa.table({"id": pa.array(ids, pa.int64()),
                     "item": pa.array([f"item-{i}" for i in ids], pa.string())})


def fill(ns: Namespace) -> None:
    """6 steps of 'orders' (region 0, arrow) and 'events' (region 1, avro), then one more."""
    for step in range(STEPS):
        write_step(ns, "loader", step, {"orders": orders(step)})
        write_step(ns, "events-writer", step, {"events": [{"kind": f"e{step}", "n": step}]},
                   region_id=1, payload_format="avro")


def file_config(root: Path, namespace: str = NS) -> dict:
    return {"backend": "file", "namespace": namespace,
            "options": {"path": str(root), "segment_size_bytes": 1024}}


@pytest.fixture
def wal_root(tmp_path: Path) -> Path:
    """A WAL folder with namespace 'shop' (12 steps) and namespace 'other' (1 step)."""
    root = tmp_path / "wal"
    ns = open_namespace(file_config(root))
    fill(ns)
    ns.close()
    other = open_namespace({**file_config(root, "other"), "namespace_id": 7})
    write_step(other, "w", 0, {"metrics": [{"v": 1.5}]})
    other.close()
    return root


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    code, out, err = cli(capsys, *argv, "--json")
    assert (code, err) == (0, ""), err
    return json.loads(out)


def assert_one_line_error(code: int, out: str, err: str, *needles: str) -> None:
    assert code == 2, (out, err)
    assert out == ""
    assert err.startswith("durablewal: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, err


def lines(text: str) -> list[list[str]]:
    """Table output split into cells (the formatter separates columns by 2+ spaces)."""
    import re

    return [re.split(r"\s{2,}", line.strip()) for line in text.strip().splitlines()]


# -- every command on the file backend ---------------------------------------------


def test_namespaces_lists_summaries(wal_root, capsys):
    """This tests that `namespaces` lists each namespace with id, regions, tables and steps."""
    code, out, err = cli(capsys, "namespaces", wal_root)
    assert (code, err) == (0, "")
    rows = lines(out)
    assert rows[0] == ["namespace", "id", "regions", "tables", "steps", "note"]
    assert rows[2] == ["other", "7", "1", "1", "[0, 1)"]
    assert rows[3] == ["shop", "0", "2", "2", "[0, 12)"]
    doc = cli_json(capsys, "namespaces", "--path", wal_root)
    shop = {n["name"]: n for n in doc["namespaces"]}["shop"]
    assert (doc["backend"], shop["regions"], shop["tables"]) == ("file", [0, 1],
                                                                 ["events", "orders"])
    assert (shop["first_step"], shop["next_step"]) == (0, 12)
    code, out, _ = cli(capsys, "namespaces", wal_root, "--names-only")
    assert (code, out) == (0, "other\nshop\n")
    (wal_root / "stray").mkdir()  # a folder that is no namespace: not listed, left untouched
    code, out, _ = cli(capsys, "namespaces", wal_root)
    assert code == 0 and [row[0] for row in lines(out)[2:]] == ["other", "shop"]
    assert list((wal_root / "stray").iterdir()) == []


def test_namespaces_lists_neither_a_spark_checkpoint_nor_a_stray_folder(wal_root, capsys):
    """This tests that a Spark checkpoint and a stray folder (one without, one with a
    commits folder) inside a WAL root are no namespaces for `durablewal namespaces` (table,
    names only, JSON) nor in the error for a missing namespace, that naming one of them
    says what it is, and that none of this writes into them; the real namespaces are
    listed and open."""
    ckpt = spark_checkpoint_like(wal_root / "ckpt")
    (wal_root / "stray").mkdir()
    (wal_root / "loose" / "logs").mkdir(parents=True)  # a folder, but no commits log
    before = tree(ckpt)
    code, out, err = cli(capsys, "namespaces", wal_root)
    assert (code, err) == (0, "")
    assert [row[0] for row in lines(out)[2:]] == ["other", "shop"]
    assert cli(capsys, "namespaces", wal_root, "--names-only")[:2] == (0, "other\nshop\n")
    doc = cli_json(capsys, "namespaces", wal_root)
    assert [n["name"] for n in doc["namespaces"]] == ["other", "shop"]
    assert_one_line_error(*cli(capsys, "steps", wal_root, "--namespace", "nope"),
                          "unknown namespace 'nope'; namespaces: other, shop")
    assert_one_line_error(*cli(capsys, "steps", wal_root, "--namespace", "ckpt"),
                          "unknown namespace 'ckpt'; namespaces: other, shop; 'ckpt' in "
                          f"folder {wal_root} is a Spark checkpoint, not a WAL")
    assert_one_line_error(*cli(capsys, "check", wal_root, "--namespace", "stray"),
                          "unknown namespace 'stray'; namespaces: other, shop")
    code, out, _ = cli(capsys, "steps", wal_root, "--namespace", NS)
    assert code == 0 and "retained steps [0, 12)" in out
    assert tree(ckpt) == before
    assert list((wal_root / "stray").iterdir()) == []


def test_regions_show_watermarks_and_tables(wal_root, capsys):
    """This tests that `regions` shows each region's watermarks, entry count and tables."""
    code, out, err = cli(capsys, "regions", wal_root, "--namespace", NS)
    assert (code, err) == (0, "")
    assert lines(out)[0] == ["region", "low", "high", "entries", "committed", "expired",
                             "uncommitted", "freed", "tables"]
    assert lines(out)[2:] == [["0", "0", "6", "6", "6", "0", "0", "0", "orders"],
                              ["1", "0", "6", "6", "6", "0", "0", "0", "events"]]
    doc = cli_json(capsys, "regions", wal_root, "--namespace", NS)
    assert doc["regions"] == [
        {"region": 0, "low_watermark": 0, "high_watermark": 6, "entries": 6,
         "tables": ["orders"], "committed": 6, "expired": 0, "uncommitted": 0, "freed": 0},
        {"region": 1, "low_watermark": 0, "high_watermark": 6, "entries": 6,
         "tables": ["events"], "committed": 6, "expired": 0, "uncommitted": 0, "freed": 0},
    ]
    assert (doc["steps"], doc["first_indexed_step"]) == ([0, 12], 0)


def test_regions_count_uncommitted_and_expired_entries_apart(wal_root, capsys):
    """This tests that `regions` counts apart, by number, in the table and in --json, the
    entries of a killed attempt that never committed and of an expired step, so that the
    committed count matches the sequence range `tables` shows."""
    ns = open_namespace(file_config(wal_root))
    killed = ns.begin("loader", STEPS)  # a task attempt killed after writing: never committed
    killed.write("orders", orders(90))
    killed.receipt()
    retry = ns.begin("loader", STEPS)  # the retried attempt commits the batch
    retry.write("orders", orders(STEPS))
    retry.commit()
    ghost = ns.begin("loader", STEPS)  # a late duplicate of the committed batch
    ghost.write("orders", orders(91))
    assert ghost.commit() == 12  # the pair is committed: the duplicate adds nothing
    ns.expire(2)  # steps 0 and 1: one entry of orders, one of events
    ns.close()
    tables = cli_json(capsys, "tables", wal_root, "--namespace", NS)
    orders_seq = {t["name"]: t for t in tables["tables"]}["orders"]["regions"][0]
    assert (orders_seq["first_sequence"], orders_seq["next_sequence"]) == (1, 7)
    doc = cli_json(capsys, "regions", wal_root, "--namespace", NS)
    assert [{k: r[k] for k in ("region", "entries", "committed", "expired", "uncommitted")}
            for r in doc["regions"]] == [
        {"region": 0, "entries": 9, "committed": 6, "expired": 1, "uncommitted": 2},
        {"region": 1, "entries": 6, "committed": 5, "expired": 1, "uncommitted": 0}]
    code, out, err = cli(capsys, "regions", wal_root, "--namespace", NS)
    assert (code, err) == (0, "")
    assert lines(out)[2:4] == [["0", "0", "9", "9", "6", "1", "2", "0", "orders"],
                               ["1", "0", "6", "6", "5", "1", "0", "0", "events"]]
    notes = out.splitlines()[4:]
    assert notes[0].startswith("expired: entries of steps below 2, ")
    assert notes[1].startswith("uncommitted: entries no committed step refers to (killed, ")
    assert len(notes) == 2  # all steps are indexed: nothing else counts as uncommitted
    clean = cli_json(capsys, "clean", wal_root, "--namespace", NS, "--grace-ms", "0")
    # the expired entry goes; the uncommitted ones lie between retained entries: freed in
    # place unless written in the newest entry's millisecond (the grace of 0 keeps those)
    assert clean["regions"][0]["low_after"] == 1
    doc = cli_json(capsys, "regions", wal_root, "--namespace", NS)
    assert [(r["entries"], r["committed"], r["expired"], r["uncommitted"] + r["freed"])
            for r in doc["regions"]] == [(8, 6, 0, 2), (5, 5, 0, 0)]
    assert doc["first_indexed_step"] == 2  # the cleaner's snapshot forgot steps 0 and 1
    out = cli(capsys, "regions", wal_root, "--namespace", NS)[1]
    left = doc["regions"][0]["uncommitted"]  # what the grace of 0 kept (see above)
    assert out.splitlines()[4:] == ([] if left == 0 else [
        "uncommitted: entries no committed step refers to (killed, failed or aborted task "
        "attempts, duplicates of a committed batch, attempts in flight); readers never see "
        "them. A cleaner pass frees them once they are older than its grace (--grace-ms, "
        "cleanGraceMs) on a backend that frees single entries (file); on Kafka once a "
        "retention policy expired the steps written before them in their region",
        "  (steps below 2 are no longer indexed: entries of them the cleaner has not deleted "
        "yet count as uncommitted too)"])


def test_tables_show_schema_rows_and_sequences(wal_root, capsys):
    """This tests that `tables` shows schema, format, row count and sequence range per table."""
    code, out, err = cli(capsys, "tables", wal_root, "--namespace", NS)
    assert (code, err) == (0, "")
    rows = {r[0]: r for r in lines(out)[2:]}
    assert rows["orders"][1:] == ["0", "arrow", "24", "[0, 6)", "id: int64, item: string"]
    assert rows["events"][1:] == ["1", "avro", "6", "[0, 6)", "kind: string, n: int64"]
    doc = cli_json(capsys, "tables", wal_root, "--namespace", NS)
    t = {x["name"]: x for x in doc["tables"]}["orders"]
    assert t["rows"] == 24
    assert t["regions"] == [{"region": 0, "rows": 24, "bytes": t["bytes"], "first_sequence": 0,
                             "next_sequence": 6, "marked_deleted_before": 0}]
    assert t["schema"] == [{"name": "id", "type": "int64", "nullable": True},
                           {"name": "item", "type": "string", "nullable": True}]
    assert doc["steps"] == [0, 12]
    # named tables have ids >= 2**63: a string keeps them exact for JavaScript readers;
    # the text view leaves the 20-digit id out (it is in --json for --table-id users)
    assert int(t["id"]) >= 2**63 and t["id"] not in out


def test_steps_list_writers_rows_and_ranges(wal_root, capsys):
    """This tests that `steps` lists writer, writer step, rows and bytes, honouring --from/--to/--limit."""
    code, out, err = cli(capsys, "steps", wal_root, "--namespace", NS)
    assert (code, err) == (0, "")
    assert out.splitlines()[0] == "namespace 'shop': retained steps [0, 12), showing 12"
    body = lines(out)[3:]
    assert [r[:4] for r in body[:2]] == [["0", "loader", "0", "4"],
                                         ["1", "events-writer", "0", "1"]]
    assert body[1][5] == "events" and body[1][6].endswith("Z")
    doc = cli_json(capsys, "steps", wal_root, "--namespace", NS, "--from", "2", "--to", "9",
                   "--limit", "3")
    assert [s["step"] for s in doc["steps"]] == [2, 3, 4]
    assert [(s["writer_id"], s["writer_step"], s["rows"]) for s in doc["steps"]] == [
        ("loader", 1, 4), ("events-writer", 1, 1), ("loader", 2, 4)]
    assert all(s["bytes"] > 0 and s["commit_timestamp_ms"] > 0 for s in doc["steps"])
    latest = cli_json(capsys, "steps", wal_root, "--namespace", NS, "--limit", "2")
    assert [s["step"] for s in latest["steps"]] == [10, 11]
    assert latest["retained"] == [0, 12]


def test_tail_shows_last_rows_with_step_and_sequence(wal_root, capsys):
    """This tests that `tail` shows the last N rows of a table, with their step and sequence."""
    code, out, err = cli(capsys, "tail", wal_root, "--namespace", NS, "--table", "orders", "-n", "6")
    assert (code, err) == (0, "")
    rows = lines(out)
    assert rows[0] == ["_step", "_region", "_sequence", "id", "item"]
    assert rows[2:] == [["8", "0", "4", "18", "item-18"], ["8", "0", "4", "19", "item-19"]] + [
        ["10", "0", "5", str(i), f"item-{i}"] for i in range(20, 24)]
    doc = cli_json(capsys, "tail", wal_root, "--namespace", NS, "--table", "events", "-n", "2")
    assert doc["rows"] == [{"_step": 9, "_region": 1, "_sequence": 4, "kind": "e4", "n": 4},
                           {"_step": 11, "_region": 1, "_sequence": 5, "kind": "e5", "n": 5}]
    assert cli_json(capsys, "tail", wal_root, "--namespace", NS, "--table", "orders",
                    "-n", "0")["rows"] == []


def flip_middle_byte(root: Path, namespace: str = NS) -> Path:
    segments = sorted((root / namespace / "region_0").glob("*.seg"),
                      key=lambda p: p.stat().st_size)
    seg = segments[-1]
    data = bytearray(seg.read_bytes())
    data[len(data) // 2] ^= 0xFF
    seg.write_bytes(bytes(data))
    return seg


def test_check_passes_then_fails_on_a_flipped_byte(wal_root, capsys):
    """This tests that `check` says OK on a healthy WAL and exits 1 naming region and offset
    after one byte in the middle of a segment is flipped; other commands then fail in one line."""
    code, out, err = cli(capsys, "check", wal_root, "--namespace", NS)
    assert (code, err) == (0, "")
    assert out.startswith("OK: namespace 'shop': ") and "12 entries" in out
    assert cli_json(capsys, "check", wal_root, "--namespace", NS)["ok"] is True
    seg = flip_middle_byte(wal_root)
    code, out, err = cli(capsys, "check", wal_root, "--namespace", NS)
    assert code == 1 and err == ""
    assert out.startswith("FAILED: namespace 'shop': ")
    problem = out.splitlines()[1]
    assert "region=0 offset=" in problem and seg.name in problem, out
    # the next command: only a backup holds a damaged entry; nothing a pass could rewrite
    assert [ln for ln in out.splitlines() if ln.startswith("next: ")] == [
        f"next: restore each damaged file named above from a backup, then durablewal check "
        f"{wal_root} --namespace {NS} again; or, if there is none, durablewal repair "
        f"{wal_root} --namespace {NS} records each lost step as lost, so that its reads say "
        'so and check passes (docs/operations.md, "When something fails: each error and '
        'what to do")'], out
    code, out, _ = cli(capsys, "check", wal_root, "--namespace", NS, "--json")
    doc = json.loads(out)
    assert code == 1 and doc["ok"] is False
    assert doc["problems"][0]["where"]["region"] == 0
    assert isinstance(doc["problems"][0]["where"]["offset"], int)
    lost = [p for p in doc["problems"] if "is lost" in p["message"]]
    assert len(lost) == 1 and isinstance(lost[0]["where"]["step"], int), doc["problems"]
    assert lost[0]["fix"] == "restore"
    step = lost[0]["where"]["step"]
    code, out, err = cli(capsys, "tail", wal_root, "--namespace", NS, "--table", "orders")
    assert_one_line_error(code, out, err, f"step={step}: step {step} cannot be read",
                          "durablewal check")
    assert seg.name in err
    assert cli(capsys, "check", wal_root, "--namespace", "other")[0] == 0  # other namespace intact


def test_check_deep_says_what_it_rehashed(wal_root, capsys):
    """This tests that `check --deep` says what it checked beyond `check`: how many entries
    of the needed steps it re-hashed against their steps' digests and how many bytes of
    keys and values that was (the entries and bytes the steps refer to, counted apart from
    the log), while a plain check says nothing of it."""
    from pyspark_durable.log import open_store

    steps = cli_json(capsys, "steps", wal_root, "--namespace", NS, "--all")["steps"]
    store = open_store("file", NS, path=str(wal_root))
    referred = sum(len(e.key) + len(e.value) for region in (0, 1)
                   for e in store.open_region(region, create=False).read(0))
    store.close()
    entries = sum(s["entries"] for s in steps)
    assert entries == 2 * STEPS
    code, plain, _ = cli(capsys, "check", wal_root, "--namespace", NS)
    assert code == 0 and "re-hashed" not in plain
    code, deep, err = cli(capsys, "check", wal_root, "--namespace", NS, "--deep")
    assert (code, err) == (0, "")
    assert deep.startswith(plain.rstrip("\n") + "; re-hashed "), (plain, deep)
    assert deep.rstrip("\n").endswith(
        f"; re-hashed {entries} entries ({referred:,} bytes of keys and values) against the "
        "content digests their steps committed"), deep
    doc = cli_json(capsys, "check", wal_root, "--namespace", NS, "--deep")
    assert doc["verified"]["deep"] == {"entries": entries, "bytes": referred,
                                       "without_digest": 0}
    assert cli_json(capsys, "check", wal_root, "--namespace", NS)["verified"]["deep"] is None


def test_sealed_segment_cut_at_a_frame_boundary_is_named(wal_root, capsys):
    """This tests that a sealed (not last) segment cut exactly after one of its frames makes
    reads fail with a typed error naming that segment and the missing offsets, and that
    `check` exits 1 naming the same segment, without a traceback."""
    from pyspark_durable.errors import CorruptEntryError
    from pyspark_durable.log.file import FRAME_HEAD

    segments = sorted((wal_root / NS / "region_0").glob("*.seg"))
    assert len(segments) >= 3
    sealed = segments[1]
    data = sealed.read_bytes()
    length, _ = FRAME_HEAD.unpack_from(data, 0)
    sealed.write_bytes(data[: FRAME_HEAD.size + length])  # keep its first frame only
    first = int(sealed.stem)
    with pytest.raises(CorruptEntryError, match=rf"segment {sealed.name} ends at offset "
                                                rf"{first + 1} .* next segment starts"):
        read_steps(open_namespace(file_config(wal_root)), "orders")
    code, out, err = cli(capsys, "check", wal_root, "--namespace", NS)
    assert code == 1 and err == "", err
    assert f"segment {sealed.name} ends at offset {first + 1}" in out


def test_check_reports_wrong_attempt_and_table_in_a_step(wal_root, capsys):
    """This tests that `check` finds a step whose runs hold entries of an attempt the commit
    does not name and of a table other than the one it says."""
    ns = open_namespace(file_config(wal_root))
    ghost = ns.begin("forger", 0)
    ghost.write("orders", orders(99))
    real = ghost.receipt()
    other = ns.tables.define("returns", orders(0).schema)
    forged = AttemptReceipt("not-the-writer", "forger", 0, tuple(
        WrittenEntry(e.region_id, other.table_id, e.offset, e.rows, e.size_bytes)
        for e in real.entries))
    step = ns.commit("forger", 0, [forged])
    ns.close()
    code, out, _ = cli(capsys, "check", wal_root, "--namespace", NS)
    assert code == 1
    assert out.startswith("FAILED: namespace 'shop': 2 problem(s)")
    assert f"region=0 offset=6 step={step}: entry belongs to attempt '{ghost.attempt_id}', " \
        f"which step {step} does not name (not-the-writer)" in out
    assert f"entry holds table orders (id {real.entries[0].table_id}), step {step} says " \
        f"returns (id {other.table_id})" in out


def test_check_survives_a_lost_snapshot_and_reports_when_none_is_left(wal_root, capsys):
    """This tests that losing the newest snapshot is repaired from the one before it (the
    commits log is kept from the older kept snapshot on), and that `check` fails naming
    the commits log when no snapshot is left although the log was cleaned."""
    ns = open_namespace(file_config(wal_root))
    for upto in (4, 8, 10):
        ns.expire(upto)
        Cleaner(ns, grace_ms=0).run_once()
    older, newest = ns.store.snapshot_versions("wal")
    # kept from the older snapshot's offset, and from where its steps are read back
    assert 0 < ns.store.open_log("commits").low_watermark() <= older
    ns.store.delete_snapshot("wal", newest)
    assert open_namespace(file_config(wal_root)).steps() == range(10, 12)
    assert cli(capsys, "check", wal_root, "--namespace", NS)[0] == 0
    ns.store.delete_snapshot("wal", older)
    ns.close()
    code, out, _ = cli(capsys, "check", wal_root, "--namespace", NS)
    assert code == 1
    low = ns.store.open_log("commits").low_watermark()
    assert f"log=commits: the commits log was cleaned below offset {low} but there is no " \
        "snapshot" in out


def test_clean_reports_what_it_freed(wal_root, capsys):
    """This tests that `clean` frees nothing young by default and, after expire with no grace,
    reports per-region low watermarks before/after, the commits log and the first step."""
    code, out, err = cli(capsys, "clean", wal_root, "--namespace", NS)
    assert (code, err) == (0, "")
    assert "(grace 3600000 ms): 0 region entries freed" in out
    ns = open_namespace(file_config(wal_root))
    ns.expire(8)  # steps 0..7: orders 0-3, events 0-3
    ns.close()
    segments_before = len(list((wal_root / NS / "region_0").glob("*.seg")))
    code, out, err = cli(capsys, "clean", wal_root, "--namespace", NS, "--grace-ms", "0")
    assert (code, err) == (0, "")
    assert out.splitlines()[0] == "cleaned namespace 'shop' (grace 0 ms): 8 region entries freed"
    assert "first retained step 8" in out
    assert lines(out)[-2:] == [["0", "0", "4", "4"], ["1", "0", "4", "4"]]
    assert len(list((wal_root / NS / "region_0").glob("*.seg"))) < segments_before
    doc = cli_json(capsys, "clean", wal_root, "--namespace", NS, "--grace-ms", "0")
    assert (doc["freed_entries"], doc["first_retained_step"]) == (0, 8)
    assert doc["regions"][0] == {"region": 0, "low_before": 4, "low_after": 4, "freed": 0,
                                 "freed_in_place": 0}
    assert doc["commits_low"]["before"] == doc["commits_low"]["after"]  # one snapshot: kept
    assert doc["snapshot_at"] > 0
    assert cli_json(capsys, "steps", wal_root, "--namespace", NS)["retained"] == [8, 12]
    code, out, _ = cli(capsys, "check", wal_root, "--namespace", NS)
    assert code == 0 and "snapshot at commits offset" in out


# -- errors -----------------------------------------------------------------------


def test_bad_input_is_one_line_exit_2(wal_root, tmp_path, capsys):
    """This tests that a missing path, an unknown namespace or table and a bad backend choice
    each fail with one line on stderr and exit 2, and create nothing."""
    before = sorted(p.name for p in wal_root.iterdir())
    assert_one_line_error(*cli(capsys, "tables", tmp_path / "nope"), "does not exist",
                          str(tmp_path / "nope"))
    assert_one_line_error(*cli(capsys, "tables", wal_root, "--namespace", "nope"),
                          "unknown namespace 'nope'; namespaces: other, shop")
    for command in ("check", "steps", "tables"):  # no --namespace: says it, and what to give
        assert_one_line_error(*cli(capsys, command, wal_root),
                              "unknown namespace 'default' (the default: no --namespace was "
                              "given): pick one with --namespace NAME; namespaces: other, shop")
    assert_one_line_error(*cli(capsys, "tail", wal_root, "--namespace", NS, "--table", "nope"),
                          "unknown table 'nope'", "orders")
    assert_one_line_error(*cli(capsys, "steps"), "no WAL given")
    assert_one_line_error(*cli(capsys, "steps", wal_root, "--path", wal_root), "once")
    assert_one_line_error(*cli(capsys, "steps", wal_root / NS, "--namespace", NS),
                          f"pass {wal_root} --namespace {NS}")
    assert sorted(p.name for p in wal_root.iterdir()) == before
    with pytest.raises(SystemExit) as info:  # argparse: usage errors exit 2 as well
        main(["tail", str(wal_root), "-n", "-3", "--table", "orders"])
    assert info.value.code == 2
    assert "-3 is negative" in capsys.readouterr().err


def test_a_command_recovers_the_namespace_once_and_names_an_empty_one(wal_root, monkeypatch,
                                                                      capsys):
    """A command over one namespace recovers its state once (on Kafka a recovery reads
    the snapshots and commits topics; it recovered twice), and a namespace whose
    commits log holds nothing yet is one line naming it as empty."""
    from pyspark_durable.log import open_store
    from pyspark_durable.wal.ledger import COMMITS_LOG
    from pyspark_durable.wal.replay.state import NamespaceState

    real, calls = NamespaceState.recover, []
    monkeypatch.setattr(NamespaceState, "recover",
                        staticmethod(lambda *a: calls.append(1) or real(*a)))
    code, out, err = cli(capsys, "tables", wal_root, "--namespace", NS)
    assert (code, err) == (0, "") and "orders" in out and len(calls) == 1
    store = open_store("file", "blank", path=str(wal_root))
    store.open_log(COMMITS_LOG, create=True)
    store.close()
    assert_one_line_error(*cli(capsys, "tables", wal_root, "--namespace", "blank"),
                          "namespace 'blank'", "is empty: nothing was ever committed")


def test_version_and_typos_get_the_subcommands_usage(wal_root, capsys):
    """This tests that --version names the package and the Kafka clients, and that a typo'd
    flag fails with the subcommand's usage and the flag it meant, exit 2."""
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    out = capsys.readouterr().out
    assert info.value.code == 0 and out.startswith("durablewal 0.1.0 (pyspark ")
    assert "kafka clients:" in out and len(out.splitlines()) == 1
    with pytest.raises(SystemExit) as info:
        main(["tables", str(wal_root), "--namspace", NS])
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert err.startswith("usage: durablewal tables ")
    assert "unrecognized arguments: --namspace (did you mean --namespace?)" in err


def test_float_columns_show_even_decimals(tmp_path, capsys):
    """This tests that `tail` prints every value of a float column with the same decimals."""
    ns = open_namespace(file_config(tmp_path / "wal"))
    write_step(ns, "w", 0, {"prices": pa.table({"p": pa.array([203.7, 328.36, 5.0, None])})})
    ns.close()
    code, out, err = cli(capsys, "tail", tmp_path / "wal", "--namespace", NS, "--table",
                         "prices")
    assert (code, err) == (0, "")
    assert [r[-1] for r in lines(out)[2:]] == ["203.70", "328.36", "5.00", "null"]


def test_demo_passes_remaining_arguments_through(monkeypatch, capsys):
    """This tests that `demo` imports pyspark_durable.showcase.demo lazily and hands it every argument."""
    seen: list[list[str]] = []
    fake = types.ModuleType("pyspark_durable.showcase.demo")
    fake.main = lambda argv: seen.append(argv) or 3  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pyspark_durable.showcase.demo", fake)
    assert main(["demo", "--rows", "5", "--path", "/x", "-v", "--json"]) == 3
    assert seen == [["--rows", "5", "--path", "/x", "-v", "--json"]]


class Tty(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


SGR = re.compile(r"\x1b\[([0-9;]*)m")


def colour_codes(text: str) -> list[str]:
    """SGR parameters that set a colour (30-49, 90-107), as in ``\x1b[1;32m`` -> ["32"]."""
    return [p for params in SGR.findall(text) for p in params.split(";")
            if p and (30 <= int(p) <= 49 or 90 <= int(p) <= 107)]


@pytest.fixture
def terminal_env(monkeypatch):
    """A colour terminal, whatever the environment running the tests says."""
    for name in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    return monkeypatch


def test_progress_goes_to_a_terminal_stderr_only(wal_root, terminal_env, capsys):
    """This tests that `check` and `clean` draw progress bars with rate and ETA on stderr
    when it is a terminal, never with --json, and that stdout stays the plain result."""
    tty = Tty()
    terminal_env.setattr(sys, "stderr", tty)
    assert main(["check", str(wal_root), "--namespace", NS]) == 0
    bars = tty.getvalue()
    assert "check: commits log" in bars and "check: region" in bars
    assert "12/12" in bars and "entries/s" in bars and "ETA" in bars
    assert capsys.readouterr().out.startswith("OK: ")
    tty.seek(0), tty.truncate()
    assert main(["clean", str(wal_root), "--namespace", NS]) == 0
    assert "clean: done" in tty.getvalue()
    assert "2/2" in tty.getvalue() and "regions/s" in tty.getvalue()
    assert capsys.readouterr().out.startswith("cleaned namespace 'shop'")
    tty.seek(0), tty.truncate()
    for argv in (["check", "--namespace", NS], ["clean", "--namespace", NS],
                 ["tail", "--namespace", NS, "--table", "orders"], ["namespaces"]):
        assert main([*argv, str(wal_root), "--json"]) == 0
        json.loads(capsys.readouterr().out)
    assert tty.getvalue() == ""  # --json: no bars, even on a terminal


def test_terminal_output_is_styled_unless_no_color(wal_root, terminal_env, capsys):
    """This tests that on a terminal headers and errors are styled and coloured, that
    NO_COLOR removes every colour, and that the text stays the same."""
    tty = Tty()
    terminal_env.setattr(sys, "stdout", tty)
    assert main(["check", str(wal_root), "--namespace", NS]) == 0
    assert colour_codes(tty.getvalue()) == ["32"]  # a green OK
    tty.seek(0), tty.truncate()
    assert main(["tables", str(wal_root), "--namespace", NS]) == 0
    styled = tty.getvalue()
    assert "\x1b[1m" in styled  # bold headers
    plain = SGR.sub("", styled)
    assert lines(plain)[0] == ["table", "region", "format", "rows", "sequences", "schema"]
    terminal_env.setattr(sys, "stderr", tty)
    tty.seek(0), tty.truncate()
    assert main(["tables", str(wal_root), "--namespace", "nope"]) == 2
    assert colour_codes(tty.getvalue()) == ["31"]  # a red error line
    assert SGR.sub("", tty.getvalue()).startswith("durablewal: error: unknown namespace")
    terminal_env.setenv("NO_COLOR", "1")
    for argv in (["check", str(wal_root), "--namespace", NS], ["tables", str(wal_root), "--namespace", NS],
                 ["tables", str(wal_root), "--namespace", "nope"]):
        tty.seek(0), tty.truncate()
        main(argv)
        assert colour_codes(tty.getvalue()) == [], argv
    tty.seek(0), tty.truncate()
    main(["tables", str(wal_root), "--namespace", NS])
    assert SGR.sub("", tty.getvalue()) == plain  # NO_COLOR changes no text


def test_long_tables_on_a_terminal_are_plain_lines(terminal_env):
    """This tests that a table of more rows than rich draws quickly is printed on a terminal
    as the same aligned lines as in a pipe, its header styled."""
    from pyspark_durable.cli.render import TERMINAL_TABLE_ROWS_MAX, TextTable, emit

    rows = [[i, f"item-{i}", i / 4] for i in range(TERMINAL_TABLE_ROWS_MAX + 1)]
    tty, pipe = Tty(), io.StringIO()
    emit(TextTable(["n", "item", "quarter"], rows), stream=tty)
    emit(TextTable(["n", "item", "quarter"], rows), stream=pipe)
    assert tty.getvalue().startswith("\x1b[1m")
    assert SGR.sub("", tty.getvalue()) == pipe.getvalue()
    assert pipe.getvalue().splitlines()[-1] == "1000  item-1000   250.00"


def test_piped_output_is_plain_and_never_wrapped(tmp_path, monkeypatch, capsys):
    """This tests that output to a pipe has no escape codes and keeps each row on one
    line however wide (no wrapping at 80 columns), even with FORCE_COLOR and COLUMNS set."""
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "40")
    ns = open_namespace(file_config(tmp_path / "wal"))
    wide = pa.table({f"column_{i}": pa.array([f"value {i} " * 5]) for i in range(6)})
    write_step(ns, "w", 0, {"wide_table_with_a_long_name": wide})
    ns.close()
    code, out, err = cli(capsys, "tables", tmp_path / "wal", "--namespace", NS)
    assert (code, err) == (0, "")
    assert "\x1b" not in out and len(out.splitlines()) == 3
    assert len(out.splitlines()[2]) > 80 and not any(line.endswith(" ") for line in
                                                      out.splitlines())
    code, out, err = cli(capsys, "tail", tmp_path / "wal", "--namespace", NS, "--table",
                         "wide_table_with_a_long_name")
    assert (code, err) == (0, "") and "\x1b" not in out
    assert lines(out)[2] == ["0", "0", "0", *[(f"value {i} " * 5).strip() for i in range(6)]]
    long = "x" * 200  # one cell is cut at 60 characters (--json keeps it whole)
    ns = open_namespace(file_config(tmp_path / "wal"))
    write_step(ns, "w", 1, {"notes": pa.table({"note": [long]})})
    ns.close()
    out = cli(capsys, "tail", tmp_path / "wal", "--namespace", NS, "--table", "notes")[1]
    assert lines(out)[2][-1] == "x" * 57 + "..."
    assert cli_json(capsys, "tail", tmp_path / "wal", "--namespace", NS, "--table",
                    "notes")["rows"][0]["note"] == long


def test_subprocess_python_m(wal_root):
    """This tests that `python -m pyspark_durable` runs the CLI: JSON on stdout, exit codes,
    and a one-line error without traceback."""
    run = [sys.executable, "-m", "pyspark_durable"]
    env = {**os.environ, "PYTHONWARNINGS": "ignore::DeprecationWarning"}
    ok = subprocess.run([*run, "tables", str(wal_root), "--namespace", NS, "--json"],
                        capture_output=True, text=True, env=env, timeout=120)
    assert (ok.returncode, ok.stderr) == (0, "")
    assert {t["name"]: t["rows"] for t in json.loads(ok.stdout)["tables"]} == {
        "events": 6, "orders": 24}
    bad = subprocess.run([*run, "steps", str(wal_root), "--namespace", "nope"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr == "durablewal: error: unknown namespace 'nope'; namespaces: other, shop\n"
    with socket.socket() as s:  # kafka-python logs refused connections: none may show
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    down = subprocess.run([*run, "namespaces", "--bootstrap-servers", address,
                           "--timeout-ms", "1000"], capture_output=True, text=True, env=env,
                          timeout=120)
    assert down.returncode == 2 and down.stdout == ""
    assert down.stderr.startswith("durablewal: error: ") and down.stderr.count("\n") == 1
    assert address in down.stderr


# -- Kafka --------------------------------------------------------------------------


@pytest.mark.kafka
def test_kafka_namespaces_steps_tail_check(kafka_broker, namespace, capsys):
    """This tests namespaces, steps, tail and check against a real Kafka-protocol broker,
    and that an unknown namespace there is an error that creates nothing."""
    config = {"backend": "kafka", "namespace": namespace,
              "options": {"bootstrap_servers": kafka_broker}}
    ns = open_namespace(config)
    fill(ns)
    ns.close()
    broker = ["--bootstrap-servers", kafka_broker]
    code, out, err = cli(capsys, "namespaces", *broker, "--names-only")
    assert code == 0 and namespace in out.split()
    # The broker is shared with other tests, some of which damage their own namespaces on
    # purpose: their warnings are theirs, and none may name this namespace.
    code, out, err = cli(capsys, "namespaces", *broker, "--json")
    assert code == 0, err
    assert all(line.startswith("durablewal: warning: ") and namespace not in line
               for line in err.splitlines()), err
    mine = {n["name"]: n for n in json.loads(out)["namespaces"]}[namespace]
    assert (mine["next_step"], mine["regions"], mine["tables"]) == (12, [0, 1],
                                                                    ["events", "orders"])
    code, out, err = cli(capsys, "steps", *broker, "--namespace", namespace, "--limit", "2")
    assert (code, err) == (0, "")
    assert [r[:4] for r in lines(out)[3:]] == [["10", "loader", "5", "4"],
                                               ["11", "events-writer", "5", "1"]]
    steps = cli_json(capsys, "steps", *broker, "--namespace", namespace)["steps"]
    assert [s["rows"] for s in steps] == [4, 1] * STEPS
    code, out, err = cli(capsys, "tail", *broker, "--namespace", namespace, "--table",
                         "orders", "-n", "3")
    assert (code, err) == (0, "")
    assert [r[3:] for r in lines(out)[2:]] == [["21", "item-21"], ["22", "item-22"],
                                               ["23", "item-23"]]
    doc = cli_json(capsys, "tail", *broker, "--namespace", namespace, "--table", "events",
                   "--kafka-option", "request.timeout.ms=20000")
    assert [r["kind"] for r in doc["rows"]] == [f"e{i}" for i in range(STEPS)]
    code, out, _ = cli(capsys, "check", *broker, "--namespace", namespace)
    assert code == 0 and out.startswith(f"OK: namespace '{namespace}': ")
    assert_one_line_error(*cli(capsys, "steps", *broker, "--namespace", namespace + "x"),
                          f"unknown namespace '{namespace}x'")
    code, out, _ = cli(capsys, "namespaces", *broker, "--names-only")
    assert namespace + "x" not in out.split()


@pytest.mark.kafka
def test_kafka_unreachable_broker_fails_fast(capsys):
    """This tests that a closed port fails within --timeout-ms with one line naming the address."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"  # closed once the block ends
    for command in (["namespaces"], ["tail", "--table", "orders"]):
        start = time.monotonic()
        result = cli(capsys, *command, "--bootstrap-servers", address, "--timeout-ms", "1000")
        assert time.monotonic() - start < 1.0 + 2.0
        assert_one_line_error(*result, address)


def test_retention_shows_and_sets_the_policy_and_readers(wal_root, capsys):
    """This tests that `retention` sets the namespace's policy, which `clean` then applies,
    lists readers with their position and hold, and drops a reader by name."""
    ns = open_namespace(file_config(wal_root))
    ns.commit_reader("dash", 3, hold=True)
    ns.close()
    doc = cli_json(capsys, "retention", wal_root, "--namespace", NS, "--max-steps", "2")
    assert doc["policy"] == {"max_steps": 2}
    assert doc["readers"] == [{"reader": "dash", "next_step": 3, "holds_retention": True}]
    doc = cli_json(capsys, "clean", wal_root, "--namespace", NS, "--grace-ms", "0")
    assert doc["expired_before"] == {"before": 0, "after": 3}  # the holding reader wins
    code, out, err = cli(capsys, "retention", wal_root, "--namespace", NS, "--drop-reader", "dash")
    assert (code, err) == (0, "")
    assert out.splitlines()[0] == "retention policy: max_steps=2"
    assert "retained steps: [3, 12)" in out
    assert cli_json(capsys, "clean", wal_root, "--namespace", NS)["expired_before"]["after"] == 10
    code, _, err = cli(capsys, "retention", wal_root, "--namespace", NS, "--drop-reader", "nope")
    assert code == 2 and "unknown reader 'nope'; readers: none" in err


@pytest.mark.parametrize("argument, named", [
    ("sasl.password:Zq!9x-hunter", "--kafka-option sasl.password is not KEY=VALUE"),
    ("sasl.plain.password Zq!9x-hunter", "--kafka-option sasl.plain.password is not KEY=VALUE"),
    ("Zq!9x-hunter", "--kafka-option number 2 is not KEY=VALUE"),
    ("=Zq!9x-hunter", "--kafka-option number 2 is not KEY=VALUE"),
])
def test_a_mistyped_kafka_option_is_named_without_its_value(capsys, argument, named):
    """This tests that a --kafka-option that is not KEY=VALUE (a ':' or a blank for '=',
    or no key) is a one-line error naming the option by its key part, or by its position
    when it has none, and never echoing the argument (the value may be a password)."""
    code, out, err = cli(capsys, "steps", "--bootstrap-servers", "127.0.0.1:9",
                         "--kafka-option", "client=kafka-python", "--kafka-option", argument)
    assert_one_line_error(code, out, err, named)
    assert "Zq!9x" not in err


# -- pointed at the wrong thing -------------------------------------------------------


@pytest.mark.parametrize("limit", [["--max-steps", "0"], ["--max-age-ms", "0"],
                                   ["--max-steps", "-1"], ["--max-age-ms", "-5"]])
def test_retention_refuses_a_limit_of_zero_or_below(wal_root, capsys, limit):
    """This tests that `retention --max-steps 0` (or `--max-age-ms 0`, or a negative limit),
    which many tools read as 'unlimited' but which would expire every step at the next
    clean, is a usage error (exit 2) saying how to keep everything, and sets nothing."""
    with pytest.raises(SystemExit) as info:
        main(["retention", str(wal_root), "--namespace", NS, *limit])
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert f"argument {limit[0]}: {limit[1]} " in err
    assert "to keep everything, leave the limit out, or give --clear" in err
    assert cli_json(capsys, "retention", wal_root, "--namespace", NS)["policy"] == {}
    clean = cli_json(capsys, "clean", wal_root, "--namespace", NS, "--grace-ms", "0")
    assert clean["expired_before"] == {"before": 0, "after": 0}


def test_namespaces_names_a_namespace_folder_or_a_folder_with_no_namespace(wal_root, tmp_path,
                                                                           capsys):
    """This tests that `namespaces` given a namespace's own folder says so and names the
    parent folder to give, and that a folder holding no WAL namespace (unrelated folders,
    or nothing) is an error naming the path, not a table of notes; nothing is created."""
    for extra in ([], ["--names-only"]):
        assert_one_line_error(*cli(capsys, "namespaces", wal_root / NS, *extra),
                              f"PATH {wal_root / NS} is the namespace 'shop' itself; give its "
                              f"parent folder {wal_root}")
    photos = tmp_path / "photos"
    (photos / "2024").mkdir(parents=True)
    (photos / "2025").mkdir()
    for extra in ([], ["--names-only"]):
        assert_one_line_error(*cli(capsys, "namespaces", photos, *extra),
                              f"no WAL namespace in folder {photos} (its folders 2024, 2025 "
                              "have no commits log)")
    assert sorted(p.name for p in photos.rglob("*")) == ["2024", "2025"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_one_line_error(*cli(capsys, "namespaces", empty),
                          f"no WAL namespace in folder {empty} (it is empty")


def test_tables_prints_every_schema_whole(tmp_path, terminal_env, capsys):
    """This tests that `tables` prints a wide schema whole on every row (one per region),
    piped (one line each, for grep) and on a 120-column terminal (wrapped, not cut)."""
    ns = open_namespace(file_config(tmp_path / "wal"))
    wide = pa.table({f"customer_attribute_{i}": pa.array(["x"]) for i in range(12)})
    for region in (0, 1):
        write_step(ns, "w", region, {"customers": wide}, region_id=region)
    ns.close()
    schema = ", ".join(f"customer_attribute_{i}: string" for i in range(12))
    code, out, err = cli(capsys, "tables", tmp_path / "wal", "--namespace", NS)
    assert (code, err) == (0, "")
    assert lines(out)[2:] == [["customers", "0", "arrow", "1", "[0, 1)", schema],
                              ["customers", "1", "arrow", "1", "[0, 1)", schema]]
    terminal_env.setenv("COLUMNS", "120")
    tty = Tty()
    terminal_env.setattr(sys, "stdout", tty)
    assert main(["tables", str(tmp_path / "wal"), "--namespace", NS]) == 0
    plain = SGR.sub("", tty.getvalue())
    assert max(len(line) for line in plain.splitlines()) <= 120
    assert "..." not in plain and "\u2026" not in plain
    assert len(plain.splitlines()) > 4  # wrapped within its cell...
    words = "".join(plain.split())  # ...and whole: the last column reads on, row by row
    assert words.count("".join(schema.split())) == 2


def test_help_says_how_to_point_at_a_wal_and_check_defines_its_terms(capsys):
    """This tests that `durablewal --help` shows how to point any command at a file WAL
    (PATH) or a Kafka cluster (--bootstrap-servers), and that `check --help` defines the
    'needed step' and 'run' its report counts."""
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "durablewal COMMAND PATH [--namespace NS]" in out
    assert "durablewal COMMAND --bootstrap-servers HOST:PORT [--namespace NS]" in out
    with pytest.raises(SystemExit):
        main(["check", "--help"])
    out = capsys.readouterr().out
    assert "  needed step  a committed step whose entries must still be readable" in out
    assert "  run          the entries of one step for one table in one region" in out


def test_steps_shows_the_newest_by_default_and_all_on_request(tmp_path, capsys):
    """This tests that `steps` without a range lists only the newest steps (a namespace
    may hold millions), says so, and that --all lists every retained step."""
    from pyspark_durable.cli.commands import STEPS_SHOWN

    ns = open_namespace(file_config(tmp_path / "w"))
    for step in range(STEPS_SHOWN + 5):
        write_step(ns, "w", step, {"t": [{"id": step}]})
    ns.close()
    code, out, _ = cli(capsys, "steps", tmp_path / "w", "--namespace", NS)
    assert code == 0 and out.splitlines()[0].endswith(
        f"showing {STEPS_SHOWN} (the newest; --all for every step)")
    doc = cli_json(capsys, "steps", tmp_path / "w", "--namespace", NS)
    assert [s["step"] for s in doc["steps"]] == list(range(5, STEPS_SHOWN + 5))
    every = cli_json(capsys, "steps", tmp_path / "w", "--namespace", NS, "--all")
    assert [s["step"] for s in every["steps"]] == list(range(STEPS_SHOWN + 5))


def test_a_config_file_that_is_not_a_small_regular_file_is_refused_at_once(tmp_path, capsys):
    """This tests that --kafka-config naming /dev/zero (endless), a FIFO with no writer,
    a folder, a file over 1 MiB or one that is not UTF-8 fails at once with one line
    naming the path and what it is, reading none of it (before, /dev/zero grew the
    process by gigabytes and a FIFO waited forever); the two that used to hang run as
    their own processes, so a hang fails the test instead of stopping the suite."""
    fifo = tmp_path / "client.fifo"
    os.mkfifo(fifo)
    run = [sys.executable, "-m", "pyspark_durable", "namespaces", "--bootstrap-servers",
           "127.0.0.1:9", "--kafka-config"]
    for path, kind in (("/dev/zero", "a character device"), (str(fifo), "a FIFO (named pipe)")):
        done = subprocess.run([*run, path], capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
        assert done.returncode == 2 and done.stdout == "", done.stderr
        assert done.stderr == (f"durablewal: error: cannot read --kafka-config {path}: it is "
                               f"{kind}, not a regular file\n")
    big = tmp_path / "big.properties"
    big.write_bytes(b"# " + b"x" * (1 << 20) + b"\n")
    latin = tmp_path / "latin.properties"
    latin.write_bytes("sasl.username=j\xfcrgen\n".encode("latin-1"))
    for path, needle in ((tmp_path, "it is a folder, not a regular file"),
                         (big, "1,048,579 bytes, more than a configuration file's 1,048,576"),
                         (latin, "not UTF-8 text (byte 15)"),
                         (tmp_path / "missing", "No such file or directory")):
        assert_one_line_error(*cli(capsys, "namespaces", "--bootstrap-servers", "127.0.0.1:9",
                                   "--kafka-config", path),
                              f"cannot read --kafka-config {path}: {needle}")
