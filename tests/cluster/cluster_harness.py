"""A Spark standalone cluster on 127.0.0.1 for the tests: one master, two 1-core workers.

Everything comes from the installed pyspark wheel (``<pyspark>/bin/spark-class``); the
daemons' logs are read line by line from their pipes (a thread per daemon tees them
to a file), so start-up waits on the log lines themselves ("I have been elected
leader", "Registering worker" twice), never on a sleep. Stopping is by PID: SIGTERM,
then SIGKILL after a timeout, and the executors the workers started are ended too. The
daemons are attached (killed by the kernel when the thread that started them ends), so
a test run that is itself killed leaves no master or worker behind.

Executors run an "executor Python" that does NOT have pyspark_durable: a venv of the
main venv's base interpreter whose ``.pth`` file adds the main venv's site-packages
(pyarrow, fastavro, kafka-python, crc32c, pyspark, ...). A path line in a ``.pth`` adds
the directory but does not run the ``.pth`` files inside it, so the editable install's
finder of pyspark_durable stays out. The package reaches the cluster only as the job
ships it (``--py-files``).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

from pyspark_durable.showcase.localkafka.node import die_with_caller
from tests.helpers import free_port
from tests.spark.spark_settings import TEST_JVM

SPARK_HOME = Path(pyspark.__file__).parent
MAIN_PYTHON = Path(sys.executable)
START_TIMEOUT_S = 180.0  # a loaded 2-core machine starts three JVMs slowly
STOP_TIMEOUT_S = 20.0


class ClusterError(RuntimeError):
    """The cluster did not start (the message holds the daemons' logs)."""


class Daemon:
    """One daemon process whose stderr+stdout are teed to a file by a reader thread."""

    def __init__(self, name: str, argv: Sequence[str], env: dict, log_path: Path,
                 watch: dict[str, int]) -> None:
        self.name = name
        self.log_path = log_path
        self.counts = dict.fromkeys(watch, 0)
        self.events = {needle: threading.Event() for needle in watch}
        self._watch = watch
        self.exited = threading.Event()
        # attached: a test run killed with -9 takes its daemons with it, no orphan JVMs
        self.process = subprocess.Popen(die_with_caller(list(argv)), env=env,
                                        stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        text=True, errors="replace", start_new_session=True)
        self._thread = threading.Thread(target=self._pump, name=f"log-{name}", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        with open(self.log_path, "w") as log:
            for line in self.process.stdout:
                log.write(line)
                log.flush()
                for needle, wanted in self._watch.items():
                    if needle in line:
                        self.counts[needle] += 1
                        if self.counts[needle] >= wanted:
                            self.events[needle].set()
        self.exited.set()
        for event in self.events.values():  # wake any waiter: the daemon is gone
            event.set()

    def wait_for(self, needle: str, deadline: float) -> None:
        self.events[needle].wait(timeout=max(0.0, deadline - time.monotonic()))
        if self.counts[needle] < self._watch[needle]:
            state = "exited" if self.exited.is_set() else "still starting"
            raise ClusterError(f"{self.name} ({state}) never logged {needle!r} "
                               f"x{self._watch[needle]}")

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError as exc:
            return f"<no log: {exc}>"


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid:
            out.append(int(entry))
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def stop_pid(process: subprocess.Popen, timeout: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM the process, SIGKILL it if it is still there after ``timeout``."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=timeout)


def kill_pid(pid: int, sig: int = signal.SIGKILL) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


@dataclass
class Cluster:
    """A running standalone cluster; ``master_url`` is what ``--master`` takes."""

    master_port: int
    webui_port: int
    exec_python: Path
    root: Path
    master: Daemon
    workers: list[Daemon] = field(default_factory=list)
    seen_executors: set[int] = field(default_factory=set)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    def executor_pids(self) -> list[int]:
        """PIDs of the live executor JVMs (CoarseGrainedExecutorBackend) of our workers."""
        pids = [pid for w in self.workers for pid in _children(w.process.pid)
                if "CoarseGrainedExecutorBackend" in _cmdline(pid)]
        self.seen_executors.update(pids)
        return pids

    def running_tasks(self, pid: int) -> set[int]:
        """TIDs the executor JVM ``pid`` started and has not finished, from its own log."""
        argv = _cmdline(pid).split()
        try:
            app = argv[argv.index("--app-id") + 1]
            executor = argv[argv.index("--executor-id") + 1]
        except (ValueError, IndexError):
            return set()
        for worker in self.workers:
            log = worker.log_path.parent / worker.name / app / executor / "stderr"
            if log.exists():
                text = log.read_text(errors="replace")
                started = set(map(int, re.findall(r"Running task \S+ in stage \S+ \(TID (\d+)\)", text)))
                ended = set(map(int, re.findall(r"(?:Finished|Killed) task \S+ in stage \S+ \(TID (\d+)\)",
                                                text)))
                return started - ended
        return set()

    def env(self) -> dict[str, str]:
        """Environment of spark-submit: no PYTHONPATH leaking the package from the suite."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("PYSPARK_", "SPARK_")) and k != "PYTHONPATH"}
        env.update(SPARK_HOME=str(SPARK_HOME), SPARK_LOCAL_IP="127.0.0.1",
                   PYSPARK_PYTHON=str(self.exec_python),
                   PYSPARK_DRIVER_PYTHON=str(self.exec_python))
        return env

    def submit_argv(self, script: Path, args: Sequence[str], py_files: Sequence[Path] = (),
                    conf: dict[str, str] | None = None) -> list[str]:
        """``spark-submit`` of a job on this cluster; driver and executors run exec_python."""
        base = {
            "spark.ui.enabled": "false",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.pyspark.python": str(self.exec_python),
            "spark.pyspark.driver.python": str(self.exec_python),
            "spark.executor.memory": "512m",
            "spark.driver.extraJavaOptions": TEST_JVM,
            "spark.executor.extraJavaOptions": TEST_JVM,
            "spark.sql.streaming.stopTimeout": "30s",
        }
        base.update(conf or {})
        argv = [str(SPARK_HOME / "bin" / "spark-submit"), "--master", self.master_url]
        if py_files:
            argv += ["--py-files", ",".join(str(p) for p in py_files)]
        for key, value in base.items():
            argv += ["--conf", f"{key}={value}"]
        return [*argv, str(script), *args]

    def logs(self) -> str:
        parts = [f"--- {d.name} ({d.log_path}) ---\n{d.log_text()[-4000:]}"
                 for d in [self.master, *self.workers]]
        return "\n".join(parts)


def make_exec_python(root: Path) -> Path:
    """A venv without pyspark_durable that still imports the main venv's packages."""
    env_dir = root / "exec_env"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(env_dir)], check=True,
                   capture_output=True, text=True)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    main_site = sysconfig.get_paths()["purelib"]  # this (main) venv's site-packages
    (Path(purelib) / "main_venv_packages.pth").write_text(main_site + "\n")
    return python


def _daemon_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYSPARK_", "SPARK_")) and k != "PYTHONPATH"}
    env.update(SPARK_HOME=str(SPARK_HOME), SPARK_LOCAL_IP="127.0.0.1",
               SPARK_DAEMON_JAVA_OPTS=TEST_JVM, SPARK_DAEMON_MEMORY="256m")
    return env


def start_cluster(root: Path, exec_python: Path, workers: int = 2) -> Cluster:
    """Start the master, wait until it leads, start the workers, wait until both registered."""
    root.mkdir(parents=True, exist_ok=True)
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    env = _daemon_env()
    port, webui = free_port(), free_port()
    deadline = time.monotonic() + START_TIMEOUT_S
    master = Daemon("master", [spark_class, "org.apache.spark.deploy.master.Master",
                               "--host", "127.0.0.1", "--port", str(port),
                               "--webui-port", str(webui)],
                    env, root / "master.log",
                    {"I have been elected leader": 1, "Registering worker": workers})
    cluster = Cluster(port, webui, exec_python, root, master)
    try:
        master.wait_for("I have been elected leader", deadline)
        for i in range(workers):
            work_dir = root / f"worker{i}"
            work_dir.mkdir()
            cluster.workers.append(Daemon(
                f"worker{i}", [spark_class, "org.apache.spark.deploy.worker.Worker",
                               "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
                               "--webui-port", str(free_port()), "--work-dir", str(work_dir),
                               cluster.master_url],
                env, root / f"worker{i}.log", {"Successfully registered with master": 1}))
        master.wait_for("Registering worker", deadline)
        for worker in cluster.workers:
            worker.wait_for("Successfully registered with master", deadline)
    except ClusterError as exc:
        logs = cluster.logs()
        stop_cluster(cluster)
        raise ClusterError(f"{exc}\n{logs}") from None
    return cluster


def stop_cluster(cluster: Cluster) -> None:
    """Stop workers, then the master, by PID; then any executor JVM they left behind."""
    cluster.executor_pids()
    for worker in cluster.workers:
        stop_pid(worker.process)
    stop_pid(cluster.master.process)
    for pid in cluster.seen_executors:
        if Path(f"/proc/{pid}").exists() and "CoarseGrainedExecutorBackend" in _cmdline(pid):
            kill_pid(pid)
