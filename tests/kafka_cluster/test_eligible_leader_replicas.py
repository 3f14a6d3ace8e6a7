"""Two of three brokers killed one after the other and restarted in the reverse order,
on a cluster with Eligible Leader Replicas on (``eligible.leader.replicas.version=1``,
KIP-966; the default of a new cluster since Kafka 4.1, set at format time by the
cluster fixture), while a writer takes steps through the WAL's Python API.

ELR changes which replica the controller may elect once the in-sync replicas shrank
below ``min.insync.replicas``: a replica that left the ISR while it was caught up to the
high watermark (an eligible one) may lead, and a replica in neither set may not. The
order is the one operators fear: the first node is fenced and leaves the ISR (steps go
on with two in sync), the second dies (the quorum of combined KRaft nodes is lost with
it: appends fail typed), and the last one killed comes back first, so the controller
elects from the ISR and ELR it recorded before the outage while the other node is
still down.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable

import pytest

from pyspark_durable.endpoint import open_namespace, read_steps, write_step
from pyspark_durable.errors import BackendUnavailable, DurableWalError
from pyspark_durable.wal import Namespace
from tests.helpers import assert_acknowledged, hashed_payload
from tests.kafka_broker import KafkaCluster, wait_ready
from tests.kafka_cluster.kafka_cluster_tools import partition_info, wait_in_sync

pytestmark = [pytest.mark.kafka, pytest.mark.crash]

ROWS_PER_STEP = 20
WRITER = "elr-writer"
FAIL_WITHIN_S = 20.0  # an append's bound with the short timeouts below, and slack
# the writer's handle during the outage: a failure within seconds, as in
# test_two_brokers_down (librdkafka reports a timed-out delivery ~3 s after
# message.timeout.ms)
SHORT = {"request_timeout_ms": 3000, "connect_timeout_ms": 3000, "message_timeout_ms": 1500}
# how long typed failures are tolerated while the restarted node comes up: a node's
# start is ~10 s on a quiet machine, several times that beside the rest of the suite
BACK_WITHIN_S = 180.0
ASK_ATTEMPTS = 8  # new admin clients asked in turn while a restarting node resets some


def rows(writer_step: int) -> list[dict]:
    base = writer_step * ROWS_PER_STEP
    return [{"id": i, "payload": hashed_payload(i)} for i in range(base, base + ROWS_PER_STEP)]


def config(cluster: KafkaCluster, namespace: str, **options: object) -> dict:
    return {"backend": "kafka", "namespace": namespace,
            "options": {"bootstrap_servers": cluster.bootstrap, "client": "confluent",
                        "replication_factor": 3, "min_insync_replicas": 2, **options}}


def finalized_features(cluster: KafkaCluster) -> dict[str, int]:
    """The cluster's finalized feature levels, as a broker reports them (ApiVersions)."""
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        features = admin.describe_features()
    finally:
        admin.close()
    return {name: f["finalized"][1] for name, f in features.items() if "finalized" in f}


def replica_sets(cluster: KafkaCluster, topics: list[str], via: int) -> dict[str, tuple]:
    """(leader, ISR, ELR, last known ELR) of partition 0 of each topic, with
    DescribeTopicPartitions: the request that carries the ELR fields.

    The client bootstraps from node ``via`` but sends the request to a node of its
    choosing, at random; a node restarting takes a connection and resets it. Such a
    refused question is asked again of a new client (at most ``ASK_ATTEMPTS`` times):
    the cluster's answer is what is observed here, not the client's luck."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaConnectionError, NodeNotReadyError

    refused: list[str] = []
    for _ in range(ASK_ATTEMPTS):
        admin = KafkaAdminClient(bootstrap_servers=cluster.node(via).address)
        try:
            described = admin.describe_topic_partitions(topics)["topics"]
            break
        except (KafkaConnectionError, NodeNotReadyError) as exc:
            refused.append(repr(exc))
        finally:
            admin.close()
    else:
        raise AssertionError(f"no node answered DescribeTopicPartitions: {refused}")
    return {t["name"].split("_", 1)[1]: (p["leader_id"], sorted(p["isr_nodes"]),
                                           sorted(p["eligible_leader_replicas"] or []),
                                           sorted(p["last_known_elr"] or []))
            for t in described for p in t["partitions"]}


class Writer:
    """One writer's steps through the Python API, each acknowledged step remembered."""

    def __init__(self, ns: Namespace) -> None:
        self.ns = ns
        self.next = 0
        self.acked: dict[int, int] = {}  # writer step -> WAL step
        self.phase: dict[int, str] = {}
        self.took: dict[int, float] = {}  # writer step -> seconds of its last attempt

    def step(self, phase: str) -> int:
        ws = self.next
        started = time.monotonic()
        step = write_step(self.ns, WRITER, ws, {"events": rows(ws)})
        self.acked[ws], self.phase[ws] = step, phase
        self.took[ws] = time.monotonic() - started
        self.next += 1
        return step

    def step_until_written(self, phase: str, errors: list[str],
                           on_failure: Callable[[], object]) -> None:
        """The next step, written again (same writer step) after each typed failure:
        the way back while a restarted node joins; the failures are kept, and
        ``on_failure`` is called after each."""
        deadline = time.monotonic() + BACK_WITHIN_S
        while time.monotonic() < deadline:
            started = time.monotonic()
            try:
                self.step(phase)
                return
            except DurableWalError as exc:
                assert exc.retriable, f"{phase}: not retriable: {type(exc).__name__}: {exc}"
                errors.append(f"after {time.monotonic() - started:.1f}s "
                              f"{type(exc).__name__}: {str(exc)[:300]}")
                on_failure()
        raise AssertionError(f"{phase}: writer step {self.next} not written within "
                             f"{BACK_WITHIN_S:.0f}s: {errors[-3:]}")


