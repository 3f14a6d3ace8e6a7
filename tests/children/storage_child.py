"""Runs inside its own mount namespace (``unshare -rm``): a WAL on a small tmpfs.

Usage: unshare -rm python storage_child.py MODE DIR
MODE ``readonly``: write steps and clean, remount the tmpfs read-only, then read every
step, recover a fresh handle and run ``check``. MODE ``full``: fill a 1 MiB tmpfs with
steps until the disk is full. MODE ``recover``: fill a 6 MiB tmpfs (a tenth of one
64 MiB segment) with steps through the default options, and a reader's positions until
the commits log's last page is full too, then free it with the CLI's ``retention`` and
``clean``, write on, fill it again and free it with ``clean`` alone. MODE ``midbatch``:
fill the disk but for a few KiB, then let group-committed appends run out of space in
the middle of their write; a second handle and a fresh one must see none of them.
Prints one JSON document with what happened.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

from pyspark_durable.endpoint import open_namespace, read_steps, write_step
from pyspark_durable.errors import DiskFull, DurableWalError
from pyspark_durable.log import Record, open_store
from pyspark_durable.wal import Cleaner, Namespace
from pyspark_durable.wal.upkeep.check import Checker
from tests.children import without_pandas  # noqa: F401 - pyarrow finds no pandas to import (see there)

SIZES = {"recover": "6m"}  # the tmpfs of each mode; 1m for the others
STEP_BYTES = 60_000  # one step's text: about 2 steps per segment of a 6 MiB disk


def mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True)


def used_bytes(folder: str) -> int:
    st = os.statvfs(folder)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def durablewal(*args: str) -> dict:
    """One CLI command in its own process, as an operator runs it: its JSON document,
    exit code and stderr (where the warnings go)."""
    proc = subprocess.run([sys.executable, "-m", "pyspark_durable", *args, "--json"],
                          capture_output=True, text=True, timeout=60)
    doc = json.loads(proc.stdout) if proc.returncode == 0 else {}
    return {"rc": proc.returncode, "doc": doc, "stderr": proc.stderr[-3000:]}


def fill(ns: Namespace, first: int, written: dict[int, str]) -> dict[str, object]:
    """Write steps until the disk is full, then a reader's positions until the commits
    log's last page is full too: nothing is left for the records that free space."""
    ws, got = first, {}
    try:
        while ws < first + 10_000:
            text = os.urandom(STEP_BYTES // 2).hex()
            write_step(ns, "w", ws, {"t": [{"id": ws, "s": text}]})
            written[ws] = digest(text)
            ws += 1
    except DiskFull as exc:
        got["step_error"] = f"{type(exc).__name__}: {exc}"
    positions = 0
    try:
        while positions < 10_000:
            ns.commit_reader("dash", positions % 2)
            positions += 1
    except DiskFull as exc:
        got["reader_error"] = f"{type(exc).__name__}: {exc}"
    got["next_writer_step"] = ws
    return got


def recover(folder: str, config: dict) -> dict:
    wal = folder + "/wal"
    ns = open_namespace(config)  # the writer: the default options, no segment size
    written: dict[int, str] = {}
    rounds = []
    # the second time the policy is in place: a clean alone frees the disk
    for set_policy in (True, False):
        one = fill(ns, len(written), written)
        one["used_full"] = used_bytes(folder)
        if set_policy:
            one["retention"] = durablewal("retention", wal, "--namespace", "shop",
                                          "--max-steps", "3")
        one["clean"] = durablewal("clean", wal, "--namespace", "shop", "--grace-ms", "0")
        one["used_clean"] = used_bytes(folder)
        # the writer that got the error writes on, with the handle it had
        ws = one["next_writer_step"]
        text = os.urandom(STEP_BYTES // 2).hex()
        one["new_step"] = write_step(ns, "w", ws, {"t": [{"id": ws, "s": text}]})
        written[ws] = digest(text)
        one["used_after"] = used_bytes(folder)
        rounds.append(one)
    fresh = open_namespace(config)
    rows = read_steps(fresh, "t").to_pylist()
    return {"rounds": rounds, "written": written,
            "steps": [fresh.steps().start, fresh.steps().stop],
            "retained": [[r["id"], digest(r["s"])] for r in rows],
            "problems": [p.text() for p in Checker(
                open_store("file", "shop", path=wal)).run().problems],
            "segment_size_bytes": ns.store.segment_size_bytes}


def midbatch(folder: str) -> dict:
    """Appends that hit ENOSPC inside one writev: reported failed, never read, never
    acknowledged by a later append (the fsync rule, docs/backends.md)."""
    wal = folder + "/wal"
    writer = open_store("file", "shop", path=wal, segment_size_bytes=1 << 20)
    other = open_store("file", "shop", path=wal, segment_size_bytes=1 << 20)
    a = writer.open_log("region_0", create=True)
    acked = {o: f"ok-{o}".encode() for o in a.append([Record(b"k", f"ok-{i}".encode())
                                                        for i in range(5)])}
    b = other.open_log("region_0")
    assert b.high_watermark() == 5
    segment = os.path.join(wal, "shop", "region_0", "00000000000000000000.seg")
    size_before = os.path.getsize(segment)
    st = os.statvfs(folder)
    with open(os.path.join(folder, "filler"), "wb") as f:  # all but 3 pages
        f.write(b"\0" * (st.f_bavail * st.f_frsize - 3 * 4096))
    futures = [a.append_async([Record(b"k", f"big-{i}-{j}".encode() + os.urandom(4000))
                               for j in range(4)]) for i in range(6)]
    out: dict = {"errors": [], "failed": 0}
    for fut in futures:
        try:
            acked.update({o: None for o in fut.result()})
        except DurableWalError as exc:
            out["failed"] += 1
            out["errors"].append(f"{type(exc).__name__}: {exc}")
    out["size_before"], out["size_after"] = size_before, os.path.getsize(segment)
    out["other_high"] = b.high_watermark()
    out["other_read"] = [e.offset for e in b.read(0)]
    os.remove(os.path.join(folder, "filler"))
    out["next"] = a.append([Record(b"k", b"after")])
    fresh = open_store("file", "shop", path=wal).open_log("region_0")
    out["fresh"] = [[e.offset, e.value[:5].decode()] for e in fresh.read(0)]
    out["other_after"] = [e.offset for e in b.read(0)]
    out["acked"] = sorted(acked)
    return out


def main() -> None:
    mode, folder = sys.argv[1:3]
    mount("-t", "tmpfs", "-o", f"size={SIZES.get(mode, '1m')}", "tmpfs", folder)
    config = {"backend": "file", "namespace": "shop", "options": {"path": folder + "/wal"}}
    if mode in ("recover", "midbatch"):
        try:
            print(json.dumps(recover(folder, config) if mode == "recover" else midbatch(folder)))
        except Exception as exc:  # noqa: BLE001 - reported to the test, which fails on it
            print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
        return
    ns = open_namespace(config)
    out: dict = {"acked": {}}
    if mode == "readonly":
        for ws in range(6):
            out["acked"][ws] = write_step(ns, "w", ws, {"t": [{"id": ws, "s": "x" * ws}]})
        ns.expire(2)
        Cleaner(ns, grace_ms=0).run_once()
        ns.close()
        mount("-o", "remount,ro", folder)
        try:
            fresh = open_namespace(config)
            out["ids"] = read_steps(fresh, "t").column("id").to_pylist()
            out["steps"] = [fresh.steps().start, fresh.steps().stop]
            report = Checker(open_store("file", "shop", path=folder + "/wal")).run()
            out["problems"] = [p.text() for p in report.problems]
            try:
                write_step(fresh, "w", 9, {"t": [{"id": 9, "s": ""}]})
            except DurableWalError as exc:
                out["write_error"] = f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # noqa: BLE001 - reported to the test, which fails on it
            out["error"] = f"{type(exc).__name__}: {exc}"
    else:
        ws = 0
        try:
            while ws < 10_000:
                out["acked"][ws] = write_step(ns, "w", ws, {"t": [{"id": ws, "s": "y" * 2000}]})
                ws += 1
        except DurableWalError as exc:
            out["write_error"] = f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # noqa: BLE001 - reported to the test, which fails on it
            out["error"] = f"{type(exc).__name__}: {exc}"
        fresh = open_namespace(config)
        out["ids"] = read_steps(fresh, "t").column("id").to_pylist()
        out["problems"] = [p.text() for p in Checker(
            open_store("file", "shop", path=folder + "/wal")).run().problems]
        out["tmp_files"] = subprocess.run(["find", folder, "-name", "*.tmp"], check=True,
                                          capture_output=True, text=True).stdout.split()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
