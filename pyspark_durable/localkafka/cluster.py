"""Start and stop Apache Kafka itself (KRaft, no ZooKeeper) on 127.0.0.1.

The broker's jars are resolved from Maven Central by ``jars/kafka-broker/pom.xml``
into ``jars/kafka-broker/libs/`` (ignored by git) the first time they are needed
(:func:`kafka_classpath`); every node runs as ``java -cp 'libs/*' kafka.Kafka``.

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

The settings are Kafka's defaults except what a cluster of this size needs
(replication of internal topics, ``min.insync.replicas``) and what makes a start quick
(``group.initial.rebalance.delay.ms=0``); ``auto.create.topics.enable`` stays on,
``num.partitions`` stays 1 and topic retention stays 7 days, as a user's broker has them.
"""

from __future__ import annotations

import base64
import fcntl
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pyspark_durable.errors import DurableWalError

ROOT = Path(__file__).resolve().parent.parent.parent
POM = ROOT / "jars" / "kafka-broker" / "pom.xml"
LIBS = POM.parent / "libs"
READY_TIMEOUT_S = 90.0
HEAP = ("-Xms256m", "-Xmx768m")
PR_SET_PDEATHSIG = 1  # linux/prctl.h

LOG4J2 = """\
rootLogger.level = {level}
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = {path}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
"""


class BrokerStartError(DurableWalError):
    """A broker did not come up in time (the message holds its log's tail)."""


