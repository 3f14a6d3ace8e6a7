"""No ``register`` call where the package is installed: Spark 4 finds its DefaultSource."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import pyspark_durable
from pyspark_durable.spark import DurableWalDataSource

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("autoregister_child.py")


def test_default_source_is_the_data_source():
    """This tests that the package exposes the durablewal data source as DefaultSource,
    the name Spark's lookup of installed pyspark_* packages asks for."""
    assert pyspark_durable.DefaultSource is DurableWalDataSource
    assert DurableWalDataSource.name() == "durablewal"


def test_a_new_session_reads_and_writes_without_register(tmp_path):
    """This tests that a new Spark session whose Python finds pyspark_durable on a plain
    sys.path entry (as an installed package is found) writes, reads and streams
    format("durablewal") without ever calling register."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYSPARK_PYTHON": sys.executable}
    proc = subprocess.run([sys.executable, str(CHILD), str(tmp_path)], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    assert "ROWS [(0, 0), (1, 2), (2, 4), (3, 6), (4, 8)]" in proc.stdout, proc.stdout
    assert "STREAMED 5" in proc.stdout, proc.stdout
