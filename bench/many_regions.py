"""Many regions on Kafka: what a namespace of R regions costs to open, write and read.

On Kafka every region is a topic of its own (``{namespace}_region_{id}``), so a client
that kept a consumer or a connection per region would hold fds and sockets in proportion
to the regions of the namespace. They should be bounded by the brokers instead: one
producer, one admin client and a few pooled readers, each with one connection per broker.

For each R in ``--regions`` (default 16, 256) and each client in ``--clients``, on a
3-broker cluster (topics replicated 3 times), every round runs two fresh processes:

* the writer creates a namespace, writes step 0 (``--rows`` rows spread evenly over the
  R regions of one table, which creates the R topics) and commits, then step 1 (the same
  rows, the topics now exist) and commits;
* the reader opens a fresh handle on the written namespace (timed: the open) and reads
  step 1 back with ``read_step_table`` (timed), checking every row is there.

Each process counts its open fds (``/proc/self/fd``), its TCP connections to the brokers
(its socket fds whose inode is an ESTABLISHED entry of ``/proc/self/net/tcp*`` with a
broker port on the other end) and its threads after open, after each write, after the
read. Reported: the median of ``--reps`` rounds. fds, connections and threads do not
depend on the machine's load; times do.

    python bench/many_regions.py --regions 16,256 --reps 3
    python bench/many_regions.py --clients confluent --regions 16 --reps 1 --rows 16000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from common import make_rows  # noqa: E402

TABLE = "t"
PEAK_S = 0.005  # how often the fds are counted while a write or read runs
BROKERS = 3


def tcp_to(ports: set[int]) -> int:
    """This process's established TCP connections whose remote port is one of ``ports``."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the listing's own fd, closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.readlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            if fields[3] == "01" and fields[9] in inodes and remote_port in ports:
                count += 1
    return count


def usage(ports: set[int]) -> dict:
    """Open fds, TCP connections to the brokers and threads of this process now."""
    with open("/proc/self/status") as f:
        threads = next(int(line.split()[1]) for line in f if line.startswith("Threads:"))
    return {"fds": len(os.listdir("/proc/self/fd")) - 1, "tcp": tcp_to(ports),
            "threads": threads}


class Peak:
    """The most fds this process held while the block ran, sampled every ``PEAK_S``: a
    client opened and closed per region would show here, not in a count taken after."""

    def __init__(self) -> None:
        self.most = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while True:
            self.most = max(self.most, len(os.listdir("/proc/self/fd")) - 1)
            if self._stop.wait(PEAK_S):
                return

    def __enter__(self) -> Peak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def write_child(config: dict, regions: int, n_rows: int, ports: set[int]) -> dict:
    """Create the namespace, write steps 0 and 1 over every region; times and usage."""
    from pyspark_durable.endpoint import open_namespace

    out: dict = {}
    t0 = time.perf_counter()
    ns = open_namespace(config)
    out["create_s"] = time.perf_counter() - t0
    out["after_create"] = usage(ports)
    per = n_rows // regions
    try:
        for step in (0, 1):
            parts = [make_rows(step * n_rows + r * per, per) for r in range(regions)]
            with Peak() as peak:
                t0 = time.perf_counter()
                attempt = ns.begin("many-regions", step)
                for r, rows in enumerate(parts):
                    attempt.write(TABLE, rows, r)
                attempt.commit()
                out[f"write{step}_s"] = time.perf_counter() - t0
            out[f"peak_write{step}"] = peak.most
            out[f"after_write{step}"] = usage(ports)
    finally:
        ns.close()
    out["rows"] = per * regions
    return out


def read_child(config: dict, n_rows: int, ports: set[int]) -> dict:
    """Open a fresh handle on the written namespace and read step 1; times and usage."""
    from pyspark_durable.endpoint import open_namespace

    out: dict = {"before_open": usage(ports)}
    t0 = time.perf_counter()
    ns = open_namespace(config, create=False)
    out["open_s"] = time.perf_counter() - t0
    out["after_open"] = usage(ports)
    try:
        with Peak() as peak:
            t0 = time.perf_counter()
            table = ns.read_step_table(1)
            out["read_s"] = time.perf_counter() - t0
        out["peak_read"] = peak.most
        out["after_read"] = usage(ports)
    finally:
        ns.close()
    got = 0 if table is None else table.num_rows
    ids = set() if table is None else set(table.column("id").to_pylist())
    if got != n_rows or len(ids) != n_rows:
        raise AssertionError(f"read {got} rows ({len(ids)} distinct) of step 1, "
                             f"expected {n_rows} distinct")
    return out


def in_child(mode: str, config: dict, regions: int, n_rows: int, ports: set[int]
             ) -> dict:
    """Run one side of a round in a fresh process; its result as a dict."""
    cmd = [sys.executable, __file__, "--child", mode, "--config", json.dumps(config),
           "--regions", str(regions), "--rows", str(n_rows),
           "--ports", ",".join(map(str, sorted(ports)))]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def one_round(bootstrap: str, client: str, regions: int, n_rows: int) -> dict:
    ports = {int(a.rsplit(":", 1)[1]) for a in bootstrap.split(",")}
    config = {"backend": "kafka", "namespace": f"mr{uuid.uuid4().hex[:8]}",
              "options": {"bootstrap_servers": bootstrap, "client": client,
                          "replication_factor": min(BROKERS, 3)}}
    w = in_child("write", config, regions, n_rows, ports)
    r = in_child("read", config, 0, w["rows"], ports)
    return {**w, **r}