def kafka_classpath() -> str:
    """``libs/*`` of Apache Kafka's jars, resolved from Maven Central once (file-locked,
    so parallel processes resolve it once)."""
    if not POM.is_file():
        raise BrokerStartError(
            f"no {POM}: a local Kafka broker is started from a source "
            "checkout of pyspark_durable (its jars/kafka-broker/pom.xml)"
        )
    stamp = LIBS / ".resolved"
    with open(POM.parent / ".resolve.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not stamp.exists() or stamp.stat().st_mtime < POM.stat().st_mtime:
            try:
                done = subprocess.run(
                    [
                        "mvn",
                        "-q",
                        "-B",
                        "-f",
                        str(POM),
                        "dependency:copy-dependencies",
                        f"-DoutputDirectory={LIBS}",
                        "-DincludeScope=runtime",
                    ],
                    capture_output=True,
                    text=True,
                )
            except FileNotFoundError:
                raise BrokerStartError(
                    "resolving Apache Kafka's jars needs Maven ('mvn') and Java 17 on the PATH"
                ) from None
            if done.returncode != 0:
                raise BrokerStartError(
                    f"resolving Apache Kafka's jars with {POM} failed:\n"
                    f"{done.stdout[-3000:]}{done.stderr[-3000:]}"
                )
            stamp.touch()
    return f"{LIBS}/*"


def _ephemeral_ports() -> range:
    """The ports the kernel hands to outgoing connections and to bind(port 0)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return range(int(low), int(high) + 1)
    except (OSError, ValueError):
        return range(32768, 61000)  # Linux's default


_ports = random.Random()
_given: set[int] = set()  # never the same port twice: a cluster's ports are all drawn first


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now, chosen outside the
    kernel's ephemeral range: a broker restarted on its port after a kill -9 must find
    it free, and a port of that range can meanwhile become the local end of any
    client's outgoing connection (to the other brokers, say)."""
    ephemeral = _ephemeral_ports()
    for _ in range(1000):
        port = _ports.randrange(10_000, 65_536)
        if port in ephemeral or port in _given:
            continue
        if not port_free(port):
            continue  # taken: draw again
        _given.add(port)
        return port
    raise OSError("no free TCP port outside the ephemeral range on 127.0.0.1")


def port_free(port: int) -> bool:
    """Whether a listener could bind the port now. SO_REUSEADDR, as Kafka's own server
    socket: the connections of a broker just stopped (TIME_WAIT) do not take the port,
    a listening socket does."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@dataclass
class OAuthValidation:
    """How the SASL listener's OAUTHBEARER checks a token: Kafka's
    ``OAuthBearerValidatorCallbackHandler``, RS256 signatures against the keys at
    ``jwks_url``, and the ``iss`` and ``aud`` claims. ``reauth_ms`` is the longest session
    before the client must log in again (``connections.max.reauth.ms``): a session ends
    at its token's expiry anyway, so a client must fetch a new token to go on.
    ``clock_skew_s`` is how long past its expiry a token is still taken for a login
    (Kafka's default is 30 s; ``exp`` is in whole seconds, and a client refreshing at 80 %
    of a token's life that lives seconds may log in with it right at its expiry)."""

    jwks_url: str
    issuer: str
    audience: str
    reauth_ms: int = 600_000
    clock_skew_s: int = 2


@dataclass
class Auth:
    """Credentials and files of the SASL and TLS listeners."""

    admin_user: str = "admin"
    admin_password: str = field(default_factory=lambda: "adm-" + uuid.uuid4().hex)
    user: str = "alice"
    password: str = field(default_factory=lambda: "pw-" + uuid.uuid4().hex)
    tls_dir: Path | None = None  # ca.pem, server keystore (PKCS12) and its password
    keystore_password: str = field(default_factory=lambda: "ks-" + uuid.uuid4().hex)
    # more SASL/PLAIN users (name -> password), e.g. one per role of an authorizer's test
    plain_users: dict[str, str] = field(default_factory=dict)
    oauth: OAuthValidation | None = None  # adds OAUTHBEARER to the SASL listener

    def plain_logins(self) -> dict[str, str]:
        """Every SASL/PLAIN user of the listener: the user, the admin and the others."""
        return {self.user: self.password, self.admin_user: self.admin_password, **self.plain_users}


@dataclass
class Node:
    node_id: int
    port: int
    controller_port: int
    folder: Path
    sasl_port: int | None = None
    ssl_port: int | None = None
    process: subprocess.Popen | None = None
    # with a proxy in front (start_cluster's ``advertise``): the port clients are told
    # to use, and the listener the nodes use among themselves
    advertised_port: int | None = None
    internal_port: int | None = None

    @property
    def address(self) -> str:
        """The node's own PLAINTEXT listener (the harness's way in, never proxied)."""
        return f"127.0.0.1:{self.port}"

    @property
    def client_address(self) -> str:
        """Where clients reach the node: its proxy's port when it has one."""
        return f"127.0.0.1:{self.advertised_port or self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, chars: int = 4000) -> str:
        texts = []
        for name in ("server.log", "stdout.log"):
            try:
                texts.append((self.folder / name).read_text(errors="replace")[-chars:])
            except OSError as exc:
                texts.append(f"<no {name}: {exc}>")
        return "\n".join(texts)


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
        _launch(node, self.classpath, self.heap, self.attached, _jvm_options(self.auth))
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


SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN_LOGIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
OAUTH_PACKAGE = "org.apache.kafka.common.security.oauthbearer"
# Kafka 4 fetches a JWKS only from URLs this JVM property lists
OAUTH_ALLOWED_URLS = "org.apache.kafka.sasl.oauthbearer.allowed.urls"


def _oauth_properties(listener: str, oauth: OAuthValidation) -> dict[str, str]:
    return {
        f"{listener}.oauthbearer.sasl.jaas.config": f"{OAUTH_PACKAGE}.OAuthBearerLoginModule required;",
        f"{listener}.oauthbearer.sasl.server.callback.handler.class":
            f"{OAUTH_PACKAGE}.OAuthBearerValidatorCallbackHandler",
        f"{listener}.oauthbearer.connections.max.reauth.ms": str(oauth.reauth_ms),
        "sasl.oauthbearer.jwks.endpoint.url": oauth.jwks_url,
        "sasl.oauthbearer.expected.issuer": oauth.issuer,
        "sasl.oauthbearer.expected.audience": oauth.audience,
        "sasl.oauthbearer.clock.skew.seconds": str(oauth.clock_skew_s),
    }


def _jvm_options(auth: Auth | None) -> tuple[str, ...]:
    if auth is None or auth.oauth is None:
        return ()
    return (f"-D{OAUTH_ALLOWED_URLS}={auth.oauth.jwks_url}",)


def _sasl_properties(node: Node, auth: Auth) -> dict[str, str]:
    listener = "listener.name.sasl_plaintext"
    oauth = {} if auth.oauth is None else _oauth_properties(listener, auth.oauth)
    return {
        **oauth,
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,PLAIN" + (",OAUTHBEARER" if oauth else ""),
        f"{listener}.scram-sha-256.sasl.jaas.config": f"{SCRAM_LOGIN} required;",
        f"{listener}.plain.sasl.jaas.config": (
            f"{PLAIN_LOGIN} required "
            + " ".join(f'user_{name}="{secret}"' for name, secret in auth.plain_logins().items())
            + ";"
        ),
    }


def _tls_properties(auth: Auth) -> dict[str, str]:
    if auth.tls_dir is None:
        raise BrokerStartError("a TLS listener needs auth.tls_dir (its server.p12 keystore)")
    return {
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(auth.tls_dir / "server.p12"),
        "ssl.keystore.password": auth.keystore_password,
        "ssl.key.password": auth.keystore_password,
        "ssl.client.auth": "none",
    }


def properties(node: Node, voters: str, size: int, auth: Auth | None, extra: Mapping[str, str]) -> str:
    """``server.properties`` of one node."""
    listeners = [f"PLAINTEXT://127.0.0.1:{node.port}"]
    advertised = [f"PLAINTEXT://{node.client_address}"]
    protocols = ["CONTROLLER:PLAINTEXT", "PLAINTEXT:PLAINTEXT"]
    inter_broker = "PLAINTEXT"
    props: dict[str, str] = {}
    if node.internal_port is not None:  # clients go through a proxy, the nodes do not
        inter_broker = "INTERNAL"
        listeners.append(f"INTERNAL://127.0.0.1:{node.internal_port}")
        advertised.append(f"INTERNAL://127.0.0.1:{node.internal_port}")
        protocols.append("INTERNAL:PLAINTEXT")
    if node.sasl_port is not None and auth is not None:
        listeners.append(f"SASL_PLAINTEXT://127.0.0.1:{node.sasl_port}")
        advertised.append(listeners[-1])
        protocols.append("SASL_PLAINTEXT:SASL_PLAINTEXT")
        props.update(_sasl_properties(node, auth))
    if node.ssl_port is not None and auth is not None:
        listeners.append(f"SSL://127.0.0.1:{node.ssl_port}")
        advertised.append(listeners[-1])
        protocols.append("SSL:SSL")
        props.update(_tls_properties(auth))
    replication = str(min(size, 3))
    base = {
        "process.roles": "broker,controller",
        "node.id": str(node.node_id),
        "controller.quorum.voters": voters,
        "listeners": ",".join([*listeners, f"CONTROLLER://127.0.0.1:{node.controller_port}"]),
        "advertised.listeners": ",".join(advertised),
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": inter_broker,
        "listener.security.protocol.map": ",".join(protocols),
        "log.dirs": str(node.folder / "data"),
        "offsets.topic.replication.factor": replication,
        "transaction.state.log.replication.factor": replication,
        "transaction.state.log.min.isr": "1" if size == 1 else "2",
        "share.coordinator.state.topic.replication.factor": replication,
        "share.coordinator.state.topic.min.isr": "1" if size == 1 else "2",
        "group.initial.rebalance.delay.ms": "0",
    }
    if size > 1:
        base["default.replication.factor"] = replication
        base["min.insync.replicas"] = "2"
    lines = {**base, **props, **dict(extra)}
    return "".join(f"{k}={v}\n" for k, v in lines.items())


# Armed in a ``preexec_fn``, the signal would need Python code between fork and exec in
# a process that may have other threads (a Kafka client's, Spark's): the interpreter's
# fork hooks and that code can wait on a lock another thread held at the fork. So a
# fresh interpreter arms it and then execs the command (the death signal survives
# exec), and ``Popen`` itself runs no Python around its fork.
_ARM_THEN_EXEC = (
    "import ctypes, os, sys\n"
    f"if ctypes.CDLL(None, use_errno=True).prctl({PR_SET_PDEATHSIG}, {int(signal.SIGKILL)}, 0, 0, 0)"
    " != 0 or os.getppid() != int(sys.argv[1]):\n"
    "    os._exit(1)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


def die_with_caller(argv: list[str]) -> list[str]:
    """``argv`` made to be SIGKILLed by the kernel when the thread that starts it ends
    (``PR_SET_PDEATHSIG``), whatever ends it: the guarantee that an attached broker never
    outlives a crashed caller. A caller already gone by the time the signal is armed (it
    would never come) makes the command exit with 1 before it runs. Start the result from
    the thread whose end should end it."""
    if not sys.platform.startswith("linux"):
        raise BrokerStartError(
            "an attached broker needs Linux (prctl PR_SET_PDEATHSIG); "
            "start it detached and stop it by its PID"
        )
    return [sys.executable, "-I", "-S", "-c", _ARM_THEN_EXEC, str(os.getpid()), *argv]


def _launch(node: Node, classpath: str, heap: tuple[str, ...], attached: bool,
            jvm: tuple[str, ...] = ()) -> None:
    argv = [
        "java",
        *heap,
        *jvm,
        "-XX:+UseSerialGC",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={node.folder / 'log4j2.properties'}",
        "-cp",
        classpath,
        "kafka.Kafka",
        str(node.folder / "server.properties"),
    ]
    with open(node.folder / "stdout.log", "ab") as out:
        node.process = subprocess.Popen(
            die_with_caller(argv) if attached else argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: kill -9 reaches all of it
        )


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
    classpath_extra: tuple[str, ...] = (),
    keep_data: bool = False,
) -> KafkaCluster:
    """Format and start ``size`` KRaft nodes under ``work_dir``; see the module docstring.
    ``port`` and ``sasl_port`` fix a single node's listeners (else free ports are drawn).
    ``node_extra`` maps a node id to settings of that node alone, over ``extra`` (a
    ``log.dirs`` on a small file system of its own, say).
    ``advertise(node)`` returns the port clients are told to use for a node's PLAINTEXT
    listener (a test's proxy in front of ``node.port``); the nodes then talk to each
    other over a listener of their own, so cutting a proxy cuts only clients.
    ``features`` sets feature levels at format time (``kafka-storage format --feature``;
    unnamed features get the release's defaults). ``classpath_extra`` adds folders or
    jars to every node's classpath (a plugin such as a metrics reporter), restarts
    included. ``keep_data``: nodes whose ``log.dirs`` a format already made start on
    them, with their topics (listeners and settings from this call); else every node
    is formatted."""
    classpath = os.pathsep.join([kafka_classpath(), *classpath_extra])
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
        _launch(node, classpath, heap, attached, _jvm_options(auth))
    try:
        wait_ready(cluster)
    except BaseException:
        cluster.stop()
        raise
    return cluster