def test_two_of_three_killed_and_restarted_in_reverse_order_with_elr(kafka_cluster):
    """This tests that on a 3-node cluster with Eligible Leader Replicas on, a WAL writer
    (confluent, acks=all, replication 3, min.insync.replicas 2) writes on with one node
    killed, fails with retriable BackendUnavailable naming the brokers with a second one
    killed, writes again once the last node killed is back (the first still down) and
    after both are, that the failed writer steps written again land once each, and that
    every acknowledged step reads back by content afterwards."""
    cluster = kafka_cluster
    features = finalized_features(cluster)
    assert features.get("eligible.leader.replicas.version") == 1, features
    namespace = f"e{uuid.uuid4().hex[:10]}"
    topics = [f"{namespace}_commits", f"{namespace}_region_0"]
    ns = open_namespace(config(cluster, namespace))
    short = open_namespace(config(cluster, namespace, **SHORT))
    writer = Writer(ns)
    seen: list[tuple[str, dict]] = []
    retried: list[str] = []
    survivor = 0  # chosen below, once the leaders are known

    def observe(moment: str) -> dict[str, tuple]:
        sets = replica_sets(cluster, topics, survivor)  # the node never killed
        seen.append((moment, sets))
        return sets

    try:
        for _ in range(3):
            writer.step("before")
        for topic in topics:
            _, replicas, isr = partition_info(cluster, topic)
            assert sorted(replicas) == sorted(isr) == [1, 2, 3], (topic, replicas, isr)
        region_leader = partition_info(cluster, topics[1])[0]
        first = region_leader  # the leader of the rows goes first
        second = next(n.node_id for n in cluster.nodes if n.node_id != first)
        survivor = next(n.node_id for n in cluster.nodes if n.node_id not in (first, second))

        cluster.kill(first)
        # acks=all waits for every in-sync replica: this step is acknowledged only once
        # the controller fenced the dead node and took it out of both topics' ISR
        writer.step("one down")
        sets = observe(f"node {first} killed, a step written")
        for name, (leader, isr, _elr, _last) in sets.items():
            assert first not in isr and leader != first, (name, sets)

        cluster.kill(second)
        addresses = [cluster.node(n).address for n in (first, second)]
        failed_at = writer.next
        failures: list[str] = []
        for _ in range(2):  # the same writer step each time: its retry must land once
            started = time.monotonic()
            with pytest.raises(BackendUnavailable) as failure:
                write_step(short, WRITER, failed_at, {"events": rows(failed_at)})
            took = time.monotonic() - started
            message = str(failure.value)
            failures.append(f"{took:.1f}s: {message[:300]}")
            assert failure.value.retriable, message
            assert took < FAIL_WITHIN_S, f"the step failed only after {took:.1f}s: {message}"
            assert "2 of 3 Kafka brokers unavailable" in message, message
            for address in addresses:
                assert address in message, f"{address} is not named: {message}"

        # reverse order: the last node killed first; the first one stays down a while
        restarted_at = time.monotonic()
        cluster.restart(second, wait=False)
        writer.step_until_written(f"node {second} back, node {first} down", retried,
                                  lambda: observe(f"node {second} restarted, a step failed"))
        back_s = time.monotonic() - restarted_at
        assert cluster.node(first).process.poll() is not None  # still down: 2 of 3 serve
        mid = observe(f"node {second} restarted, a step written, node {first} down")
        for name, (leader, isr, _elr, _last) in mid.items():
            assert leader in (second, survivor) and first not in isr, (name, mid)
        writer.step(f"node {second} back, node {first} down")

        cluster.restart(first, wait=False)
        wait_ready(cluster, [first])
        for _ in range(3):
            writer.step("after")
        wait_in_sync(cluster, namespace)
        final = observe("all back, in sync")
    finally:
        short.close()
        ns.close()

    for name, (_leader, isr, elr, last) in final.items():
        assert isr == [1, 2, 3] and not elr and not last, (name, final)
    check = open_namespace(config(cluster, namespace), create=False)
    try:
        table = read_steps(check, "events").select(["id", "payload", "_step"]).to_pylist()
        for ws, step in writer.acked.items():
            assert_acknowledged(check, WRITER, ws, step)
    finally:
        check.close()
    got = [(r["id"], r["payload"], r["_step"]) for r in table]
    want = {(r["id"], r["payload"], step) for ws, step in writer.acked.items() for r in rows(ws)}
    assert len(got) == len(set(got)), "a row read more than once"
    assert set(got) == want, (f"lost {sorted(w[0] for w in want - set(got))[:10]}, "
                              f"unexpected {sorted(g[0] for g in set(got) - want)[:10]}")
    assert {r[0] for r in got if r[2] == writer.acked[failed_at]} == \
        {r["id"] for r in rows(failed_at)}, "the step that failed twice is not there once"
    print(f"\nkilled {first} (region leader) then {second}; {survivor} survived; "
          f"restarted {second}, then {first}")
    print(f"acknowledged steps per phase {dict(Counter(writer.phase.values()))}, 2 attempts "
          f"failed with two down; {len(got)} rows of {len(writer.acked)} steps read back once")
    print("seconds per acknowledged step: " + ", ".join(
        f"{ws} ({writer.phase[ws]}) {t:.1f}" for ws, t in writer.took.items()))
    print("failed during the outage: " + " | ".join(failures))
    print(f"writes back {back_s:.1f}s after restarting node {second}; typed failures "
          f"meanwhile: {retried or 'none'}")
    for moment, sets in seen:
        print(f"{moment}: (leader, ISR, ELR, last known ELR) {sets}")
