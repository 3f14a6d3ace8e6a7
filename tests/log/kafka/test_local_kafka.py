"""``durablewal kafka start|stop|status``: a local Apache Kafka broker in one command, whose
printed options work as pasted, stopped by its PID; and no attached broker (the CLI's
``--foreground`` one, the test harness's) outlives a caller killed with ``kill -9``."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyspark_durable.endpoint import open_namespace, read_steps, write_step
from pyspark_durable.errors import ConfigError
from pyspark_durable.showcase.localkafka.service import client_settings
from tests.helpers import ROOT, free_port
from tests.kafka_maven import fetch_env, maven_repo, serve

pytestmark = pytest.mark.kafka

START_S = 240  # a JVM broker's start on 2 shared cores, jars resolved once


@pytest.fixture(scope="module", autouse=True)
def jars_without_internet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every `durablewal kafka start` here fetches Kafka's jars from the suite's Maven
    resolve (a file:// mirror) into a cache of this module's: no internet needed."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in fetch_env(tmp_path_factory.mktemp("jar-cache")).items():
            patch.setenv(name, value)
        yield


def durablewal(*args: object, timeout: float = START_S) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pyspark_durable", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def gone_within(pid: int, timeout_s: float) -> bool:
    """Wait for a process that is not our child to end (its pidfd becomes readable)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], timeout_s)[0])
    finally:
        os.close(fd)


def test_kafka_start_prints_working_options_and_stop_ends_it_by_pid(tmp_path):
    """This tests that `durablewal kafka start --sasl` returns with a running broker and
    prints options that work as printed (the CLI's --kafka-config file, the Python API's
    client_settings), never the password; `status` says it runs (exit 0); a PLAINTEXT
    client on its SASL port is told so within a second; `stop` ends it by its PID and
    `status` then exits 1."""
    folder, port, sasl_port = tmp_path / "kafka", free_port(), free_port()
    started = durablewal(
        "kafka", "start", "--dir", folder, "--sasl", "--port", port, "--sasl-port", sasl_port
    )
    state = json.loads((folder / "broker.json").read_text()) if started.returncode == 0 else {}
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        out = started.stdout
        password = client_settings(folder)["sasl.plain.password"]
        assert password not in out + started.stderr
        assert f'.option("kafka.bootstrap.servers", "127.0.0.1:{sasl_port}")' in out
        assert f"durablewal namespaces --kafka-config {folder}/client.properties" in out
        assert f"client_settings({str(folder)!r})" in out
        assert oct((folder / "client.properties").stat().st_mode & 0o777) == "0o600"
        status = durablewal("kafka", "status", "--dir", folder, "--json")
        assert status.returncode == 0 and json.loads(status.stdout)["pid"] == state["pid"]

        ns = open_namespace(
            {"backend": "kafka", "namespace": "shop", "options": client_settings(folder)}
        )  # as printed
        write_step(ns, "loader", 0, {"orders": [{"id": 1}]})
        assert read_steps(ns, "orders").column("id").to_pylist() == [1]
        ns.close()
        listed = durablewal("namespaces", "--kafka-config", folder / "client.properties")
        assert listed.returncode == 0 and listed.stdout.splitlines()[2].startswith("shop")
        assert password not in listed.stdout + listed.stderr

        plain = {"bootstrap_servers": f"127.0.0.1:{sasl_port}", "connect_timeout_ms": 20_000}
        open_namespace(
            {"backend": "kafka", "namespace": "shop", "options": {"bootstrap_servers": f"127.0.0.1:{port}"}},
            create=False,
        ).close()  # imports warm
        begin = time.monotonic()
        with pytest.raises(
            ConfigError,
            match=re.escape(
                "is a SASL listener and this client speaks PLAINTEXT: set security.protocol=SASL_PLAINTEXT"
            ),
        ):
            open_namespace({"backend": "kafka", "namespace": "shop", "options": plain}, create=False)
        assert time.monotonic() - begin < 1.0
    finally:
        stopped = durablewal("kafka", "stop", "--dir", folder, timeout=120)
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.startswith(f"stopped the Kafka broker (pid {state['pid']})")
    assert gone_within(state["pid"], 1.0)
    assert not (folder / "broker.json").exists()
    status = durablewal("kafka", "status", "--dir", folder)
    assert status.returncode == 1 and "no local Kafka broker runs from" in status.stdout


HARNESS_CHILD = """
import sys
from pathlib import Path
from tests.kafka_broker import start_broker
broker = start_broker(Path({folder!r}))
print(broker.nodes[0].pid, flush=True)
sys.stdin.read()  # until killed
"""


