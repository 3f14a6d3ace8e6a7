"""Fixtures of the standalone-cluster tests: one cluster and one executor Python for the
folder's tests, stopped after its last one (an idle master and workers would cost the
rest of the run CPU)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster.cluster_harness import Cluster, ClusterError, make_exec_python, start_cluster, stop_cluster


@pytest.fixture(scope="package")
def exec_python(tmp_path_factory: pytest.TempPathFactory):
    """The executors' Python: the main venv's packages, but not pyspark_durable."""
    return make_exec_python(tmp_path_factory.mktemp("exec_python"))


@pytest.fixture(scope="package")
def cluster(tmp_path_factory: pytest.TempPathFactory, exec_python) -> Iterator[Cluster]:
    """A standalone master and two 1-core workers on 127.0.0.1, stopped by PID after the
    folder's last test."""
    try:
        running = start_cluster(tmp_path_factory.mktemp("standalone"), exec_python)
    except ClusterError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield running
    finally:
        stop_cluster(running)
