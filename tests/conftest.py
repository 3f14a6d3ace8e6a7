"""Shared fixtures: one store factory per log backend, strict collection rules."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest
from kafka_broker import KafkaCluster, cluster_for_tests

from pyspark_durable.log import LogStore, open_store

# a test taking ``store_config`` (or ``make_store``) runs on each of these, unless its
# module sets ``BACKENDS``; the Kafka log is named by its client: "confluent"
# (confluent-kafka / librdkafka, the product's default) and "kafka-python"
KAFKA_CLIENTS = ("confluent", "kafka-python")
LOG_BACKENDS = ["file", "memory", *KAFKA_CLIENTS]


SLOW_MARKS = ("kafka", "spark", "crash")


@pytest.hookimpl(tryfirst=True)  # before -m deselects by the marks set here
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    """Refuse an empty run; mark ``quick`` every test that needs no broker, no Spark and
    kills nothing (the quick lane: ``pytest -m quick``), so the lane cannot drift."""
    for item in items:
        if not any(item.get_closest_marker(m) for m in SLOW_MARKS):
            item.add_marker(pytest.mark.quick)
    if not items:
        raise pytest.UsageError("no tests were collected: refusing a silent green run")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """A skipped test is never counted as done: turn every skip into a failure."""
    if report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped tests are not allowed here: {report.longrepr}"


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


@pytest.fixture
def namespace() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


StoreFactory = Callable[..., LogStore]


def backend_param(backend: str):
    """A backend as a test parameter; the Kafka ones (named by client) are marked
    ``kafka`` (the quick lane, ``-m quick``, starts no broker)."""
    return pytest.param(backend, marks=pytest.mark.kafka) if backend in KAFKA_CLIENTS \
        else backend


@pytest.fixture(params=["file", backend_param("confluent")])
def wal(request, tmp_path) -> dict:
    """Spark options (``format("durablewal")``) of a fresh namespace: on the file log,
    and on Kafka with the confluent client (the default; kafka-python's Spark path is
    covered by the tests that name it)."""
    ns = f"s{uuid.uuid4().hex[:10]}"
    if request.param == "file":
        return {"namespace": ns, "path": str(tmp_path / "wal")}
    broker = request.getfixturevalue("kafka_broker")
    return {"namespace": ns, "backend": "kafka", "kafka.bootstrap.servers": broker,
            "kafka.client": request.param}


@pytest.fixture
def store_config(request: pytest.FixtureRequest, tmp_path) -> tuple[str, dict]:
    backend = request.param
    if backend == "file":
        return backend, {"path": str(tmp_path / "wal"), "segment_size_bytes": 64 * 1024}
    if backend == "memory":
        return backend, {}
    if backend in KAFKA_CLIENTS:
        broker = request.getfixturevalue("kafka_broker")
        return "kafka", {"bootstrap_servers": broker, "client": backend}
    raise AssertionError(backend)


@pytest.fixture
def make_store(store_config, namespace) -> Iterator[StoreFactory]:
    """Open (and reopen) stores of one fresh namespace; closes them all at the end.

    A test using it runs once per backend of ``LOG_BACKENDS`` (file, memory, and the
    Kafka log on each client: ``[confluent]``, ``[kafka-python]``), or of its module's
    ``BACKENDS``; the test id names the backend."""
    backend, config = store_config
    opened: list[LogStore] = []

    def make(ns: str | None = None) -> LogStore:
        store = open_store(backend, ns or namespace, **config)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    named = [name.strip() for m in metafunc.definition.iter_markers("parametrize")
             for name in (m.args[0].split(",") if isinstance(m.args[0], str) else m.args[0])]
    if "store_config" in metafunc.fixturenames and "store_config" not in named:
        backends = getattr(metafunc.module, "BACKENDS", LOG_BACKENDS)
        metafunc.parametrize("store_config", [backend_param(b) for b in backends], indirect=True)
