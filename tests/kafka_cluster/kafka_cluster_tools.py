"""Input, checks, leaders and Spark progress waits shared by the replicated-Kafka tests.

Input is JSON files written into a folder while a query runs: file ``k`` holds ids
``k * ROWS_PER_FILE`` up to the next file's first id, each with a payload derived from
its id, so every row can be checked by content. A file appears atomically (written
under a hidden name, then renamed), as Spark's file source needs.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

from tests.helpers import hashed_payload as payload
from tests.helpers import wait_until
from tests.kafka_broker import KafkaCluster, wait_ready

ROWS_PER_FILE = 150
WAIT_S = 180.0  # the longest wait on one Spark event (a loaded 2-core machine)
SCHEMA = "id long, payload string"

# How soon the controller takes a killed node for dead. A node the controller has not
# heard from for broker.session.timeout.ms is fenced: only then are its partitions led
# elsewhere and its replicas dropped from their in-sync sets, so until then an acks=all
# write to a partition it led or followed waits. With Kafka's 9 s (heartbeats every 2 s)
# an acks=all produce stalled 12.5 s after kill -9 of the partition's leader and 8.1 s
# after its follower's; with 4 s and a heartbeat every 0.5 s, 5.6 s and 3.8 s (measured
# on a loaded 2-core machine). A live node may still miss 7 heartbeats in a row before it
# is fenced. The settings change when a kill is noticed, not what a kill does.
FAILURE_DETECTION = {"broker.session.timeout.ms": "4000", "broker.heartbeat.interval.ms": "500"}


def expected_rows(files: int) -> set[tuple[int, str]]:
    return {(i, payload(i)) for i in range(files * ROWS_PER_FILE)}


def write_file(in_dir: Path, k: int) -> None:
    in_dir.mkdir(parents=True, exist_ok=True)
    tmp = in_dir / f".part-{k:05d}.json.tmp"  # Spark's file source skips hidden names
    with open(tmp, "w") as out:
        for i in range(k * ROWS_PER_FILE, (k + 1) * ROWS_PER_FILE):
            out.write(json.dumps({"id": i, "payload": payload(i)}) + "\n")
    os.rename(tmp, in_dir / f"part-{k:05d}.json")


def check_exactly_once(rows: list[tuple[int, str]], files: int, where: str) -> int:
    """Every expected row once, nothing else: returns how many rows were checked."""
    counts = Counter(rows)
    dupes = {r: c for r, c in counts.items() if c > 1}
    want = expected_rows(files)
    missing = want - set(counts)
    extra = set(counts) - want
    assert not dupes, f"{where}: {len(dupes)} rows more than once, e.g. {sorted(dupes)[:5]}"
    assert not missing, f"{where}: {len(missing)} rows lost, e.g. ids {sorted(missing)[:10]}"
    assert not extra, f"{where}: {len(extra)} unexpected rows, e.g. {sorted(extra)[:5]}"
    assert len(rows) == len(want)
    return len(rows)


def restart_all(cluster: KafkaCluster, node_ids: list[int], prefix: str | None = None) -> None:
    """Start several killed nodes at once, then wait until each lists every node (a node
    restarted alone while another is down would wait for the missing one); with
    ``prefix``, also until every partition of the topics named so is led and in sync on
    every node (after a lost quorum a listed node does not yet lead anything)."""
    for node_id in node_ids:
        cluster.restart(node_id, wait=False)
    if node_ids:
        wait_ready(cluster, node_ids)
    if prefix is not None:
        wait_in_sync(cluster, prefix)


def wait_in_sync(cluster: KafkaCluster, prefix: str, timeout_s: float = WAIT_S) -> None:
    """Block until every partition of every topic starting with ``prefix`` has a leader
    and all of the cluster's nodes in sync (asked of the broker; it has no event for it)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
    want = sorted(n.node_id for n in cluster.nodes)
    lagging: dict[str, object] = {}

    def in_sync() -> bool:  # the broker pushes no event for a finished election: ask again
        topics = admin.list_topics(timeout=10).topics
        lagging.clear()
        lagging.update({f"{name}[{p.id}]": (p.leader, sorted(p.isrs))
                        for name, meta in topics.items() if name.startswith(prefix)
                        for p in meta.partitions.values()
                        if p.leader not in want or sorted(p.isrs) != want})
        return bool(topics) and not lagging

    wait_until(in_sync, lambda: f"partitions of {prefix}* led and in sync; lagging: {lagging}",
               timeout_s)


def partition_info(cluster: KafkaCluster, topic: str) -> tuple[int, list[int], list[int]]:
    """(leader, replicas, in-sync replicas) of partition 0 of ``topic``, from a live node."""
    from confluent_kafka.admin import AdminClient

    live = ",".join(n.address for n in cluster.nodes if n.alive())
    admin = AdminClient({"bootstrap.servers": live, "log_level": 0})
    meta = admin.list_topics(topic, timeout=30)
    part = meta.topics[topic].partitions[0]
    return part.leader, list(part.replicas), list(part.isrs)


def leader_of(cluster: KafkaCluster, topic: str) -> int:
    leader = partition_info(cluster, topic)[0]
    assert leader in {n.node_id for n in cluster.nodes}, f"{topic} has no leader: {leader}"
    return leader
