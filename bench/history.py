"""The history pair: the same namespace at 1k, 100k and 1M committed steps.

A streaming query commits a step per micro-batch, so what a process pays to open a
namespace, and what a cleaner pass or a CLI call costs, must not grow with every step
ever committed. This measures, per history size and shape, in fresh processes (median
of ``--reps``):

- ``open``: open the namespace (recover its state) and the RSS that adds;
- ``commit``: one more 10-row step, median of 20;
- ``clean``: one cleaner pass (with the retention policy when the shape has one);
- ``steps``, ``tables``, ``regions`` and ``check``: the CLI a user runs, wall time of
  the process;
- ``disk``: the namespace's bytes on disk after that pass.

Shapes: ``writer`` (one streaming writer, steps 0, 1, 2, ...), ``per-step`` (one writer
id per step, as batch ``df.write`` does, one a minute), ``per-step-window`` (the same,
two a second, so every one of a million is inside the 7-day dedup window), and
``writer+retention`` (one writer, a policy keeping the newest 1,000 steps).

``--no-clean``: no cleaner pass ever, neither when the history is built nor in the
measuring process (a namespace written through the Python API alone): what bounds an
open is the snapshot committers write every ``SNAPSHOT_EVERY_RECORDS`` records; the
``replayed`` column says how many records the open replayed after it.

``--commit-cost``: the committer's snapshots' cost, commits on a built namespace with
them and without them (``SnapshotSchedule.every_records`` set past reach), in
alternating blocks; mean and 99th percentile per commit.

Histories are built by a generator that writes what real commits write, through the
product's own entry encoder, record classes and log (one 10-row entry per step, and its
``step`` record), a chunk of steps per append, so 1M steps take minutes instead of
hours; ``--real`` builds them by real commits (``Attempt.write`` + ``commit``) instead.
After each append of at most ``SNAPSHOT_EVERY_RECORDS`` records the generator replays
it; in the last pieces it calls ``Ledger.snapshot_if_due()``, the hook every commit
calls, so a generated history holds the snapshots its commits would have left (pruning
keeps the newest two), and before them it folds the step index as a snapshot does but
writes none (a thousand snapshots of a growing state made a 1M build quadratic).
``--keep DIR`` builds into ``DIR/<shape>-<size>`` (reused if there) and keeps it, so a
history is built once and measured by ``--measure DIR/<shape>-<size> --shape <shape>``.
Every built namespace first passes ``durablewal check``.

    python bench/history.py --sizes 1000,100000 --reps 3
    python bench/history.py --sizes 1000,100000,1000000 --reps 3 --out bench/RESULTS-history.md
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pyarrow as pa

NAMESPACE = "history"
ROWS_PER_STEP = 10
CHUNK = 5_000  # generated steps per log append
SHAPES = ("writer", "per-step", "per-step-window", "writer+retention")
RETAINED_STEPS = 1_000
BATCH_EVERY_MS = {"per-step": 60_000,  # one batch df.write a minute
                  "per-step-window": 500}  # two a second: a million inside 7 days
ONE_OFF = tuple(BATCH_EVERY_MS)
KEPT_PIECES = 3  # the generator writes the snapshots of its last pieces only (two are kept)


def rows(n: int, start: int = 0) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()),
                     "payload": pa.array([b"x" * 92] * n, pa.binary())})


def config(path: str) -> dict:
    return {"backend": "file", "namespace": NAMESPACE, "options": {"path": path}}


def writer_of(shape: str, i: int) -> tuple[str, int]:
    return (f"batch-{i:08d}", 0) if shape in ONE_OFF else ("query-history", i)


def build(path: str, shape: str, steps: int, real: bool, clean: bool = True) -> float:
    """A namespace under ``path`` with ``steps`` committed steps; seconds it took."""
    from pyspark_durable.endpoint import open_namespace

    t0 = time.perf_counter()
    ns = open_namespace(config(path))
    try:
        if shape == "writer+retention":
            from pyspark_durable.wal.replay.retention import RetentionPolicy
            ns.set_retention(RetentionPolicy(max_steps=RETAINED_STEPS))
        first = rows(ROWS_PER_STEP)
        if real:
            for i in range(steps):
                w, ws = writer_of(shape, i)
                attempt = ns.begin(w, ws)
                attempt.write("t", rows(ROWS_PER_STEP, i * ROWS_PER_STEP))
                attempt.commit(started_ms=int(time.time() * 1000) if shape in ONE_OFF
                               else None)
        elif shape in ONE_OFF:
            # batch writes a minute apart, the newest one now: the table defined first
            ns.tables.define("t", first.schema)
            generate(ns, shape, 0, steps, first)
        else:
            attempt = ns.begin(*writer_of(shape, 0))
            attempt.write("t", first)
            attempt.commit()  # defines the table, as a real first step does
            generate(ns, shape, 1, steps, first)
        if clean:
            # as the writer's driver does every cleanIntervalMs (autoClean), with or
            # without a retention policy: the pass writes the snapshot an open starts from
            from pyspark_durable.wal.upkeep.cleaner import Cleaner
            Cleaner(ns, grace_ms=0).run_once()
    finally:
        ns.close()
    return time.perf_counter() - t0


def generate(ns, shape: str, start: int, end: int, data: pa.Table) -> None:
    """Steps ``start .. end-1`` as real commits would leave them: per step one entry in
    region 0 (the key, value and attempt headers ``Attempt.write`` makes) and one
    ``step`` record naming it, appended a chunk at a time."""
    from pyspark_durable.codec import EntryKey, codec_for
    from pyspark_durable.log import Record
    from pyspark_durable.wal.format.records import Run, StepCommit, encode_meta
    from pyspark_durable.wal.ledger import COMMITS_LOG
    from pyspark_durable.wal.replay.snapshot_schedule import SNAPSHOT_EVERY_RECORDS

    info = ns.tables.lookup("t")
    value = codec_for(info.payload_format, info.schema).encode_value(data)
    key = EntryKey(ns.namespace_id, 0, info.table_id, 0).encode()
    region = ns.store.open_region(0)
    commits = ns.store.open_log(COMMITS_LOG)
    incarnation = ns.info.incarnation
    piece = min(CHUNK, SNAPSHOT_EVERY_RECORDS)
    for lo in range(start, end, piece):
        hi = min(end, lo + piece)
        entries, attempts = [], []
        for i in range(lo, hi):
            w, ws = writer_of(shape, i)
            att = f"g{i:010d}"
            attempts.append((w, ws, att))
            entries.append(Record(key, value, (("a", att.encode()), ("w", w.encode()),
                                               ("s", str(ws).encode()))))
        offsets = region.append(entries)
        now = int(time.time() * 1000)
        records = []
        for i, ((w, ws, att), off) in enumerate(zip(attempts, offsets, strict=True), lo):
            ts = now
            if shape in ONE_OFF:  # batch writes at a steady pace, the newest one now
                ts = now - (end - 1 - i) * BATCH_EVERY_MS[shape]
            step = StepCommit(w, ws, (att,), (Run(0, info.table_id, off, off + 1,
                                                  data.num_rows, len(value), 0),), ts,
                              # a batch write's writer is one-off, as the Spark sink marks it
                              started_ms=ts if shape in ONE_OFF else None)
            doc = step.to_json()
            if incarnation is not None:
                doc["i"] = incarnation
            records.append(Record(b"", encode_meta(doc)))
        commits.append(records)
        ns.refresh()  # as a committer's replay past its own record does
        if end - hi < KEPT_PIECES * SNAPSHOT_EVERY_RECORDS:
            ns.ledger.snapshot_if_due()  # what the commit of the piece's last step does
        else:  # a snapshot older than the newest two would be pruned: only fold, as it does
            with ns.ledger.exclusive():
                ns.ledger.state.index.fold(ns.ledger.state.first_needed_step())


def rss_kb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise OSError("no VmRSS in /proc/self/status")


def measure(path: str, shape: str, clean: bool = True) -> dict:
    """One fresh process's numbers (printed as JSON by ``--measure``)."""
    import pyspark_durable.endpoint
    import pyspark_durable.wal.upkeep.cleaner  # noqa: F401
    from pyspark_durable.endpoint import open_namespace
    from pyspark_durable.wal.format.columns import encode_blocks
    from pyspark_durable.wal.upkeep.cleaner import Cleaner

    # Arrow's memory pool starts at the first Arrow buffer a process makes (about 5 MB,
    # once, in any process that writes rows): started here, it is not counted as the open's
    encode_blocks({"warm": rows(1)})
    before = rss_kb()
    t0, c0 = time.perf_counter(), time.process_time()
    ns = open_namespace(config(path), create=False)
    last = ns.steps().stop
    open_ms = (time.perf_counter() - t0) * 1000
    # CPU time: what the open computes, less distorted than wall time on a loaded machine
    open_cpu_ms = (time.process_time() - c0) * 1000
    added_mb = (rss_kb() - before) / 1024
    replayed = ns.ledger.state.replayed
    writers_held = len(ns.ledger.state.dedup.writers)
    commit_ms = [commit_one(ns, shape, last + i) for i in range(20)]
    clean_ms = None
    if clean:
        t2 = time.perf_counter()
        Cleaner(ns, grace_ms=0).run_once()
        clean_ms = (time.perf_counter() - t2) * 1000
    ns.close()
    return {"open_ms": open_ms, "open_cpu_ms": open_cpu_ms, "open_rss_mb": added_mb,
            "commit_ms": statistics.median(commit_ms),
            "clean_ms": clean_ms, "steps": last, "replayed": replayed, "writers_held": writers_held}


