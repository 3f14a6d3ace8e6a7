"""``durablewal demo --backend kafka --kill-at random``: the main job on the broker of
``durablewal kafka start``, killed at a random moment (the README's main job, killed
inside a micro-batch on the file log, is tests/spark/test_readme.py's)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import free_port
from tests.kafka_maven import fetch_env

pytestmark = [pytest.mark.spark, pytest.mark.crash, pytest.mark.kafka]

ROOT = Path(__file__).resolve().parent.parent.parent
# a batch replayed after the kill (committed to the WAL, not yet to Spark's checkpoint)
REPLAY_LINE = re.compile(r"^  micro-batch +(\d+) replayed -> step +(\d+) was already committed",
                         re.M)


def durablewal(env: dict, *args: object, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pyspark_durable", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )


def test_demo_runs_the_main_job_on_the_local_kafka_broker_at_a_random_kill(tmp_path):
    """This tests that after `durablewal kafka start` (SASL on), `durablewal demo --backend
    kafka --kill-at random` runs the main job on that broker, through its SASL listener:
    the writer is killed and restarted, and the report says EXACTLY ONCE; the WAL it
    leaves is on the broker (the CLI lists it with the printed --kafka-config); and every
    sentence about the kill agrees with the WAL, wherever the kill landed: the
    uncommitted entries it reports at the kill and after the restart add up to what
    `durablewal regions` counts, each told with its origin (the killed attempt, or the
    restart's replay of a micro-batch the WAL had committed), and "no uncommitted entry"
    is said only when there was none."""
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"),
           **fetch_env(tmp_path / "cache")}  # Kafka's jars: the suite's Maven resolve
    folder = tmp_path / "state" / "durablewal" / "kafka"
    sasl_port = free_port()
    started = durablewal(
        env, "kafka", "start", "--sasl", "--port", free_port(), "--sasl-port", sasl_port, timeout=300
    )
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        demo = durablewal(env, "demo", "--backend", "kafka", "--files", "4", "--rows", "100",
                          "--kill-after", "2", "--kill-at", "random")
        assert demo.returncode == 0, demo.stdout + demo.stderr[-3000:]
        out = demo.stdout
        assert f"orders -> WAL on Kafka 127.0.0.1:{sasl_port} (kafka backend" in out
        assert re.search(r"rows in\s+400\n\s+rows out\s+400\n\s+duplicates\s+0\n\s+lost\s+0", out)
        assert "killed the writer" in out and "EXACTLY ONCE" in out
        assert "landed between micro-batches" not in out, out
        client = ["--kafka-config", folder / "client.properties", "--namespace", "shop", "--json"]
        listed = durablewal(env, "steps", *client, timeout=120)
        assert listed.returncode == 0, listed.stderr
        assert len(json.loads(listed.stdout)["steps"]) == 4, listed.stdout
        regions = durablewal(env, "regions", *client, timeout=120)
        assert regions.returncode == 0, regions.stderr
        check_the_kill_report(out, sum(r["uncommitted"]
                                       for r in json.loads(regions.stdout)["regions"]))
        again = durablewal(env, "demo", "--backend", "kafka", timeout=120)
        assert again.returncode == 1 and "already holds namespace 'shop'" in again.stderr
    finally:
        stopped = durablewal(env, "kafka", "stop", timeout=120)
        assert stopped.returncode == 0, stopped.stderr


def check_the_kill_report(out: str, left: int) -> None:
    """The demo's sentences about a random kill against ``left``, the uncommitted entries
    the WAL holds."""
    report = re.search(r"^  uncommitted +(\d+) entries \((.*)\)$", out, re.M)
    assert report and int(report.group(1)) == left, (left, out)
    inside = re.search(r"^  the kill landed inside micro-batch (\d+): its tasks had written "
                       r"(\d+) entries", out, re.M)
    none = re.search(r"^  the WAL holds no uncommitted entry", out, re.M)
    assert bool(inside) != bool(none), out  # one sentence at the kill, from the WAL
    at_kill = int(inside.group(2)) if inside else 0
    if inside:
        assert f"{at_kill} written by the killed attempt of micro-batch {inside.group(1)}" \
            in report.group(2), out
    restart = out.index("[3/4]")
    replays = REPLAY_LINE.findall(out[restart:])
    replay = re.search(r"^  so the kill came after the WAL committed micro-batch (\d+) and "
                       r"before Spark's checkpoint recorded it: .* the (\d+) entries", out, re.M)
    assert bool(replay) == bool(replays), out
    if replay:
        assert replay.group(1) == replays[0][0] and int(replay.group(2)) == left - at_kill, out
    if left > at_kill:
        assert f"{left - at_kill} by the restart's replay" in report.group(2), out
    else:
        assert "replay" not in report.group(2), out
