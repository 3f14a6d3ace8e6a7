"""Spark Connect servers (separate JVMs on 127.0.0.1) and Connect clients for the tests.

``connect_server``: a server whose Python workers run /work/main/.venv's interpreter,
where pyspark_durable is installed. ``bare_connect_server``: a server whose Python has
pyarrow, pyspark and the rest but not pyspark_durable (an "exec env": a venv of the
base interpreter whose .pth file adds the project venv's site-packages, which skips
the editable install's own .pth), to see what ``spark.addArtifacts`` ships.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest

from pyspark_durable.showcase.localkafka.node import die_with_caller
from tests.helpers import free_port, wait_until
from tests.helpers import package_zip as make_package_zip

PYSPARK_HOME = Path(pyspark.__file__).parent
CONNECT_JAR = PYSPARK_HOME / "jars" / "spark-connect_2.13-4.3.0.jar"
PACKAGE_DIR = Path(__file__).resolve().parents[2] / "pyspark_durable"
CLIENT = Path(__file__).with_name("connect_client.py")
START_TIMEOUT_S = 180.0
POLL_S = 0.2
REQUEST_TIMEOUT_S = 300.0


class ConnectServer:
    """One SparkConnectServer JVM (spark-submit execs java: the PID is the JVM's)."""

    def __init__(self, python: str, workdir: Path, extra_env: dict | None = None) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.log_path = workdir / "server.log"
        env = {**os.environ, "SPARK_HOME": str(PYSPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
               "PYSPARK_PYTHON": python, **(extra_env or {})}
        env.pop("PYSPARK_DRIVER_PYTHON", None)
        env.pop("SPARK_CONNECT_MODE_ENABLED", None)
        cmd = [str(PYSPARK_HOME / "bin" / "spark-submit"),
               "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
               "--name", "durablewal-connect-tests", "--master", "local[2]",
               "--conf", f"spark.connect.grpc.binding.port={self.port}",
               "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
               "--conf", "spark.ui.enabled=false",
               "--conf", "spark.sql.shuffle.partitions=2",
               "--conf", "spark.sql.session.timeZone=UTC",
               "--conf", "spark.driver.extraJavaOptions=-Dlog4j2.level=warn",
               "spark-internal"]
        with open(self.log_path, "wb") as log:
            # cwd outside the repository: a worker's sys.path[0] must not find ./pyspark_durable
            # attached: a test run killed with -9 takes its server with it, no orphan JVM
            self.process = subprocess.Popen(die_with_caller(cmd), cwd=workdir, env=env, stdout=log,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError as exc:
            return f"<no server log: {exc}>"

    def listening(self) -> bool:
        """Whether the server accepts connections; fails the test if it exited."""
        if self.process.poll() is not None:
            pytest.fail(f"Connect server exited with {self.process.returncode}:\n{self.log_tail()}",
                        pytrace=False)
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=POLL_S):
                return True
        except OSError:
            return False

    def wait_ready(self) -> ConnectServer:
        try:  # the server announces nothing: ask its port
            wait_until(self.listening, "the Connect server to listen", START_TIMEOUT_S,
                       interval_s=POLL_S)
        except AssertionError as exc:
            self.stop()
            pytest.fail(f"{exc}:\n{self.log_tail()}", pytrace=False)
        return self

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)


class ConnectClient:
    """connect_client.py in a subprocess, with one Connect session for every request."""

    def __init__(self, python: str, workdir: Path) -> None:
        self.log_path = workdir / f"client-{uuid.uuid4().hex[:6]}.log"
        env = {k: v for k, v in os.environ.items()
               if k not in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE")}
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen([python, str(CLIENT)], cwd=workdir, env=env,
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=log, text=True)

    def call(self, op: str, **args) -> dict:
        """The answer to one request: {"ok": True, "result": ...} or the error."""
        self.process.stdin.write(json.dumps({"op": op, "args": args}) + "\n")
        self.process.stdin.flush()
        for line in self.process.stdout:
            if line.startswith("@@ "):
                return json.loads(line[3:])
        tail = self.log_path.read_text(errors="replace")[-4000:]
        pytest.fail(f"Connect client died during {op!r}:\n{tail}", pytrace=False)

    def ok(self, op: str, **args):
        answer = self.call(op, **args)
        assert answer["ok"], f"{op} failed: {answer['error']}: {answer['traceback']}"
        return answer["result"]

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)


@pytest.fixture(scope="package")
def connect_servers(request, tmp_path_factory) -> Iterator[dict[str, ConnectServer]]:
    """Both servers, started at once (their JVM start-ups overlap); each test waits for its
    own. Stopped after the folder's last test (an idle server costs the rest of the run CPU).

    The bare server starts only when a collected test needs it.
    """
    assert CONNECT_JAR.is_file(), f"the spark-connect jar is not in the pyspark wheel: {CONNECT_JAR}"
    # an editable install (pip install -e, as the suite's) is invisible to the module scan
    # by which Spark finds pyspark_* data sources: PYTHONPATH shows the package to it, as
    # a regular install does
    servers = {"installed": ConnectServer(sys.executable, tmp_path_factory.mktemp("connect_server"),
                                          {"PYTHONPATH": str(PACKAGE_DIR.parent)})}
    if any("bare_connect_server" in item.fixturenames for item in request.session.items):
        python = request.getfixturevalue("exec_env_python")
        servers["bare"] = ConnectServer(python, tmp_path_factory.mktemp("bare_connect_server"))
    yield servers
    for server in servers.values():
        server.stop()


@pytest.fixture(scope="package")
def connect_server(connect_servers) -> ConnectServer:
    """The server whose Python has pyspark_durable installed (the supported set-up)."""
    return connect_servers["installed"].wait_ready()


@pytest.fixture(scope="package")
def connect(connect_server: ConnectServer, tmp_path_factory) -> Iterator[ConnectClient]:
    """A Connect client of connect_server with durablewal registered by register(spark)."""
    client = ConnectClient(sys.executable, tmp_path_factory.mktemp("connect_client"))
    client.session_type = client.ok("connect", url=connect_server.url)["session"]
    yield client
    client.close()
    assert connect_server.process.poll() is None, connect_server.log_tail()


@pytest.fixture
def make_client(tmp_path) -> Iterator:
    """Open more Connect clients (the project venv's Python); closed at the end of the test."""
    clients: list[ConnectClient] = []

    def make() -> ConnectClient:
        clients.append(ConnectClient(sys.executable, tmp_path))
        return clients[-1]

    yield make
    for client in clients:
        client.close()


@pytest.fixture(scope="package")
def exec_env_python(tmp_path_factory) -> str:
    """A Python with the project venv's packages except pyspark_durable itself."""
    root = tmp_path_factory.mktemp("exec_env")
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(root / "env")], check=True)
    python = str(root / "env" / "bin" / "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    Path(site, "project_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    probe = subprocess.run([python, "-c", "import pyarrow, pyspark, fastavro; import pyspark_durable"],
                           cwd=root, capture_output=True, text=True)
    assert "No module named 'pyspark_durable'" in probe.stderr, probe
    return python


@pytest.fixture(scope="package")
def bare_connect_server(connect_servers) -> ConnectServer:
    """The server whose Python lacks pyspark_durable."""
    return connect_servers["bare"].wait_ready()


@pytest.fixture(scope="package")
def package_zip(tmp_path_factory) -> str:
    """pyspark_durable as a zip, as for --py-files or addArtifacts(pyfile=True)."""
    return str(make_package_zip(tmp_path_factory.mktemp("artifact") / "pyspark_durable.zip"))
