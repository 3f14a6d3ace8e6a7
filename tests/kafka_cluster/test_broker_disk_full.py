"""One broker's disk fills up under a writer: with replication 3 and
``min.insync.replicas=2`` the writes go on, nothing acknowledged is lost, and the broker
rejoins once its disk has room again.

Node 3 of a 3-node KRaft cluster of its own keeps its single ``log.dirs`` on a 64 MiB
tmpfs this test mounts (the machine's root may; one that cannot fails with the reason).
A filler file takes all but a few MiB, and steps of known rows (about 256 KiB each,
written through the Python API by a confluent and a kafka-python writer at once) fill
the rest. What Apache Kafka does then is what a user's broker does: the write that
meets ENOSPC marks the log dir offline, and with every log dir offline the broker halts
("Shutdown broker because all log dirs in ... have failed", exit code 1). The other two
brokers lead on after the controller fences it. Freeing the filler and starting the node
again on the same folder brings it back in sync.

This cluster is its own, not the session's ``kafka_cluster``: a broker's log dir cannot
be moved onto a small file system under a running broker.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from pyspark_durable.cli import main
from pyspark_durable.endpoint import open_namespace, read_steps, write_step
from pyspark_durable.errors import DurableWalError
from tests.helpers import KAFKA_CLIENTS, hashed_payload
from tests.kafka_broker import KafkaCluster, cluster_for_tests
from tests.kafka_cluster.kafka_cluster_tools import FAILURE_DETECTION, partition_info, wait_in_sync

pytestmark = [pytest.mark.kafka]  # kills nothing: Kafka halts the broker itself

DISK_MIB = 64
ROOM_MIB = 4  # left beside the filler: ~16 steps of ~256 KiB fill it
ROWS_PER_STEP = 64
PAYLOAD_REPEAT = 90  # ~4 KiB per row: a step of ~256 KiB
FULL_NODE = 3
STEP_BOUND_S = 75.0  # two appends' delivery timeouts (30 s request timeout + 5 s) and slack
MAX_FILL_ROUNDS = 30  # ~15 MiB written: the disk had ROOM_MIB free
CLIENTS = KAFKA_CLIENTS
# small segments and indexes, so what the broker preallocates stays small on a small disk;
# one partition of the group-offsets topic (librdkafka's FindCoordinator creates it), so
# the node's recovery after its halt is quick
BROKER = {"log.segment.bytes": str(1 << 20), "log.index.size.max.bytes": str(64 << 10),
          "offsets.topic.num.partitions": "1", **FAILURE_DETECTION}
CLUSTER_HEAP = ("-Xms128m", "-Xmx512m")


def row(i: int) -> dict:
    return {"id": i, "payload": hashed_payload(i) * PAYLOAD_REPEAT}


def step_rows(writer: str, writer_step: int) -> list[dict]:
    base = (CLIENTS.index(writer) * 100_000) + writer_step * ROWS_PER_STEP
    return [row(i) for i in range(base, base + ROWS_PER_STEP)]


@pytest.fixture(scope="module")
def small_disk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A 64 MiB tmpfs, unmounted at the end (its broker stopped first)."""
    disk = tmp_path_factory.mktemp("brokerdisk") / "disk"
    disk.mkdir()
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_MIB}m", "tmpfs",
                            str(disk)], capture_output=True, text=True)
    if mount.returncode != 0:
        pytest.fail(f"this test mounts a {DISK_MIB} MiB tmpfs for one broker's log dir and "
                    f"needs root for it: mount said {mount.stderr.strip()!r}", pytrace=False)
    try:
        yield disk
    finally:
        umount = subprocess.run(["umount", str(disk)], capture_output=True, text=True)
        assert umount.returncode == 0, f"umount {disk}: {umount.stderr}"


