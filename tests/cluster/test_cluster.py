"""durablewal on a real Spark standalone cluster (a master, two workers, spark-submit).

The executors (and the spark-submit driver) run a Python that does NOT have
pyspark_durable installed: every test ships the package with the job, the way a user
deploys it (in ``--py-files``: a zip for the exactly-once test, a wheel for the split
read). The exactly-once test spark-submits ``cluster_job.py`` with a writer and a reader
on Kafka and on S3 at once, kills an executor JVM and then the whole driver with
SIGKILL, restarts from the same checkpoints and checks every row of each by content.
The split-read test has one large step read by the executors of both workers. The
no-register test is the other deployment: the package installed (from its wheel)
in the Python of the driver and of the executors, nothing shipped, nothing registered.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pyspark_durable.endpoint import open_namespace, read_steps
from pyspark_durable.log import open_store
from pyspark_durable.wal import Namespace
from tests.cluster.cluster_harness import MAIN_PYTHON, Cluster, make_exec_python
from tests.helpers import package_zip as make_package_zip
from tests.helpers import s3_options, s3_spark_options

pytestmark = pytest.mark.spark
HERE = Path(__file__).parent
REPO = HERE.parent.parent
JOB = HERE / "cluster_job.py"
SUBMIT_TIMEOUT_S = 420
MODULE_MISSING = "ModuleNotFoundError: No module named 'pyspark_durable'"


def payload(i: int) -> str:
    return f"row-{i}-" + "p" * (i % 13)


def write_inputs(in_dir: Path, files: int, rows: int) -> int:
    in_dir.mkdir(parents=True)
    for f in range(files):
        lines = [json.dumps({"id": f * rows + i, "payload": payload(f * rows + i)}) for i in range(rows)]
        (in_dir / f"{f:04d}.json").write_text("\n".join(lines) + "\n")
    return files * rows


def wal_options(backend: str, root: Path, broker: str | None,
                s3_server=None) -> tuple[dict, dict]:
    """(Spark options, endpoint config) of a fresh namespace."""
    ns = f"k{uuid.uuid4().hex[:10]}"
    if backend == "s3":  # the bucket every machine of a cluster reaches
        options = s3_options(s3_server)
        return ({"namespace": ns, **s3_spark_options(options)},
                {"backend": "s3", "namespace": ns, "options": options})
    if backend == "file":
        path = str(root / "wal")
        return {"namespace": ns, "path": path}, {"backend": "file", "namespace": ns,
                                                  "options": {"path": path}}
    return ({"namespace": ns, "backend": "kafka", "kafka.bootstrap.servers": broker},
            {"backend": "kafka", "namespace": ns, "options": {"bootstrap_servers": broker}})


class Job:
    """One spark-submit of cluster_job.py in its own process group; stdout read line by line."""

    def __init__(self, cluster: Cluster, mode: str, wal: dict, root: Path, py_files, conf,
                 run: str, gate: str = "") -> None:
        self.stderr_path = root / f"{run}.stderr"
        args = [mode, json.dumps(wal), str(root / "in"), str(root / "out"), str(root / "ckpt")]
        argv = cluster.submit_argv(JOB, args + ([gate] if gate else []), py_files=py_files,
                                   conf=conf)
        self._stderr = open(self.stderr_path, "w")  # a file: a full pipe would block Spark
        self.proc = subprocess.Popen(argv, cwd=root, env=cluster.env(), stdout=subprocess.PIPE,
                                     stderr=self._stderr, stdin=subprocess.DEVNULL, text=True,
                                     start_new_session=True)
        self.lines: list[str] = []

    def __iter__(self):
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            yield self.lines[-1]

    def kill_group(self) -> None:
        """SIGKILL the driver's whole process group (spark-submit, JVM, Python driver)."""
        os.killpg(self.proc.pid, signal.SIGKILL)

    def finish(self) -> int:
        for _ in self:  # drain what is left
            pass
        rc = self.proc.wait(timeout=SUBMIT_TIMEOUT_S)
        self._stderr.close()
        return rc

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def value(self, key: str) -> str:
        found = [ln.split(" ", 1)[1] for ln in self.lines if ln.startswith(key + " ")]
        assert found, f"no {key} line in {self.lines}\n{self.stderr()[-3000:]}"
        return found[-1]

    def result(self) -> dict:
        return json.loads(self.value("RESULT"))