MEASURES = ["create_s", "write0_s", "write1_s", "open_s", "read_s", "peak_write0",
            "peak_write1", "peak_read"]
PLACES = ["after_create", "after_write1", "before_open", "after_open", "after_read"]


def median_of(rounds: list[dict]) -> dict:
    out = {k: statistics.median(r[k] for r in rounds) for k in MEASURES}
    out["rows"] = rounds[0]["rows"]
    for place in PLACES:
        out[place] = {k: statistics.median(r[place][k] for r in rounds)
                      for k in ("fds", "tcp", "threads")}
    return out


def report(table: list[dict], args: argparse.Namespace, load: tuple[float, ...]) -> str:
    lines = [
        f"`python bench/many_regions.py --regions {args.regions} --clients {args.clients} "
        f"--rows {args.rows} --reps {args.reps}`: a {BROKERS}-broker Apache Kafka cluster "
        "(topics replicated 3 times), one table spread evenly over R regions (~100-byte "
        f"rows), median of {args.reps} rounds, each side of a round in a fresh process. "
        f"{os.cpu_count()} cores **shared with other agents' runs** (load average "
        f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} at the end): times and rows/s "
        "move with the load; fds, connections and threads do not.", "",
        "Writer: open creating the namespace, step 0 (creates the R topics), step 1 (into "
        "existing topics); usage after step 1. Reader: a fresh handle's open, read of "
        "step 1; usage (fds / TCP connections to the brokers / threads) after open and "
        "after the read, and the most fds seen (sampled every 5 ms) while each write and "
        "the read ran.", "",
        "| client | regions | rows/step | write step 0 | write step 1 | write rows/s | "
        "open | read | read rows/s | writer after write | reader after open | "
        "reader after read | most fds: write 0 / write 1 / read |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|---|"]

    def use(u: dict) -> str:
        return f"{u['fds']:.0f} / {u['tcp']:.0f} / {u['threads']:.0f}"

    for r in table:
        lines.append(
            f"| {r['client']} | {r['regions']} | {r['rows']:,} | {r['write0_s']:.2f} s | "
            f"{r['write1_s']:.2f} s | {r['rows'] / r['write1_s']:,.0f} | "
            f"{1000 * r['open_s']:.0f} ms | {r['read_s']:.2f} s | "
            f"{r['rows'] / r['read_s']:,.0f} | {use(r['after_write1'])} | "
            f"{use(r['after_open'])} | {use(r['after_read'])} | {r['peak_write0']:.0f} / "
            f"{r['peak_write1']:.0f} / {r['peak_read']:.0f} |")
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> list[dict]:
    from pyspark_durable.showcase.localkafka.cluster import start_cluster

    counts = [int(x) for x in args.regions.split(",")]
    clients = args.clients.split(",")
    rounds: dict[tuple[str, int], list[dict]] = {(c, n): [] for c in clients for n in counts}
    with tempfile.TemporaryDirectory(prefix="many-regions-") as tmp:
        cluster = start_cluster(Path(tmp) / "kafka", BROKERS)
        try:
            for rep in range(args.reps):
                for client in clients:
                    order = counts if rep % 2 == 0 else counts[::-1]
                    for n in order:
                        r = one_round(cluster.bootstrap, client, n, args.rows)
                        rounds[(client, n)].append(r)
                        print("round", json.dumps({"client": client, "regions": n, **r}))
                        print(f"{client} {n:>4} regions: open {1000 * r['open_s']:.0f} ms, "
                              f"write {r['write0_s']:.2f}/{r['write1_s']:.2f} s, read "
                              f"{r['read_s']:.2f} s, most fds {r['peak_write0']}/{r['peak_write1']}/"
                              f"{r['peak_read']}, fds/tcp/threads after write "
                              f"{r['after_write1']}, after read {r['after_read']}", flush=True)
        finally:
            cluster.stop()
    return [{"client": c, "regions": n, **median_of(rounds[(c, n)])}
            for c in clients for n in counts]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--regions", default="16,256")
    parser.add_argument("--clients", default="confluent,kafka-python")
    parser.add_argument("--rows", type=int, default=256_000, help="rows per step")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", help="append the table to this Markdown file")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    parser.add_argument("--ports", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        config, ports = json.loads(args.config), {int(p) for p in args.ports.split(",")}
        regions = int(args.regions)
        result = (write_child(config, regions, args.rows, ports) if args.child == "write"
                  else read_child(config, args.rows, ports))
        print(json.dumps(result), flush=True)
        return
    table = run(args)
    text = report(table, args, os.getloadavg())
    print(text)
    if args.out:
        with open(args.out, "a") as f:
            f.write(text)


if __name__ == "__main__":
    main()