@pytest.fixture(scope="module")
def disk_cluster(tmp_path_factory: pytest.TempPathFactory,
                 small_disk: Path) -> Iterator[KafkaCluster]:
    """Three KRaft nodes; node 3's log.dirs on the small disk."""
    with cluster_for_tests(tmp_path_factory.mktemp("kafka3disk"), 3, heap=CLUSTER_HEAP,
                           extra=BROKER,
                           node_extra={FULL_NODE: {"log.dirs": str(small_disk / "data")}}
                           ) as cluster:
        yield cluster


class Writers:
    """A confluent and a kafka-python writer, each taking one step per round at the same
    time, each step timed; a typed error is kept and the same step retried (a writer
    step is idempotent), any other error fails the test."""

    def __init__(self, cluster: KafkaCluster, namespace: str) -> None:
        self.handles = {c: open_namespace(config(cluster, namespace, c)) for c in CLIENTS}
        self.next = dict.fromkeys(CLIENTS, 0)
        self.acked: dict[tuple[str, int], int] = {}  # (writer, writer step) -> WAL step
        self.phase: dict[tuple[str, int], str] = {}
        self.times: list[tuple[str, str, float]] = []  # (phase, writer, seconds)
        self.errors: list[str] = []
        self.pool = ThreadPoolExecutor(len(CLIENTS), thread_name_prefix="disk-full-writer")

    def round(self, phase: str) -> None:
        for done in [self.pool.submit(self.step, writer, phase) for writer in CLIENTS]:
            done.result()

    def step(self, writer: str, phase: str) -> None:
        ws = self.next[writer]
        started = time.monotonic()
        for _ in range(3):
            try:
                step = write_step(self.handles[writer], writer, ws,
                                  {"events": step_rows(writer, ws)})
                break
            except DurableWalError as exc:  # typed: kept, and the same step again
                self.errors.append(f"{phase} {writer} step {ws}: {type(exc).__name__}: {exc}")
        else:
            raise AssertionError(f"{writer} step {ws} failed 3 times: {self.errors[-3:]}")
        took = time.monotonic() - started
        assert took < STEP_BOUND_S, f"{writer} step {ws} took {took:.1f}s ({phase})"
        self.acked[(writer, ws)] = step
        self.phase[(writer, ws)] = phase
        self.times.append((phase, writer, took))
        self.next[writer] = ws + 1

    def close(self) -> None:
        self.pool.shutdown()
        for ns in self.handles.values():
            ns.close()


def config(cluster: KafkaCluster, namespace: str, client: str) -> dict:
    """The rows repeat one hash: confluent's default lz4 would store a step in a few KiB,
    and the disk must fill with the steps' own bytes, as with kafka-python."""
    plain = {"compression.type": "none"} if client == "confluent" else {}
    return {"backend": "kafka", "namespace": namespace,
            "options": {"bootstrap_servers": cluster.bootstrap, "client": client,
                        "replication_factor": 3, "min_insync_replicas": 2, **plain}}


def fill_but(disk: Path, room_mib: int) -> Path:
    """A filler file that leaves ``room_mib`` MiB free on ``disk``."""
    st = os.statvfs(disk)
    filler = disk / "filler"
    with open(filler, "wb") as out:
        out.write(b"\0" * (st.f_bavail * st.f_frsize - (room_mib << 20)))
    return filler


def check_read_back(cluster: KafkaCluster, namespace: str, acked: dict) -> int:
    """Every acknowledged step's rows once, by content, in its WAL step, and nothing
    else, read by fresh handles on each client; returns the rows checked."""
    want = {(r["id"], r["payload"], step) for (w, ws), step in acked.items()
            for r in step_rows(w, ws)}
    for client in CLIENTS:
        ns = open_namespace(config(cluster, namespace, client), create=False)
        try:
            table = read_steps(ns, "events").select(["id", "payload", "_step"]).to_pylist()
        finally:
            ns.close()
        got = [(r["id"], r["payload"], r["_step"]) for r in table]
        assert len(got) == len(set(got)), f"{client}: a row read more than once"
        missing, extra = want - set(got), set(got) - want
        assert not missing, f"{client}: {len(missing)} acknowledged rows lost, e.g. " \
                            f"{sorted(m[0] for m in missing)[:10]}"
        assert not extra, f"{client}: {len(extra)} rows nobody acknowledged"
    return len(want)


