"""Start and stop Apache Kafka itself (KRaft, no ZooKeeper) on 127.0.0.1.

The broker's jars are those of the package's lock file, fetched from Maven Central
into a cache folder the first time they are needed (:func:`.jars.kafka_classpath`), or
a ``classpath`` the caller gives (the test suite's, resolved by Maven); every node runs
as ``java -cp <jars> kafka.Kafka``.

* :func:`start_cluster` starts 1 or 3 combined broker+controller nodes, each in its own
  process group, and returns when a metadata request lists every node (a port can
  open before the broker can serve).
* ``attached=True`` (the default) ties every node to the thread that started it
  (Linux ``PR_SET_PDEATHSIG``): a caller that crashes, even by ``kill -9``, takes its
  brokers with it instead of leaving orphans holding ports, memory and disk. Start
  attached nodes from a thread that lives as long as the caller (the main thread).
  ``attached=False`` is for ``durablewal kafka start``, whose broker outlives the command
  and is stopped by its PID.
* Nodes are killed with ``kill -9`` on their process group (:meth:`KafkaCluster.kill`)
  and started again on the same ``log.dirs`` (:meth:`KafkaCluster.restart`), only by
  the PIDs this module started.
* Listeners: PLAINTEXT always; ``sasl=True`` adds a SASL_PLAINTEXT listener (SCRAM-SHA-256
  and PLAIN) and ``tls=True`` an SSL listener whose keystore ``auth.tls_dir`` holds
  (``server.p12``); the nodes talk to each other over PLAINTEXT. With ``advertise``
  (tests) clients are told a proxy's port and the nodes use an INTERNAL listener.
* The broker's own log goes to ``server.log`` in each node's folder (log4j2 config
  written there); a start that fails raises :class:`BrokerStartError` with its tail.

The settings (:mod:`.settings`) are Kafka's defaults except what a cluster of this
size needs (replication of internal topics, ``min.insync.replicas``) and what makes a
start quick (``group.initial.rebalance.delay.ms=0``); ``auto.create.topics.enable``
stays on, ``num.partitions`` stays 1 and topic retention stays 7 days, as a user's
broker has them.
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pyspark_durable.showcase.localkafka.jars import kafka_classpath
from pyspark_durable.showcase.localkafka.node import HEAP, BrokerStartError, Node, launch
from pyspark_durable.showcase.localkafka.ports import free_port
from pyspark_durable.showcase.localkafka.settings import Auth, jvm_options, properties

READY_TIMEOUT_S = 90.0

LOG4J2 = """\
rootLogger.level = {level}
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = {path}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
"""


@dataclass
class KafkaCluster:
    """A KRaft cluster of combined broker+controller nodes this process started."""

    nodes: list[Node]
    cluster_id: str
    classpath: str
    auth: Auth | None = None
    heap: tuple[str, ...] = HEAP
    attached: bool = True

    @property
    def bootstrap(self) -> str:
        return ",".join(n.address for n in self.nodes)

    @property
    def client_bootstrap(self) -> str:
        """Bootstrap servers for clients: through the proxies when the nodes have them."""
        return ",".join(n.client_address for n in self.nodes)

    @property
    def address(self) -> str:  # the single-node name kept by older callers
        return self.bootstrap

    def sasl_bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{n.sasl_port}" for n in self.nodes)

    def ssl_bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{n.ssl_port}" for n in self.nodes)

    def node(self, node_id: int) -> Node:
        return next(n for n in self.nodes if n.node_id == node_id)

    def pids(self) -> list[int]:
        return [n.pid for n in self.nodes if n.alive()]  # type: ignore[misc]

    def kill(self, node_id: int) -> None:
        """``kill -9`` the node's process group (its JVM), and reap it."""
        node = self.node(node_id)
        if node.alive():
            assert node.process is not None
            os.killpg(node.process.pid, signal.SIGKILL)
            node.process.wait(timeout=30)

    def restart(self, node_id: int, wait: bool = True) -> None:
        """Start a killed node again on its own log.dirs."""
        node = self.node(node_id)
        if node.alive():
            raise BrokerStartError(f"Kafka node {node_id} is still running")
        launch(node, self.classpath, self.heap, self.attached, jvm_options(self.auth))
        if wait:
            wait_ready(self, [node_id])

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM every node this cluster started (a clean shutdown), SIGKILL laggards."""
        for node in self.nodes:
            if node.alive():
                assert node.process is not None
                os.killpg(node.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for node in self.nodes:
            if node.process is None:
                continue
            try:
                node.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(node.process.pid, signal.SIGKILL)
                node.process.wait(timeout=30)


def wait_ready(
    cluster: KafkaCluster, node_ids: list[int] | None = None, timeout_s: float = READY_TIMEOUT_S
) -> None:
    """Block until a metadata request to each given node lists every node of the cluster."""
    from confluent_kafka.admin import AdminClient

    want = {n.node_id for n in cluster.nodes}
    deadline = time.monotonic() + timeout_s
    for node in [cluster.node(i) for i in (node_ids or sorted(want))]:
        admin = AdminClient(
            {"bootstrap.servers": node.address, "log_level": 0, "socket.connection.setup.timeout.ms": 2000}
        )
        while True:
            if not node.alive():
                raise BrokerStartError(
                    f"Kafka node {node.node_id} ({node.address}) exited "
                    f"with {node.process.poll()}:\n{node.log_tail()}"
                )
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrokerStartError(
                    f"Kafka node {node.node_id} ({node.address}) not ready "
                    f"after {timeout_s:.0f}s:\n{node.log_tail()}"
                )
            try:
                brokers = set(admin.list_topics(timeout=min(5.0, left)).brokers)
            except Exception:  # noqa: BLE001 - not up yet: KafkaException of any kind
                brokers = set()
            if brokers >= want:
                break
            time.sleep(0.2)  # a metadata answer that lacks a node: ask again shortly


def random_cluster_id() -> str:
    """A KRaft cluster id as Kafka's ``Uuid.randomUuid`` makes one: 16 random bytes in
    URL-safe base64, never starting with '-' (a command line would read it as an option;
    one id in 64 did, and its cluster never formatted)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def formatted_cluster_id(nodes: list[Node]) -> str | None:
    """The cluster id every node's ``log.dirs`` was formatted with, or None when a node's
    is missing (or they disagree): then the nodes are formatted anew."""
    ids = set()
    for node in nodes:
        try:
            meta = (node.folder / "data" / "meta.properties").read_text()
        except FileNotFoundError:
            return None
        ids |= {line.split("=", 1)[1].strip() for line in meta.splitlines()
                if line.startswith("cluster.id=")}
    return ids.pop() if len(ids) == 1 else None