def run_to_end(cluster, mode, wal, root, py_files, conf, run) -> Job:
    job = Job(cluster, mode, wal, root, py_files, conf, run)
    rc = job.finish()
    assert rc == 0, f"{run}: exit {rc}\n{job.lines}\n{job.stderr()[-5000:]}"
    return job


# ---------------------------------------------------------------- artifacts


@pytest.fixture(scope="module")
def package_zip(tmp_path_factory) -> Path:
    """pyspark_durable.zip, as ``cd REPO && zip -r pyspark_durable.zip pyspark_durable``."""
    return make_package_zip(tmp_path_factory.mktemp("zip") / "pyspark_durable.zip")


@pytest.fixture(scope="module")
def package_wheel(tmp_path_factory) -> Path:
    """A pure-Python wheel, as ``pip wheel --no-deps . -w dist``, built from a copy of the sources.

    (A copy: setuptools writes build/ and *.egg-info next to setup.py.)
    """
    root = tmp_path_factory.mktemp("wheel")
    src = root / "pyspark_durable_src"
    src.mkdir()
    shutil.copytree(REPO / "pyspark_durable", src / "pyspark_durable",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    done = subprocess.run([str(MAIN_PYTHON), "-m", "pip", "wheel", "-q", "--no-deps", str(src),
                           "-w", str(root / "dist")], capture_output=True, text=True, cwd=root)
    assert done.returncode == 0, done.stdout + done.stderr
    wheels = list((root / "dist").glob("pyspark_durable-*-py3-none-any.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_executor_python_lacks_the_package(exec_python, tmp_path):
    """This tests that the executors' Python imports pyarrow and pyspark but not pyspark_durable."""
    code = "import pyarrow, pyspark, fastavro, kafka, crc32c, yaml; import pyspark_durable"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([str(exec_python), "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 1
    assert MODULE_MISSING in done.stderr, done.stderr
    assert "ModuleNotFoundError" not in done.stderr.replace(MODULE_MISSING, "")


# ---------------------------------------------------------------- recipes



def check_origin(job: Job, artifact: Path) -> None:
    """The package came from the shipped artifact, on the driver and on the executors."""
    assert artifact.name in job.value("DRIVER_MODULE"), job.value("DRIVER_MODULE")
    executor_modules = job.value("EXECUTOR_MODULE")
    assert artifact.name in executor_modules and str(REPO) not in executor_modules


# The recipes (--py-files with spark.executorEnv.PYTHONPATH pointing at the same file: a
# zip, a wheel) are what the exactly-once test and the split-read test deploy with.


# ---------------------------------------------------------------- exactly once under kills

KILL_FILES, KILL_ROWS = 8, 50
EXECUTOR_KILL_FILE = 2  # the sink task writing this input file is held, and its executor killed
DRIVER_KILL_AFTER = 2  # more sink micro-batches, then kill -9 the driver's process group


class Gate:
    """The test's end of cluster_job.py's gate: a FIFO that the held sink task writes its
    executor's pid into; a thread reads it, checks that the executor runs a task and
    kills it with SIGKILL."""

    def __init__(self, cluster: Cluster, root: Path, row_id: int) -> None:
        self.fifo = root / "gate.fifo"
        os.mkfifo(self.fifo)
        self.arg = f"{self.fifo}:{row_id}"
        self.cluster = cluster
        self.killed: int | None = None
        self.running: set[int] = set()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._kill, daemon=True)
        self.thread.start()

    def _kill(self) -> None:
        with open(self.fifo) as fifo:  # blocks until the held task opens it
            line = fifo.readline()
        self.fifo.unlink()  # the retry (and any later task) passes
        if line.strip():
            pid = int(line)
            self.running = self.cluster.running_tasks(pid)
            os.kill(pid, signal.SIGKILL)
            self.killed = pid
        self.done.set()

    def close(self) -> None:
        """Releases the reader thread if no task ever came to the gate."""
        if not self.done.is_set() and self.fifo.exists():
            fd = os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
        self.thread.join(timeout=30)


def parquet_rows(out_dir: Path) -> list[dict]:
    """The parquet sink's committed output: only the files its _spark_metadata log lists."""
    files: set[str] = set()
    for log in sorted((out_dir / "_spark_metadata").iterdir()):
        if log.name.startswith("."):
            continue
        for line in log.read_text().splitlines()[1:]:  # "v1", then one JSON entry per file
            entry = json.loads(line)
            if entry["action"] == "add":
                files.add(entry["path"].removeprefix("file://"))
    rows: list[dict] = []
    for path in sorted(files):
        rows.extend(pq.read_table(path, columns=["id", "payload", "_step"]).to_pylist())
    return rows


@pytest.mark.crash
@pytest.mark.s3
def test_exactly_once_across_executor_and_driver_kills(cluster, package_zip, kafka_broker,
                                                       s3_server, tmp_path):
    """This tests that JSON -> durablewal -> parquet on the cluster, on each backend a
    cluster of several machines shares (Kafka and S3: a file WAL needs a path every node
    shares, and its kills are the local Spark crash test's), all in one application
    deployed with a zip in --py-files, with one executor JVM killed while a sink task is
    held inside a micro-batch, and then the driver SIGKILLed and restarted, holds every
    row exactly once in each WAL and each parquet output, and that the package came from
    the shipped file. (The wheel in --py-files is the split-read test's recipe.)"""
    rng = random.Random(zlib.crc32(b"kafka and s3"))
    total = write_inputs(tmp_path / "in", KILL_FILES, KILL_ROWS)
    pairs, configs = {}, {}
    for name in ("kafka", "s3"):
        pairs[name], configs[name] = wal_options(name, tmp_path, kafka_broker, s3_server)
    ship = {"py_files": [package_zip], "conf": {"spark.executorEnv.PYTHONPATH": str(package_zip)}}
    gated = next(iter(pairs))  # the pair whose sink task is held at the gate

    # run 1: kill the executor of the held sink task, let the queries go on, then kill the
    # driver
    gate = Gate(cluster, tmp_path, EXECUTOR_KILL_FILE * KILL_ROWS)
    job = Job(cluster, "stream", pairs, tmp_path, run="run1", gate=gate.arg, **ship)
    sink_batches = 0
    driver_killed = killed_at = None
    try:
        for line in job:
            if not line.startswith(f"BATCH sink-{gated} ") or int(line.split()[3]) == 0:
                continue
            sink_batches += 1
            if killed_at is None and gate.done.is_set():
                killed_at = sink_batches
            elif killed_at is not None and sink_batches >= killed_at + DRIVER_KILL_AFTER:
                time.sleep(rng.uniform(0.0, 0.5))  # land anywhere in the next micro-batch
                job.kill_group()
                driver_killed = sink_batches
                break
        rc = job.finish()
    finally:
        gate.close()
    executor_killed, killed_in_task = gate.killed, gate.running
    assert executor_killed, f"no sink task came to the gate\n{job.lines}\n{job.stderr()[-5000:]}"
    assert killed_in_task, "the held task's executor showed no running task"
    assert driver_killed, f"run 1 ended (exit {rc}) before the driver kill\n{job.lines}\n" \
                          f"{job.stderr()[-5000:]}"
    app = job.value("APP")
    # the queries survived the executor loss (more batches after it) and the worker
    # relaunched one
    master_log = cluster.master.log_text()
    assert f"Launching executor {app}/2 " in master_log, master_log[-3000:]
    assert executor_killed not in cluster.executor_pids()

    # run 2: restart from the same checkpoints, run to the end of the input
    job2 = run_to_end(cluster, "stream", pairs, tmp_path, run="run2", **ship)
    once = {"wal_rows": total, "wal_distinct_ids": total, "out_rows": total,
            "out_distinct_ids": total}
    assert job2.result() == dict.fromkeys(pairs, once)
    check_origin(job2, package_zip)
    for name, config in configs.items():
        check_once_by_content(name, config, tmp_path / "out" / name, total)
    print(f"executor {executor_killed} killed after {gated} sink batch {killed_at} while "
          f"running task(s) {sorted(killed_in_task)}, driver killed after {gated} sink batch "
          f"{driver_killed}; {total} rows once on {', '.join(pairs)}", file=sys.stderr)


def check_once_by_content(name: str, config: dict, out_dir: Path, total: int) -> None:
    """Every id once in the WAL and in the parquet output, by content; no batch committed
    twice; a step is whole input files."""
    ns = open_namespace(config)
    try:
        got = read_steps(ns, "default")
        writer_steps = [ns.step_commit(s).writer_step for s in ns.steps()]
    finally:
        ns.close()
    ids = got.column("id").to_pylist()
    assert sorted(ids) == list(range(total)), f"{name} WAL: lost or duplicated rows"
    assert got.column("payload").to_pylist() == [payload(i) for i in ids], name
    assert len(writer_steps) == len(set(writer_steps)), \
        f"{name}: a batch committed twice: {writer_steps}"
    step_of = dict(zip(ids, got.column("_step").to_pylist(), strict=True))
    # a step is whole input files: one per micro-batch, except that Spark's file source
    # puts two files in the first batch after a driver killed between recording a file
    # (sources/0/N) and the batch's offsets (offsets/M)
    files_of: dict[int, set[int]] = {}
    for i, step in step_of.items():
        files_of.setdefault(step, set()).add(i // KILL_ROWS)
    for step, files in files_of.items():
        ids_in = sorted(i for i, s in step_of.items() if s == step)
        assert ids_in == [i for f in sorted(files) for i in range(f * KILL_ROWS,
                                                                 (f + 1) * KILL_ROWS)], (name, step)
    assert KILL_FILES - 1 <= len(writer_steps) <= KILL_FILES, \
        f"{name} steps of files: {sorted(files_of.items())}"

    out = parquet_rows(out_dir)
    assert sorted(r["id"] for r in out) == list(range(total)), \
        f"{name} parquet: lost or duplicated rows"
    assert all(r["payload"] == payload(r["id"]) for r in out), name
    assert all(r["_step"] == step_of[r["id"]] for r in out), name


# ---------------------------------------------------------------- a split read on both workers

SPLIT_ROWS = 200_000
SPLIT_TASKS = 6  # minPartitions: three tasks per 1-core executor
SPLIT_ENTRY_BYTES = 64 * 1024  # ~2,400 rows an entry: windows fine enough for 6 tasks


def test_a_split_read_is_read_by_both_workers(cluster, package_wheel, tmp_path):
    """This tests that one large step in one region, read in a batch on the cluster with
    minPartitions=6, is split into at least 6 tasks that the executors of both workers
    run, each reading a good share of the rows (the executor is the JVM above each
    task's Python worker, told apart by its work dir under its worker's), and that the
    tasks together read every row once, by content."""
    wal, _ = wal_options("file", tmp_path, None)
    ns = Namespace(open_store("file", wal["namespace"], path=wal["path"]),
                   entry_max_bytes=SPLIT_ENTRY_BYTES)
    try:
        attempt = ns.begin("bulk", 0)
        attempt.write("default", pa.table({
            "id": pa.array(range(SPLIT_ROWS), pa.int64()),
            "payload": pa.array([payload(i) for i in range(SPLIT_ROWS)], pa.string())}),
            region_id=0)
        attempt.commit()
        commit = ns.step_commit(0)
    finally:
        ns.close()
    assert {r.region_id for r in commit.runs} == {0}
    assert sum(r.entries for r in commit.runs) >= 4 * SPLIT_TASKS

    # both 1-core executors registered before the read is planned, so that a slow
    # second executor cannot leave the whole read to the first
    conf = {"spark.executorEnv.PYTHONPATH": str(package_wheel), "spark.cores.max": "2",
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
            "spark.scheduler.maxRegisteredResourcesWaitingTime": "180s"}
    started = time.monotonic()
    job = run_to_end(cluster, "read", {**wal, "minPartitions": str(SPLIT_TASKS)}, tmp_path,
                     [package_wheel], conf, "split_read")
    took = time.monotonic() - started
    check_origin(job, package_wheel)
    result = job.result()
    assert result["partitions"] >= SPLIT_TASKS and result["executors"] == 2, result

    got = pq.read_table(tmp_path / "out").to_pylist()
    ids = sorted(r["id"] for r in got)
    assert ids == list(range(SPLIT_ROWS)), "lost or duplicated rows"
    assert all(r["payload"] == payload(r["id"]) for r in got)

    app = job.value("APP")
    workers = {(cluster.root / w.name).resolve() for w in cluster.workers}
    assert len(workers) == 2
    worker_of: dict[str, Path] = {}  # executor id -> its worker's work dir
    executor_of: dict[int, str] = {}  # partition -> the executor whose task read it
    for r in got:
        work_dir = Path(r["work_dir"])
        assert work_dir.parent.name == app and work_dir.name == r["executor"], r
        assert worker_of.setdefault(r["executor"], work_dir.parent.parent) == \
            work_dir.parent.parent
        assert executor_of.setdefault(r["partition"], r["executor"]) == r["executor"], \
            f"partition {r['partition']} read by two executors"
    assert len(executor_of) >= SPLIT_TASKS, f"{len(executor_of)} tasks read rows"
    rows_of: dict[Path, int] = dict.fromkeys(workers, 0)
    tasks_of: dict[Path, int] = dict.fromkeys(workers, 0)
    for r in got:
        rows_of[worker_of[r["executor"]]] += 1
    for executor in executor_of.values():
        tasks_of[worker_of[executor]] += 1
    assert set(worker_of.values()) == workers, f"read only on {set(worker_of.values())}"
    assert len(worker_of) == 2, worker_of
    assert min(rows_of.values()) >= SPLIT_ROWS // 10, rows_of  # not one task's crumbs
    print(f"split read: {result['partitions']} partitions; per worker (executor): "
          + ", ".join(f"{w.name} ({e}): {tasks_of[w]} tasks, {rows_of[w]} rows"
                      for e, w in sorted(worker_of.items()))
          + f"; {took:.1f} s", file=sys.stderr)


# ---------------------------------------------------------------- installed: no register

INSTALLED_ROWS = 6_000
INSTALLED_PARTITIONS = 4  # the write's tasks: two per 1-core executor


@pytest.fixture(scope="module")
def installed_python(tmp_path_factory, package_wheel) -> Path:
    """A Python with pyspark_durable installed from its wheel, as ``pip install
    pyspark_durable`` installs it, and the main venv's other packages (the executor
    Python's recipe). Not the main venv's Python itself: the suite installs the package
    editable, whose import hook Spark's lookup of pyspark_* packages does not see."""
    python = make_exec_python(tmp_path_factory.mktemp("installed_python"))
    done = subprocess.run([str(MAIN_PYTHON), "-m", "pip", "--python", str(python), "install", "-q",
                           "--no-deps", "--no-index", str(package_wheel)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return python


def test_an_installed_package_needs_no_register_on_the_cluster(cluster, installed_python,
                                                               tmp_path):
    """This tests that a spark-submit on the cluster whose driver and executors run a
    Python with pyspark_durable installed, with no --py-files and no register call,
    writes a DataFrame of 4 partitions with df.write.format("durablewal") (its tasks run
    by the executors of both workers) and reads it back with spark.read.format("durablewal")
    in a new session, every row once by content: Spark found the DataSource by itself,
    as nothing had imported the package into the driver before the write."""
    wal, config = wal_options("file", tmp_path, None)
    python = str(installed_python)
    # the driver JVM looks the data sources up with PYSPARK_(DRIVER_)PYTHON of its
    # environment; the Python driver and the executors' workers take the confs
    env = {**cluster.env(), "PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python}
    conf = {"spark.pyspark.python": python, "spark.pyspark.driver.python": python,
            "spark.cores.max": "2", "spark.scheduler.minRegisteredResourcesRatio": "1.0",
            "spark.scheduler.maxRegisteredResourcesWaitingTime": "180s"}
    argv = cluster.submit_argv(JOB, ["installed", json.dumps(wal), str(tmp_path / "out"),
                                     str(INSTALLED_ROWS), str(INSTALLED_PARTITIONS)], conf=conf)
    assert "--py-files" not in argv and "PYTHONPATH" not in env
    assert not any("PYTHONPATH" in arg for arg in argv), argv
    started = time.monotonic()
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=SUBMIT_TIMEOUT_S)
    took = time.monotonic() - started
    lines = done.stdout.splitlines()
    assert done.returncode == 0, f"exit {done.returncode}\n{lines}\n{done.stderr[-5000:]}"

    def value(key: str) -> str:
        found = [ln.split(" ", 1)[1] for ln in lines if ln.startswith(key + " ")]
        assert found, f"no {key} line in {lines}\n{done.stderr[-3000:]}"
        return found[-1]

    assert json.loads(value("IMPORTED_BEFORE_WRITE")) is False, "the job imported pyspark_durable"
    site = str(installed_python.parent.parent)  # the package came from the installed one
    executor_modules = json.loads(value("EXECUTOR_MODULE"))
    assert executor_modules and all(m.startswith(site) for m in executor_modules), executor_modules
    assert json.loads(value("RESULT")) == {"partitions": INSTALLED_PARTITIONS}

    # the new session's read, by content, with the task that wrote each row
    got = pq.read_table(tmp_path / "out").to_pylist()
    assert sorted(r["id"] for r in got) == list(range(INSTALLED_ROWS)), "lost or duplicated rows"
    assert all(r["payload"] == payload(r["id"]) for r in got)
    app = value("APP")
    workers = {(cluster.root / w.name).resolve() for w in cluster.workers}
    executor_of: dict[int, str] = {}  # partition -> the executor whose task wrote it
    worker_of: dict[str, Path] = {}  # executor id -> its worker's work dir
    for r in got:
        work_dir = Path(r["work_dir"])  # <worker work dir>/<app id>/<executor id>
        assert work_dir.parent.name == app and work_dir.name == r["executor"], r
        assert work_dir.parent.parent in workers, r
        assert executor_of.setdefault(r["partition"], r["executor"]) == r["executor"], r
        worker_of[r["executor"]] = work_dir.parent.parent
    assert sorted(executor_of) == list(range(INSTALLED_PARTITIONS)), executor_of
    assert set(worker_of.values()) == workers, f"written only on {set(worker_of.values())}"

    # and the WAL itself, read with the Python API
    ns = open_namespace(config)
    try:
        wal_rows = read_steps(ns, "default").select(["id", "payload"]).to_pylist()
    finally:
        ns.close()
    assert sorted(r["id"] for r in wal_rows) == list(range(INSTALLED_ROWS))
    assert all(r["payload"] == payload(r["id"]) for r in wal_rows)
    print(f"installed: {INSTALLED_ROWS} rows written by {INSTALLED_PARTITIONS} tasks on executors "
          f"{sorted(worker_of)}, read back in a new session; {took:.1f} s", file=sys.stderr)
