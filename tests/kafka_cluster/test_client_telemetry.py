"""Client telemetry (KIP-714) on the real broker: a client-metrics subscription makes
librdkafka push metrics, and librdkafka 2.5.0 was reported to kill its process (an
assert) when a subscription asked only for metrics it does not implement. The WAL's
writer and reader on the confluent client run in a child process
(tests/children/telemetry_child.py) through several push intervals under (a) a
subscription of only metrics librdkafka does not implement, (b) a mix, and (c) a
subscription changed while they run; the child must exit normally and every step must
read back.

The subscription is set with the Admin API (IncrementalAlterConfigs on a CLIENT_METRICS
resource, what ``kafka-configs.sh --entity-type client-metrics`` sends) and matches
only the child's ``client.id``. The cluster's nodes receive pushes with TelemetryLog
(conftest), which writes the metric names of each push it accepts. kafka-python
(3.0.12) implements no client telemetry: it never asks for a subscription.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from pyspark_durable.endpoint import open_namespace, read_steps
from tests.helpers import CHILDREN, ROOT, hashed_payload
from tests.kafka_broker import KafkaCluster

pytestmark = [pytest.mark.kafka]

CHILD = str(CHILDREN / "telemetry_child.py")
INTERVAL_MS = 500
# what librdkafka 2.16 pushes when asked for every metric (org.apache.kafka.): 10
# producer and 13 consumer metrics; these two are among them
IMPLEMENTED = {"producer": "org.apache.kafka.producer.node.request.latency.avg",
               "consumer": "org.apache.kafka.consumer.fetch.manager.fetch.latency.avg"}
# metrics of the Java clients that librdkafka does not implement
UNIMPLEMENTED = {"producer": "org.apache.kafka.producer.record.send.rate",
                 "consumer": "org.apache.kafka.consumer.fetch.manager.records.lag.max"}
ONLY_UNIMPLEMENTED = sorted(UNIMPLEMENTED.values())
MIXED = sorted([*IMPLEMENTED.values(), *UNIMPLEMENTED.values()])


def subscribe(cluster: KafkaCluster, name: str, metrics: list[str] | None,
              client_id: str) -> None:
    """Set (or, with ``metrics`` None, delete) the client-metrics subscription ``name``
    for clients whose client.id is ``client_id``."""
    from kafka import KafkaAdminClient
    from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType

    if metrics is None:
        configs = {k: (AlterConfigOp.DELETE, None) for k in ("metrics", "interval.ms", "match")}
    else:
        configs = {"metrics": ",".join(metrics), "interval.ms": str(INTERVAL_MS),
                   "match": f"client_id={client_id}"}
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        result = admin.alter_configs(
            [ConfigResource(ConfigResourceType.CLIENT_METRICS, name, configs)])
    finally:
        admin.close()
    assert result == {"client_metrics": {name: "OK"}}, result


def pushed(pushes: Path, client_id: str) -> dict[str, set[str]]:
    """Metric names the brokers received from ``client_id``'s clients, per kind."""
    names: dict[str, set[str]] = {"producer": set(), "consumer": set()}
    for log in pushes.glob("telemetry-*.tsv"):
        for line in log.read_text().splitlines():
            client, *_, metrics = line.split("\t")  # id, instance, terminating, interval, type
            if client != client_id:
                continue
            assert not metrics.startswith("!"), line
            for metric in filter(None, metrics.split(",")):
                names[metric.split(".")[3]].add(metric)
    return names


def run_child(cluster: KafkaCluster, namespace: str, client_id: str, tmp_path: Path,
              change: list[str] | None = None, name: str = "") -> tuple[list[dict], dict]:
    """The child through one phase, or two with the subscription changed to ``change``
    in between; its PHASE reports and DONE report. It must exit 0."""
    config = {"backend": "kafka", "namespace": namespace,
              "options": {"bootstrap_servers": cluster.bootstrap, "client": "confluent",
                          "replication_factor": 3, "min_insync_replicas": 2,
                          "client_id": client_id, "debug": "telemetry"}}
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    err = tmp_path / f"{client_id}.err"
    with err.open("w") as err_file:
        child = subprocess.Popen([sys.executable, CHILD, json.dumps(config),
                                  "2" if change else "1"], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=err_file, text=True, env=env)
    phases: list[dict] = []
    done: dict = {}
    for line in child.stdout:  # the child's reports, until it exits
        word, _, report = line.partition(" ")
        if word == "PHASE":
            phases.append(json.loads(report))
            if change and len(phases) == 1:
                subscribe(cluster, name, change, client_id)
                child.stdin.write("changed\n")
                child.stdin.flush()
        elif word == "DONE":
            done = json.loads(report)
    code = child.wait(timeout=60)
    assert code == 0, (f"the child exited with {code} (a negative code is the signal that "
                       f"killed it) after phases {phases}:\n{err.read_text()[-3000:]}")
    return phases, done