def _format(nodes: list[Node], cluster_id: str, classpath: str, auth: Auth | None,
            features: Mapping[str, int]) -> None:
    """``kafka-storage format`` every node (SCRAM users added at format time, feature
    levels set so)."""
    formats = []
    levels = [f"--feature={name}={level}" for name, level in features.items()]
    for node in nodes:
        scram = []
        if node.sasl_port is not None and auth is not None:
            for user, password in ((auth.admin_user, auth.admin_password), (auth.user, auth.password)):
                scram += ["--add-scram", f"SCRAM-SHA-256=[name={user},password={password}]"]
        formats.append(
            subprocess.Popen(
                [
                    "java",
                    "-Xmx256m",
                    "-XX:TieredStopAtLevel=1",
                    "-XX:+UseSerialGC",
                    f"-Dlog4j2.configurationFile={node.folder / 'log4j2.properties'}",
                    "-cp",
                    classpath,
                    "kafka.tools.StorageTool",
                    "format",
                    f"--cluster-id={cluster_id}",
                    "-c",
                    str(node.folder / "server.properties"),
                    *scram,
                    *levels,
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    for node, proc in zip(nodes, formats, strict=True):
        out, _ = proc.communicate(timeout=120)
        if proc.returncode != 0:
            raise BrokerStartError(f"formatting Kafka node {node.node_id} failed:\n{out}")


def _nodes(work_dir: Path, size: int, port: int | None, sasl_port: int | None, sasl: bool,
           tls: bool) -> list[Node]:
    """The nodes' ids, folders and ports: a single node's may be fixed, else free ones."""
    return [
        Node(
            i,
            port if port and size == 1 else free_port(),
            free_port(),
            work_dir / f"node{i}",
            (sasl_port if sasl_port and size == 1 else free_port()) if sasl else None,
            free_port() if tls else None,
        )
        for i in range(1, size + 1)
    ]


def start_cluster(
    work_dir: Path,
    size: int = 1,
    *,
    sasl: bool = False,
    tls: bool = False,
    auth: Auth | None = None,
    extra: Mapping[str, str] | None = None,
    node_extra: Mapping[int, Mapping[str, str]] | None = None,
    log_level: str = "WARN",
    heap: tuple[str, ...] = HEAP,
    attached: bool = True,
    port: int | None = None,
    sasl_port: int | None = None,
    advertise: Callable[[Node], int] | None = None,
    features: Mapping[str, int] | None = None,
    classpath: str | None = None,
    classpath_extra: tuple[str, ...] = (),
    keep_data: bool = False,
) -> KafkaCluster:
    """Format and start ``size`` KRaft nodes under ``work_dir``; see the module docstring.
    ``port`` and ``sasl_port`` fix a single node's listeners (else free ports are drawn).
    ``node_extra`` maps a node id to settings of that node alone, over ``extra`` (a
    ``log.dirs`` on a small file system of its own, say). ``advertise(node)`` returns the
    port clients are told to use for a node's PLAINTEXT listener (a test's proxy in front
    of ``node.port``); the nodes then talk to each other over a listener of their own, so
    cutting a proxy cuts only clients. ``features`` sets feature levels at format time
    (``kafka-storage format --feature``; unnamed features get the release's defaults).
    ``classpath`` replaces the lock file's jars (the test suite's, from Maven);
    ``classpath_extra`` adds folders or jars to every node's classpath (a plugin),
    restarts included. ``keep_data``: nodes whose ``log.dirs`` a format made start on
    them, with their topics (listeners, settings from this call); else all are formatted."""
    classpath = os.pathsep.join([classpath or kafka_classpath(), *classpath_extra])
    work_dir.mkdir(parents=True, exist_ok=True)
    if (sasl or tls) and auth is None:
        auth = Auth()
    nodes = _nodes(work_dir, size, port, sasl_port if sasl else None, sasl, tls)
    for node in nodes if advertise is not None else ():
        node.internal_port = free_port()
        node.advertised_port = advertise(node)
    voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in nodes)
    for node in nodes:
        node.folder.mkdir(parents=True, exist_ok=True)
        (node.folder / "server.properties").write_text(properties(
            node, voters, size, auth, {**(extra or {}), **(node_extra or {}).get(node.node_id, {})}))
        (node.folder / "log4j2.properties").write_text(
            LOG4J2.format(level=log_level, path=node.folder / "server.log"))
    cluster_id = formatted_cluster_id(nodes) if keep_data else None
    if cluster_id is None:
        cluster_id = random_cluster_id()
        _format(nodes, cluster_id, classpath, auth, features or {})
    cluster = KafkaCluster(nodes, cluster_id, classpath, auth, heap, attached)
    for node in nodes:
        launch(node, classpath, heap, attached, jvm_options(auth))
    try:
        wait_ready(cluster)
    except BaseException:
        cluster.stop()
        raise
    return cluster