@pytest.mark.parametrize("caller", ["cli-foreground", "test-harness"])
def test_an_attached_broker_dies_with_a_caller_killed_by_sigkill(tmp_path, caller):
    """This tests that a broker started attached, by `durablewal kafka start --foreground`
    or by the tests' harness, is gone within seconds once its caller is killed with
    SIGKILL (no chance to clean up): no orphan keeps its port, memory and disk."""
    folder = tmp_path / "kafka"
    if caller == "cli-foreground":
        argv = [
            sys.executable,
            "-m",
            "pyspark_durable",
            "kafka",
            "start",
            "--foreground",
            "--dir",
            str(folder),
            "--port",
            str(free_port()),
        ]
    else:
        argv = [sys.executable, "-c", HARNESS_CHILD.format(folder=str(folder))]
    proc = subprocess.Popen(  # the harness child imports tests.kafka_broker from the repository
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        first = proc.stdout.readline()  # blocks until the broker serves (or the caller died)
        assert first, f"the caller exited with {proc.wait()} before the broker served"
        pid = (
            json.loads((folder / "broker.json").read_text())["pid"]
            if caller == "cli-foreground"
            else int(first)
        )
        assert not gone_within(pid, 0.1), "the broker is not running"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert gone_within(pid, 15.0), f"broker {pid} outlived its caller"
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def test_the_local_broker_keeps_its_data_across_stop_crash_and_a_stale_pid(tmp_path):
    """This tests that the local broker's data outlives it: a step written, `stop`, then
    `start` reads it back with the same saved client settings (SASL password kept); the
    broker killed with SIGKILL: `status` exits 1 saying it ended without `stop` and
    naming its log, and `start` again still reads the step; a broker.json whose PID was
    edited to another process never orphans the broker: `status` and `stop` find it by
    its folder; `start --fresh` says what it deletes and starts empty."""
    from pyspark_durable.errors import LogNotFound

    folder = tmp_path / "kafka"
    ports = ["--port", free_port(), "--sasl-port", free_port()]

    def start(*extra: object) -> str:
        done = durablewal("kafka", "start", "--dir", folder, "--sasl", *ports, *extra)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def pid() -> int:
        return json.loads((folder / "broker.json").read_text())["pid"]

    def steps() -> list[int]:
        ns = open_namespace({"backend": "kafka", "namespace": "kept",
                             "options": client_settings(folder)}, create=False)
        try:
            return read_steps(ns, "orders").column("id").to_pylist()
        finally:
            ns.close()

    try:
        assert "data: a new, empty broker" in start()
        ns = open_namespace({"backend": "kafka", "namespace": "kept",
                             "options": client_settings(folder)})
        write_step(ns, "loader", 0, {"orders": [{"id": 7}]})
        ns.close()
        saved = (folder / "client.properties").read_text()
        assert durablewal("kafka", "stop", "--dir", folder, timeout=120).returncode == 0
        assert "the broker's data from before, kept" in start()
        assert (folder / "client.properties").read_text() == saved
        assert steps() == [7]

        killed = pid()
        os.killpg(killed, signal.SIGKILL)
        assert gone_within(killed, 30.0)
        status = durablewal("kafka", "status", "--dir", folder)
        assert status.returncode == 1, status.stdout
        assert f"(pid {killed}, started" in status.stdout
        assert "ended without durablewal kafka stop" in status.stdout
        assert f"its log: {folder.resolve()}/node1/server.log" in status.stdout
        start()
        assert steps() == [7]

        real = pid()
        state = json.loads((folder / "broker.json").read_text())
        (folder / "broker.json").write_text(json.dumps({**state, "pid": os.getpid()}))
        status = durablewal("kafka", "status", "--dir", folder, "--json")
        assert status.returncode == 0 and json.loads(status.stdout)["pid"] == real
        assert durablewal("kafka", "stop", "--dir", folder, timeout=120).returncode == 0
        assert gone_within(real, 5.0)

        out = start("--fresh")
        assert "--fresh deleted the data of the broker before" in out
        with pytest.raises(LogNotFound):
            steps()
    finally:
        durablewal("kafka", "stop", "--dir", folder, timeout=120)


INSTALLED_ROUND_TRIP = """
import sys
import pyspark_durable
from pyspark_durable.endpoint import open_namespace, read_steps, write_step
from pyspark_durable.showcase.localkafka.service import client_settings
ns = open_namespace({"backend": "kafka", "namespace": "wheel",
                     "options": client_settings(sys.argv[1])})
write_step(ns, "loader", 0, {"orders": [{"id": 5}]})
print(read_steps(ns, "orders").column("id").to_pylist(), pyspark_durable.__file__)
ns.close()
"""


def installed_wheel(tmp_path: Path) -> Path:
    """The checkout's package as a pip install from an index has it: its tracked files
    built into a wheel, installed (not editable) into a new venv, whose bin/ is returned.
    The venv sees this venv's site-packages as a plain path (its .pth files not run), so
    the dependencies come from there and the package only from the wheel."""
    source = tmp_path / "source"
    tracked = subprocess.run(["git", "ls-files", "setup.py", "pyproject.toml", "README.md",
                              "pyspark_durable"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    for name in tracked:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_bytes((ROOT / name).read_bytes())
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                            tmp_path / "dist", source], capture_output=True, text=True,
                           timeout=600)
    assert built.returncode == 0, built.stdout + built.stderr[-3000:]
    [wheel] = (tmp_path / "dist").glob("pyspark_durable-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys._base_executable, "-m", "venv", venv], check=True)  # noqa: SLF001
    [site] = (venv / "lib").glob("python*/site-packages")
    (site / "_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    installed = subprocess.run([venv / "bin" / "python", "-m", "pip", "install", "-q",
                                "--no-deps", "--no-index", wheel], capture_output=True,
                               text=True, timeout=600)
    assert installed.returncode == 0, installed.stdout + installed.stderr[-3000:]
    return venv / "bin"


def test_kafka_start_from_a_wheel_fetches_the_jars_once_and_serves(tmp_path):
    """This tests that `durablewal kafka start` of the package installed from a wheel
    (no source checkout, no Maven) fetches Kafka's jars of its lock file from the Maven
    mirror DURABLEWAL_MAVEN_MIRROR names (a local http.server laid out as Maven Central,
    so no internet), saying first what and where in one line and that it is done in
    another; the broker serves a WAL round trip from the installed package and the CLI
    lists it; `stop` ends it; a second start fetches nothing."""
    from pyspark_durable.showcase.localkafka.jars import LOCK, megabytes, parse_lock

    locked = parse_lock(LOCK.read_text())
    cache = tmp_path / "cache" / "durablewal" / "kafka-jars" / "4.3.1"
    bin_ = installed_wheel(tmp_path)
    folder, port = tmp_path / "kafka", free_port()
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "DURABLEWAL_MAVEN_MIRROR")}
    env.update(XDG_STATE_HOME=str(tmp_path / "state"), XDG_CACHE_HOME=str(tmp_path / "cache"))

    def run(*args: object, timeout: float = START_S) -> subprocess.CompletedProcess:
        return subprocess.run([bin_ / "durablewal", *map(str, args)], capture_output=True,
                              text=True, env=env, cwd=tmp_path, timeout=timeout)

    with serve(maven_repo()) as url:
        env["DURABLEWAL_MAVEN_MIRROR"] = url
        started = run("kafka", "start", "--dir", folder, "--port", port)
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        first, last = started.stderr.splitlines()
        size = megabytes(sum(jar.size for jar in locked))
        assert first == (f"fetching Apache Kafka 4.3.1 from {url}: {len(locked)} jars, {size} "
                         f"(once; cached in {cache})")
        assert re.fullmatch(rf"fetched Apache Kafka 4\.3\.1: {len(locked)} jars, {size} in "
                            r"\d+\.\d s", last), last
        assert started.stdout.startswith("Kafka is running"), started.stdout
        assert sorted(p.name for p in cache.glob("*.jar")) == sorted(j.file_name for j in locked)
        trip = subprocess.run([bin_ / "python", "-c", INSTALLED_ROUND_TRIP, folder],
                              capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
        assert trip.returncode == 0, trip.stdout + trip.stderr[-3000:]
        assert trip.stdout.startswith(f"[5] {tmp_path / 'venv' / 'lib'}"), trip.stdout
        listed = run("namespaces", "--bootstrap-servers", f"127.0.0.1:{port}")
        assert listed.returncode == 0 and listed.stdout.splitlines()[2].startswith("wheel"), \
            listed.stdout + listed.stderr
    finally:
        stopped = run("kafka", "stop", "--dir", folder, timeout=120)
    assert stopped.returncode == 0 and stopped.stdout.startswith("stopped the Kafka broker")
    again = run("kafka", "start", "--dir", folder, "--port", port)  # the mirror is gone now
    run("kafka", "stop", "--dir", folder, timeout=120)
    assert again.returncode == 0 and again.stderr == "", again.stderr
