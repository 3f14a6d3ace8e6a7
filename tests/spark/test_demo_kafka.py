"""``durablewal demo --backend kafka``: the main job on the broker of ``durablewal kafka start``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import free_port

pytestmark = [pytest.mark.spark, pytest.mark.crash, pytest.mark.kafka]

ROOT = Path(__file__).resolve().parent.parent.parent


def durablewal(env: dict, *args: object, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pyspark_durable", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )


def test_demo_runs_the_main_job_on_the_local_kafka_broker(tmp_path):
    """This tests that after `durablewal kafka start` (SASL on), `durablewal demo --backend
    kafka` runs the main job on that broker, through its SASL listener: the writer is
    killed and restarted, and the report says EXACTLY ONCE; the WAL it leaves is on the
    broker (the CLI lists it with the printed --kafka-config)."""
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    folder = tmp_path / "state" / "durablewal" / "kafka"
    sasl_port = free_port()
    started = durablewal(
        env, "kafka", "start", "--sasl", "--port", free_port(), "--sasl-port", sasl_port, timeout=300
    )
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        demo = durablewal(
            env, "demo", "--backend", "kafka", "--files", "4", "--rows", "100", "--kill-after", "2"
        )
        assert demo.returncode == 0, demo.stdout + demo.stderr[-3000:]
        out = demo.stdout
        assert f"orders -> WAL on Kafka 127.0.0.1:{sasl_port} (kafka backend" in out
        assert re.search(r"rows in\s+400\n\s+rows out\s+400\n\s+duplicates\s+0\n\s+lost\s+0", out)
        assert "killed the writer" in out and "EXACTLY ONCE" in out
        listed = durablewal(
            env,
            "steps",
            "--kafka-config",
            folder / "client.properties",
            "--namespace",
            "shop",
            "--json",
            timeout=120,
        )
        assert listed.returncode == 0, listed.stderr
        again = durablewal(env, "demo", "--backend", "kafka", timeout=120)
        assert again.returncode == 1 and "already holds namespace 'shop'" in again.stderr
    finally:
        stopped = durablewal(env, "kafka", "stop", timeout=120)
        assert stopped.returncode == 0, stopped.stderr
