"""Fixtures of the standalone-cluster tests: one cluster and one executor Python per session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster.cluster_harness import Cluster, ClusterError, make_exec_python, start_cluster, stop_cluster


@pytest.fixture(scope="session")
def exec_python(tmp_path_factory: pytest.TempPathFactory):
    """The executors' Python: the main venv's packages, but not pyspark_durable."""
    return make_exec_python(tmp_path_factory.mktemp("exec_python"))


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory, exec_python) -> Iterator[Cluster]:
    """A standalone master and two 1-core workers on 127.0.0.1, stopped by PID at the end."""
    try:
        running = start_cluster(tmp_path_factory.mktemp("standalone"), exec_python)
    except ClusterError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield running
    finally:
        stop_cluster(running)