def expect_matched(phase: dict, metrics: list[str]) -> None:
    """Each client matched the implemented metrics of the subscription, and pushed."""
    want = {kind: int(IMPLEMENTED[kind] in metrics) for kind in IMPLEMENTED}
    by_kind: dict[str, set[int]] = {}
    for client, state in phase["clients"].items():
        by_kind.setdefault(client.split("-")[0], set()).add(state["matched"])
    assert by_kind == {kind: {n} for kind, n in want.items()}, (by_kind, phase)


def read_back(cluster: KafkaCluster, namespace: str, acked: dict[str, int]) -> int:
    """Every acknowledged step's rows once, by content, in its step, and nothing else."""
    ns = open_namespace({"backend": "kafka", "namespace": namespace,
                         "options": {"bootstrap_servers": cluster.bootstrap,
                                     "client": "confluent"}}, create=False)
    try:
        table = read_steps(ns, "events").select(["id", "payload", "_step"]).to_pylist()
    finally:
        ns.close()
    want = {(i, hashed_payload(i), step) for ws, step in acked.items()
            for i in range(int(ws) * 5, int(ws) * 5 + 5)}
    got = [(r["id"], r["payload"], r["_step"]) for r in table]
    assert len(got) == len(set(got)) and set(got) == want, (len(got), len(want))
    return len(got)


@pytest.mark.parametrize("case", ["only-unimplemented", "mixed", "changed-while-running"])
def test_a_telemetry_subscription_does_not_kill_the_wal_clients(kafka_cluster, telemetry_log,
                                                                 tmp_path, case):
    """This tests that a WAL writer and reader on the confluent client, in a child
    process, run through at least 3 telemetry pushes each under a client-metrics
    subscription of (a) only metrics librdkafka does not implement, (b) a mix, and (c)
    the mix changed to only unimplemented ones while they run, that the child exits
    normally, that the brokers receive only the implemented metrics asked for, and
    that every step it wrote reads back by content."""
    cluster, (_, pushes) = kafka_cluster, telemetry_log
    tag = uuid.uuid4().hex[:8]
    namespace, client_id, name = f"t{tag}", f"wal-telemetry-{tag}", f"durablewal-{tag}"
    first = ONLY_UNIMPLEMENTED if case == "only-unimplemented" else MIXED
    later = ONLY_UNIMPLEMENTED if case == "changed-while-running" else None
    subscribe(cluster, name, first, client_id)
    try:
        phases, done = run_child(cluster, namespace, client_id, tmp_path, later, name)
    finally:
        subscribe(cluster, name, None, client_id)
    assert len(phases) == (2 if later else 1) and done, (phases, done)
    expect_matched(phases[0], first)
    if later:
        expect_matched(phases[1], later)
        old = {c: s["subscription"] for c, s in phases[0]["clients"].items()}
        assert all(s["subscription"] != old.get(c) for c, s in phases[1]["clients"].items())
    received = pushed(pushes, client_id)
    want = {kind: {IMPLEMENTED[kind]} & set(first) for kind in IMPLEMENTED}
    assert received == want, (received, want)
    rows = read_back(cluster, namespace, done["acked"])
    print(f"\n{case}: subscription {first}" + (f", then {later}" if later else ""))
    for i, phase in enumerate(phases):
        print(f"phase {i}: {phase['steps']} steps in {phase['seconds']}s; clients "
              f"{phase['clients']}; failed requests {phase['failed'] or 'none'}")
    print(f"brokers received {received}; {rows} rows of {len(done['acked'])} steps read back")