def test_one_broker_disk_full_loses_nothing_and_rejoins(disk_cluster, small_disk, capsys):
    """This tests that when one broker's only log dir fills up (Kafka halts that broker),
    writers on both clients with replication 3 and min.insync.replicas 2 go on (or fail
    typed, never with a raw error and never past a bound), that every step acknowledged
    before, during and after is read back exactly once by content, and that once its disk
    has room the broker rejoins in sync, writes continue and `durablewal check` finds the
    namespace healthy."""
    cluster, node = disk_cluster, disk_cluster.node(FULL_NODE)
    namespace = f"k{uuid.uuid4().hex[:10]}"
    writers = Writers(cluster, namespace)
    try:
        for _ in range(2):
            writers.round("before")
        leaders = {t: partition_info(cluster, f"{namespace}_{t}")
                   for t in ("commits", "region_0")}
        for topic, (_, replicas, isr) in leaders.items():
            assert sorted(replicas) == sorted(isr) == [1, 2, 3], (topic, replicas, isr)

        filler = fill_but(small_disk, ROOM_MIB)
        filled_at = time.monotonic()
        rounds = 0
        while node.alive():
            assert rounds < MAX_FILL_ROUNDS, (
                f"node {FULL_NODE} still runs after {rounds} rounds of steps on a disk with "
                f"{ROOM_MIB} MiB free: {os.statvfs(small_disk).f_bavail} blocks left")
            writers.round("filling")
            rounds += 1
        halted_after = time.monotonic() - filled_at
        exit_code = node.process.wait(timeout=30)
        server_log = (node.folder / "server.log").read_text(errors="replace")
        assert "No space left on device" in server_log, node.log_tail()
        halt = next((ln for ln in server_log.splitlines() if "Shutdown broker" in ln), "")
        for _ in range(2):  # the broker is gone: two in-sync replicas are left
            writers.round("down")

        filler.unlink()
        restarted = time.monotonic()
        cluster.restart(FULL_NODE)
        wait_in_sync(cluster, namespace)
        rejoined_s = time.monotonic() - restarted
        for _ in range(2):
            writers.round("after")
    finally:
        writers.close()

    rows = check_read_back(cluster, namespace, writers.acked)
    capsys.readouterr()  # what came before is not check's output
    code = main(["check", "--bootstrap-servers", cluster.bootstrap, "--namespace",
                 namespace, "--json"])
    out, err = capsys.readouterr()
    assert code == 0 and json.loads(out)["ok"] is True, (code, out, err)
    slowest = {p: max((t, w) for q, w, t in writers.times if q == p)
               for p in ("before", "filling", "down", "after")}
    phases = {p: sum(1 for q in writers.phase.values() if q == p) for p in slowest}
    print(f"\nnode {FULL_NODE} (leaders before: "
          f"{ {t: v[0] for t, v in leaders.items()} }) halted with exit code {exit_code} "
          f"{halted_after:.1f}s after the filler: {halt.strip()[:200]}")
    halting_round = [f"{w} {t:.1f}s" for q, w, t in writers.times if q == "filling"][-2:]
    print(f"the round of steps that met the full disk: {halting_round}")
    print(f"steps per phase {phases}, slowest step per phase "
          f"{ {p: f'{t:.1f}s ({w})' for p, (t, w) in slowest.items()} }; typed errors: "
          f"{writers.errors or 'none'}")
    print(f"restart and back in sync in {rejoined_s:.1f}s; {rows} rows of "
          f"{len(writers.acked)} steps read back once each on both clients; check ok")