def commit_one(ns, shape: str, i: int) -> float:
    """Milliseconds of one more 10-row step's commit (the write not counted)."""
    w, ws = writer_of(shape, i) if shape not in ONE_OFF else (f"more-{uuid.uuid4().hex}", 0)
    attempt = ns.begin(w, ws)
    attempt.write("t", rows(ROWS_PER_STEP))
    t1 = time.perf_counter()
    attempt.commit(started_ms=int(time.time() * 1000) if shape in ONE_OFF else None)
    return (time.perf_counter() - t1) * 1000


def commit_cost(path: str, shape: str, commits: int, block: int = 100) -> dict:
    """Commits with the committer's snapshots and without, in alternating blocks of
    ``block`` on one handle: per commit, mean and 99th percentile of each."""
    from pyspark_durable.endpoint import open_namespace

    ns = open_namespace(config(path), create=False)
    last = ns.steps().stop
    every = ns.ledger.snapshots.every_records
    times: dict[bool, list[float]] = {True: [], False: []}
    writing: list[float] = []  # the commits that wrote a snapshot
    for b in range(2 * commits // block):
        on = b % 2 == 0
        ns.ledger.snapshots.every_records = every if on else 1 << 62
        for _ in range(block):
            before = ns.ledger.snapshots.newest
            times[on].append(commit_one(ns, shape, last))
            if ns.ledger.snapshots.newest != before:
                writing.append(times[on][-1])
            last += 1
    ns.close()
    out: dict = {"writing": writing}
    for on, name in ((True, "with"), (False, "without")):
        t = sorted(times[on])
        out[name] = (statistics.fmean(t), t[int(0.99 * (len(t) - 1))])
    return out


def cli_seconds(*argv: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([str(Path(sys.executable).with_name("durablewal")), *argv], check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def disk_bytes(path: str) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def run_size(root: str, shape: str, steps: int, reps: int, real: bool, clean: bool = True,
             commits: int = 0, keep: bool = False) -> dict:
    path = os.path.join(root, f"{shape}-{steps}")
    built_s = 0.0 if keep and os.path.exists(path) else build(path, shape, steps, real, clean)
    cli_seconds("check", path, "--namespace", NAMESPACE)  # raises if the history is bad
    samples: dict[str, list[float]] = {}
    for _ in range(reps):
        out = subprocess.run([sys.executable, __file__, "--measure", path, "--shape", shape,
                              *([] if clean else ["--no-clean"])],
                             check=True, capture_output=True, text=True).stdout
        for k, v in json.loads(out.strip().splitlines()[-1]).items():
            samples.setdefault(k, []).append(v)
        if not clean:
            continue  # the CLI's own numbers are the cleaned table's
        samples.setdefault("steps_s", []).append(cli_seconds("steps", path, "--namespace",
                                                             NAMESPACE))
        for command in ("tables", "regions", "check"):
            samples.setdefault(f"{command}_s", []).append(
                cli_seconds(command, path, "--namespace", NAMESPACE))
    result = {k: statistics.median(v) if None not in v else None for k, v in samples.items()}
    result.update(shape=shape, size=steps, built_s=built_s, disk_mb=disk_bytes(path) / 1e6,
                  built="real commits" if real else "generator")
    if commits:
        result["commit_cost"] = commit_cost(path, shape, commits)
    if not keep:
        shutil.rmtree(path)
    return result


def interleaved(root: str, shapes: list[str], sizes: list[int], reps: int) -> list[dict]:
    """Opens of kept histories (``--keep``) without a cleaner, ``reps`` rounds that each
    open every history once in a fresh process, in turn: on a shared machine whose load
    drifts, every size then sees the same load, and the medians compare."""
    paths = {(shape, size): os.path.join(root, f"{shape}-{size}")
             for shape in shapes for size in sizes}
    for (shape, size), path in paths.items():
        if not os.path.exists(path):
            build(path, shape, size, real=False, clean=False)
    samples: dict[tuple[str, int], dict[str, list[float]]] = {key: {} for key in paths}
    for _ in range(reps):
        for (shape, size), path in paths.items():
            out = subprocess.run([sys.executable, __file__, "--measure", path, "--shape",
                                  shape, "--no-clean"],
                                 check=True, capture_output=True, text=True).stdout
            for k, v in json.loads(out.strip().splitlines()[-1]).items():
                samples[(shape, size)].setdefault(k, []).append(v)
    return [{**{k: statistics.median(v) for k, v in found.items() if None not in v},
             "open_all": sorted(found["open_ms"]), "shape": shape, "size": size,
             "disk_mb": disk_bytes(paths[(shape, size)]) / 1e6, "built": "generator"}
            for (shape, size), found in samples.items()]


def table(results: list[dict]) -> str:
    head = ("| shape | committed steps | open | RSS the open adds | commit | cleaner pass "
            "| `durablewal steps` | `tables` | `regions` | `check` | disk after clean "
            "| built by |\n"
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
    return head + "".join(
        f"| {r['shape']} | {r['size']:,} | {r['open_ms']:.0f} ms | {r['open_rss_mb']:.1f} MB "
        f"| {r['commit_ms']:.1f} ms | {r['clean_ms']:.0f} ms | {r['steps_s']:.2f} s "
        f"| {r['tables_s']:.2f} s | {r['regions_s']:.2f} s | {r['check_s']:.2f} s "
        f"| {r['disk_mb']:.1f} MB | {r['built']} |\n" for r in results)


def table_no_clean(results: list[dict]) -> str:
    head = ("| shape | committed steps | open (median; range) | open, CPU time "
            "| RSS the open adds | records replayed | writers remembered "
            "| commit (median of 20) | disk | built by |\n"
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
    return head + "".join(
        f"| {r['shape']} | {r['size']:,} | {r['open_ms']:.0f} ms"
        f"{f' ({min(a):.0f}-{max(a):.0f})' if (a := r.get('open_all')) else ''} "
        f"| {r['open_cpu_ms']:.0f} ms | {r['open_rss_mb']:.1f} MB "
        f"| {r['replayed']:.0f} | {r['writers_held']:,} | {r['commit_ms']:.1f} ms "
        f"| {r['disk_mb']:.1f} MB | {r['built']} |\n" for r in results)


def table_commit_cost(results: list[dict]) -> str:
    head = ("| shape | committed steps | commit with the committer's snapshots (mean / p99) "
            "| without (mean / p99) | a commit that wrote one (median) | snapshots written "
            "|\n|---|---:|---:|---:|---:|---:|\n")
    return head + "".join(
        f"| {r['shape']} | {r['size']:,} | {c['with'][0]:.2f} / {c['with'][1]:.1f} ms "
        f"| {c['without'][0]:.2f} / {c['without'][1]:.1f} ms "
        f"| {statistics.median(c['writing']) if c['writing'] else float('nan'):.1f} ms "
        f"| {len(c['writing'])} |\n"
        for r in results if (c := r.get("commit_cost")))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1000,100000")
    p.add_argument("--shapes", default=",".join(SHAPES))
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--real", action="store_true", help="build histories by real commits")
    p.add_argument("--out", help="also write the table to this markdown file")
    p.add_argument("--no-clean", action="store_true",
                   help="no cleaner pass, when building nor when measuring")
    p.add_argument("--commit-cost", type=int, default=0, metavar="N",
                   help="also N commits with the committer's snapshots and N without")
    p.add_argument("--keep", metavar="DIR",
                   help="build into DIR/<shape>-<size> (reused if there) and keep it")
    p.add_argument("--interleave", action="store_true",
                   help="with --keep and --no-clean: build what is missing, then open every "
                        "history once per round (medians of --reps rounds)")
    p.add_argument("--measure", help=argparse.SUPPRESS)
    p.add_argument("--shape", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.shape, not args.no_clean)))
        return
    clean = not args.no_clean
    show = table if clean else table_no_clean
    if args.interleave:
        if clean or not args.keep:
            p.error("--interleave needs --keep DIR and --no-clean")
        text = table_no_clean(interleaved(args.keep, args.shapes.split(","),
                                          [int(s) for s in args.sizes.split(",")], args.reps))
        print(text)
        return
    out = Path(__file__).parent / "out"
    out.mkdir(exist_ok=True)  # ignored by git: a fresh clone has none
    root = args.keep or tempfile.mkdtemp(prefix="history-", dir=out)
    results = []
    try:
        for shape in args.shapes.split(","):
            for size in (int(s) for s in args.sizes.split(",")):
                results.append(run_size(root, shape, size, args.reps, args.real, clean,
                                        args.commit_cost, keep=bool(args.keep)))
                print(show(results[-1:]).splitlines()[-1], flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    text = show(results)
    if args.commit_cost:
        text += "\n" + table_commit_cost(results)
    print(text)
    if args.out:
        Path(args.out).write_text(
            f"# History pair\n\n`python bench/history.py --sizes {args.sizes} --reps {args.reps}`"
            f"{' --real' if args.real else ''}{' --no-clean' if args.no_clean else ''}"
            f"{f' --commit-cost {args.commit_cost}' if args.commit_cost else ''}"
            f", file backend, {os.cpu_count()} cores.\n\n{text}")


if __name__ == "__main__":
    main()
