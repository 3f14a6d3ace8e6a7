"""Many writers, one namespace: what N concurrent committers get done together.

A streaming job has one committer, but a namespace is shared: many queries, many batch
jobs and many Python-API producers commit into it at once, each in its own process. Every
commit appends a ``step`` record to the one commits log, so this measures whether they
share its appends and syncs or queue behind one another.

For each N in ``--writers`` (default 1, 8, 32), N processes open the namespace, wait at a
common start, then for ``--seconds`` each commits small steps (``--rows`` rows of one
table into region ``index % --regions``) under its own writer id, numbering its steps 0,
1, 2, ... as a streaming writer does. Each writer's first commit (step 0) comes before the
common start and is reported on its own: it opens the writer's region (on Kafka it
registers the region's log and checks its topic), a cost paid once per process, which
32 first commits among a few hundred would otherwise make the p99. Each step is
``begin`` + ``write`` + ``commit``; the latency is that whole call, as a caller sees
it, and a commit's CPU is the writer process's (all its threads) over that call:
building the step's rows comes before it, as the caller's cost. Reported per N:
commits/s of all writers together, the p50 and p99 latency over every timed commit, the
CPU per commit, the ratio of commits/s to one writer's, and the first commits' p50 and
max. Rounds alternate the N values (``--reps`` rounds, median of rounds).

After the rounds, every namespace is read back: the number of committed steps must be
the number of commits the writers counted (and their first ones), and every row id must
be there once.

    python bench/many_writers.py --backends file --reps 3
    python bench/many_writers.py --backends file,kafka --out bench/RESULTS-many-writers.md
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

TABLE = "t"


def rows(writer: int, step: int, n: int) -> pa.Table:
    """``n`` rows whose ids say which writer and step wrote them."""
    base = (writer << 40) | (step << 12)
    return pa.table({"id": pa.array(range(base, base + n), pa.int64()),
                     "payload": pa.array([b"x" * 92] * n, pa.binary())})


def child(config: dict, index: int, seconds: float, n_rows: int, regions: int) -> None:
    """One writer: open, say ready, wait for go, commit steps until the time is up, then
    print its latencies (seconds) as one JSON line."""
    from pyspark_durable.endpoint import open_namespace

    ns = open_namespace(config, create=False)
    writer_id = f"w{index}-{uuid.uuid4().hex[:8]}"
    data = rows(index, 0, n_rows)  # pyarrow imports pandas on its first array
    # the writer's first commit opens its region (on Kafka: registers the log and checks
    # its topic, racing the other writers doing the same): timed apart, before the start
    t0 = time.perf_counter()
    attempt = ns.begin(writer_id, 0)
    attempt.write(TABLE, data, index % regions)
    attempt.commit()
    first = time.perf_counter() - t0
    print("ready", flush=True)
    sys.stdin.readline()
    latencies: list[float] = []
    end = time.perf_counter() + seconds
    cpu = 0.0  # the process's CPU (every thread) from begin to commit, summed
    step = 1
    try:
        while time.perf_counter() < end:
            data = rows(index, step, n_rows)  # the caller's rows: not the commit's cost
            cpu0, t0 = time.process_time(), time.perf_counter()
            attempt = ns.begin(writer_id, step)
            attempt.write(TABLE, data, index % regions)
            attempt.commit()
            latencies.append(time.perf_counter() - t0)
            cpu += time.process_time() - cpu0
            step += 1
    finally:
        ns.close()
    print(json.dumps({"writer": writer_id, "latencies": latencies, "cpu_s": cpu,
                      "first_s": first}), flush=True)


def round_of(config: dict, n: int, seconds: float, n_rows: int, regions: int,
             env: dict[str, str] | None = None) -> dict:
    """Start ``n`` writer processes, release them together, gather their latencies."""
    cmd = [sys.executable, __file__, "--child", json.dumps(config), "--seconds", str(seconds),
           "--rows", str(n_rows), "--regions", str(regions)]
    procs = [subprocess.Popen([*cmd, "--index", str(i)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env) for i in range(n)]
    for p in procs:
        line = p.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"a writer did not start: {line!r} (exit {p.wait()})")
    t0 = time.perf_counter()
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    outs = [json.loads(p.communicate()[0]) for p in procs]
    wall = time.perf_counter() - t0
    for p in procs:
        if p.returncode:
            raise RuntimeError(f"a writer failed with exit {p.returncode}")
    lat = sorted(x for o in outs for x in o["latencies"])
    firsts = sorted(o["first_s"] for o in outs)
    return {"writers": n, "commits": len(lat), "wall_s": wall,
            "first_ms": 1000 * firsts[len(firsts) // 2], "first_max_ms": 1000 * firsts[-1],
            "cpu_ms_per_commit": 1000 * sum(o["cpu_s"] for o in outs) / max(1, len(lat)),
            "commits_per_s": len(lat) / seconds,
            "p50_ms": 1000 * lat[len(lat) // 2],
            "p99_ms": 1000 * lat[min(len(lat) - 1, int(len(lat) * 0.99))]}


def verify(config: dict, expected_commits: int, n_rows: int, writers: int) -> None:
    """Every commit the writers counted (and each writer's first) is one step, and every
    row is there once."""
    from pyspark_durable.endpoint import open_namespace

    ns = open_namespace(config, create=False)
    try:
        ids: list[int] = []
        steps = 0
        for step in ns.steps():
            steps += 1
            table = ns.read_step_table(step)
            if table is not None:
                ids.extend(table.column("id").to_pylist())
        first = 1 + writers  # the step that defined the table, each writer's first
        if steps - first != expected_commits:
            raise AssertionError(f"{steps - first} steps for {expected_commits} commits")
        if len(ids) != len(set(ids)) or len(ids) != (expected_commits + first) * n_rows:
            raise AssertionError(f"{len(ids)} row ids, {len(set(ids))} distinct, "
                                 f"expected {(expected_commits + first) * n_rows}")
    finally:
        ns.close()


def new_namespace(backend: str, bootstrap: str | None, scratch: Path, regions: int) -> dict:
    """A fresh namespace with the table defined by a first step."""
    from pyspark_durable.endpoint import open_namespace

    name = f"mw{uuid.uuid4().hex[:8]}"
    opts = {"path": str(scratch)} if backend == "file" else {
        "bootstrap_servers": str(bootstrap)}
    config = {"backend": backend, "namespace": name, "options": opts}
    ns = open_namespace(config)
    try:
        attempt = ns.begin("define", 0)
        attempt.write(TABLE, rows(0xFFFF, 0, 10))
        attempt.commit()
    finally:
        ns.close()
    return config


def run(backend: str, bootstrap: str | None, scratch: Path, args: argparse.Namespace
        ) -> list[dict]:
    counts = [int(x) for x in args.writers.split(",")]
    results: dict[int, list[dict]] = {n: [] for n in counts}
    env = None
    if args.slow_sync_us and backend == "file":
        # every fsync of the WAL's files waits first, as on network block storage: the
        # LD_PRELOAD shim of the disk-fault tests, built with gcc
        from tests.faults.powercut import build_shim, shim_env
        scratch.mkdir(parents=True, exist_ok=True)
        env = shim_env(build_shim(scratch), scratch, delay_us=args.slow_sync_us)
    for _ in range(args.reps):
        for n in counts:
            config = new_namespace(backend, bootstrap, scratch, args.regions)
            r = round_of(config, n, args.seconds, args.rows, args.regions, env)
            verify(config, r["commits"], args.rows, n)
            results[n].append(r)
            print(f"{backend} {n:>3} writers: {r['commits_per_s']:7.1f} commits/s "
                  f"p50 {r['p50_ms']:6.1f} ms p99 {r['p99_ms']:7.1f} ms "
                  f"cpu {r['cpu_ms_per_commit']:5.2f} ms/commit, first commit p50 "
                  f"{r['first_ms']:.0f} ms max {r['first_max_ms']:.0f} ms", flush=True)
    one = statistics.median(r["commits_per_s"] for r in results[counts[0]])
    table = []
    for n in counts:
        rs = results[n]
        cps = statistics.median(r["commits_per_s"] for r in rs)
        table.append({"backend": backend, "writers": n, "commits_per_s": cps,
                      "vs_first": cps / one,
                      "p50_ms": statistics.median(r["p50_ms"] for r in rs),
                      "p99_ms": statistics.median(r["p99_ms"] for r in rs),
                      "cpu_ms": statistics.median(r["cpu_ms_per_commit"] for r in rs),
                      "first_ms": statistics.median(r["first_ms"] for r in rs),
                      "first_max_ms": statistics.median(r["first_max_ms"] for r in rs)})
    return table


def report(table: list[dict], args: argparse.Namespace) -> str:
    slow = (f"; every fsync of the file log slowed by {args.slow_sync_us} us"
            if args.slow_sync_us else "")
    lines = [f"Commits of {args.rows}-row steps for {args.seconds:g} s per round, "
             f"median of {args.reps} rounds; {os.cpu_count()} cores, load average "
             f"{os.getloadavg()[0]:.1f} at the end{slow}.", "",
             "| backend | writers | commits/s | vs 1 writer | p50 ms | p99 ms | CPU ms/commit "
             "| first commit ms (p50 / max) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['backend']} | {r['writers']} | {r['commits_per_s']:.0f} | "
              f"{r['vs_first']:.2f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | "
              f"{r['cpu_ms']:.2f} | {r['first_ms']:.0f} / {r['first_max_ms']:.0f} |"
              for r in table]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="file", help="file and/or kafka")
    parser.add_argument("--writers", default="1,8,32")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rows", type=int, default=10)
    parser.add_argument("--regions", type=int, default=4)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--slow-sync-us", type=int, default=0,
                        help="file log: every fsync waits this long first (a network disk)")
    parser.add_argument("--out", help="write the table to this Markdown file")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(json.loads(args.child), args.index, args.seconds, args.rows, args.regions)
        return
    table: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="many-writers-") as tmp:
        scratch = Path(tmp)
        for backend in args.backends.split(","):
            if backend == "file":
                table += run("file", None, scratch / "file", args)
                continue
            from pyspark_durable.showcase.localkafka.cluster import start_cluster
            broker = start_cluster(scratch / "kafka")
            try:
                table += run("kafka", broker.bootstrap, scratch, args)
            finally:
                broker.stop()
    text = report(table, args)
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
